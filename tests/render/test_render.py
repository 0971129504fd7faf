"""--dry-run output: env / json / toml / shell (contract section 2)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from derive_env.labels import PREFIX
from derive_env.pipeline import Derivation, derive
from derive_env.render import FORMATS, render
from helpers import made, tomllib

TF_CONFIG = '{"cluster":{"worker":["main1:2222","sub1:2222"]},"task":{"type":"worker","index":1}}'


def test_formats() -> None:
    assert FORMATS == (
        "env", "json", "toml", "shell",
        "hosts", "openmpi-hostfile", "mpich-hostfile", "deepspeed-hostfile", "horovod-hosts",
        "digest", "digest-facts",
    )


def test_env(derivation: Derivation) -> None:
    assert render(derivation, "env") == (
        "MASTER_ADDR=main1\n"
        "NODE_RANK=1\n"
        "PET_NNODES=2\n"
        "PET_NODE_RANK=1\n"
        "PET_MASTER_ADDR=main1\n"
        "PET_MASTER_PORT=1111\n"
        f"TF_CONFIG={TF_CONFIG}\n"
        "DERIVE_ENV_RUN_ID=baabe386f959eebf\n"
    )


def test_json(derivation: Derivation) -> None:
    text = render(derivation, "json")
    assert text == (
        '{"MASTER_ADDR": "main1", "NODE_RANK": "1", "PET_NNODES": "2", "PET_NODE_RANK": "1", '
        '"PET_MASTER_ADDR": "main1", "PET_MASTER_PORT": "1111", "TF_CONFIG": '
        + json.dumps(TF_CONFIG) + ', "DERIVE_ENV_RUN_ID": "baabe386f959eebf"}\n'
    )
    assert text.count("\n") == 1
    parsed = json.loads(text)
    assert parsed == derivation.changes()
    assert "MASTER_PORT" not in parsed  # kept: the exec does not change it
    assert all(isinstance(v, str) for v in parsed.values())


def test_toml(derivation: Derivation) -> None:
    text = render(derivation, "toml")
    assert text == (
        'MASTER_ADDR = "main1"\n'
        'NODE_RANK = "1"\n'
        'PET_NNODES = "2"\n'
        'PET_NODE_RANK = "1"\n'
        'PET_MASTER_ADDR = "main1"\n'
        'PET_MASTER_PORT = "1111"\n'
        'TF_CONFIG = "{\\"cluster\\":{\\"worker\\":[\\"main1:2222\\",\\"sub1:2222\\"]},'
        '\\"task\\":{\\"type\\":\\"worker\\",\\"index\\":1}}"\n'
        'DERIVE_ENV_RUN_ID = "baabe386f959eebf"\n'
    )
    assert tomllib.loads(text) == derivation.changes()


def test_shell(derivation: Derivation) -> None:
    assert render(derivation, "shell") == (
        "export MASTER_ADDR='main1'\n"
        "export NODE_RANK='1'\n"
        "export PET_NNODES='2'\n"
        "export PET_NODE_RANK='1'\n"
        "export PET_MASTER_ADDR='main1'\n"
        "export PET_MASTER_PORT='1111'\n"
        f"export TF_CONFIG='{TF_CONFIG}'\n"
        "export DERIVE_ENV_RUN_ID='baabe386f959eebf'\n"
    )


@pytest.mark.parametrize("fmt", ["env", "json", "toml", "shell"])
def test_never_prints_input_variables(backendai_env, fmt: str) -> None:
    env = {**backendai_env(["main1", "sub1"], "sub1"), "AWS_SECRET_ACCESS_KEY": "s3cr3t"}
    result = derive(env, {PREFIX + "frameworks": "pytorch"})
    text = render(result, fmt)
    assert "s3cr3t" not in text
    assert "BACKENDAI_" not in text


@pytest.mark.parametrize(("fmt", "text"), [
    ("json", "{}\n"), ("env", ""), ("toml", ""), ("shell", ""),
])
def test_not_opted_in(fmt: str, text: str) -> None:
    assert render(None, fmt) == text
    assert render(derive({"MASTER_ADDR": "x"}, {"maintainer": "me"}), fmt) == text


def test_unknown_format(derivation: Derivation) -> None:
    with pytest.raises(ValueError, match="unknown format 'yaml'"):
        render(derivation, "yaml")


@pytest.mark.parametrize("fmt", ["digest", "digest-facts"])
def test_digest_formats_are_rendered_elsewhere(derivation: Derivation, fmt: str) -> None:
    with pytest.raises(ValueError, match=f"format '{fmt}' is rendered by "
                                         "derive_env.digest.render_digest"):
        render(derivation, fmt)


NASTY = {
    "SINGLE": "it's",
    "DOUBLE": 'say "hi"',
    "DOLLAR": "$HOME ${PATH} $(echo pwned) $1",
    "BACKTICK": "`echo pwned`",
    "NEWLINES": "line1\nline2\n",
    "BACKSLASH": "a\\b\\\\c\\n",
    "EMPTY": "",
    "BLANKS": "  lead and trail  ",
    "GLOB": "* ? [a] ~ ~root",
    "MIXED": "'\"$`\\\n;|&<>(){}#!",
    "UNICODE": "ünï ✓",
    "TF_CONFIG": TF_CONFIG,
}


def test_shell_eval_round_trips_exactly(tmp_path) -> None:
    text = render(made(NASTY), "shell")
    dump = "import json, os, sys; sys.stdout.write(json.dumps(dict(os.environ)))"
    script = f'eval "$1" && exec "$2" -c "{dump}"'
    done = subprocess.run(
        ["sh", "-c", script, "sh", text, sys.executable],
        capture_output=True, text=True, timeout=30, cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent"},
    )
    assert done.returncode == 0, done.stderr
    environ = json.loads(done.stdout)
    assert {k: environ.get(k) for k in NASTY} == NASTY
    assert not (tmp_path / "pwned").exists()


def test_shell_lines_are_one_export_per_variable() -> None:
    text = render(made({"A": "x y", "B": "it's"}), "shell")
    assert text == "export A='x y'\nexport B='it'\"'\"'s'\n"


def test_kept_variables_not_rendered() -> None:
    result = made({"A": "1"}, kept={"B": "user"})
    assert render(result, "json") == '{"A": "1"}\n'
    assert render(result, "env") == "A=1\n"
    assert render(result, "shell") == "export A='1'\n"


def test_json_round_trips_nasty_values() -> None:
    assert json.loads(render(made(NASTY), "json")) == NASTY
    assert tomllib.loads(render(made(NASTY), "toml")) == NASTY
