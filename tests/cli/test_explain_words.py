"""--explain speaks of the image's containers only where a labels file was read (#27):
``--frameworks`` or ``DERIVE_ENV_FRAMEWORKS`` without one is a job on nodes."""

from __future__ import annotations

from pathlib import Path

import pytest

from derive_env import cli

OPT_IN = "ai.backend.distributed.frameworks"


@pytest.fixture
def bare_metal(clean_environ: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No labels file at all: neither DERIVE_ENV_LABELS_FILE nor the default path exists."""
    monkeypatch.delenv("DERIVE_ENV_LABELS_FILE")
    monkeypatch.setattr(cli, "DEFAULT_LABELS_FILE", str(tmp_path / "etc" / "labels.json"))


def first_line(capsys: pytest.CaptureFixture[str], **options: object) -> str:
    assert cli.run([], dry_run=True, explain=True, **options) == 0
    return capsys.readouterr().out.splitlines()[0]


def test_frameworks_on_bare_metal_is_a_node(bare_metal: None,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert first_line(capsys, frameworks="pytorch") == "source: standalone, single node"


def test_the_variable_on_bare_metal_is_a_node(bare_metal: None, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("DERIVE_ENV_FRAMEWORKS", "jax")
    assert first_line(capsys) == "source: standalone, single node"


def test_an_image_labels_file_is_a_container(clean_environ: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    clean_environ.write_text(f'{{"{OPT_IN}": "pytorch"}}', encoding="utf-8")
    assert first_line(capsys) == "source: standalone, single container"


def test_all_nodes_speaks_alike(bare_metal: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.run([], dry_run=True, explain=True, all_nodes=True, frameworks="pytorch") == 0
    assert capsys.readouterr().out.splitlines()[0] == "source: standalone, single node"


def test_the_sources_on_bare_metal_speak_of_a_node_as_the_header(
        bare_metal: None, capsys: pytest.CaptureFixture[str]) -> None:
    """The variables' provenance says "single node" (a container is a node too), never the
    container the header does not speak of."""
    assert cli.run([], dry_run=True, explain=True, frameworks="pytorch,tensorflow") == 0
    out = capsys.readouterr().out
    assert "container" not in out
    sources = [line.strip() for line in out.splitlines() if line.startswith(" ")]
    assert sources[:6] == [
        "source: single node: loopback", "source: default (29500, PyTorch's)",
        "source: single node", "source: single node: number of nodes", "source: single node",
        "source: same as MASTER_ADDR: single node: loopback"]
    assert out.endswith("\nTF_CONFIG not set: a single node (TensorFlow trains locally)\n")
