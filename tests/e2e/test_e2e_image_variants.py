"""Each image variant the docs document, built by the real engine from the documented args.

The builds are read from the docs (tests/support/image_docs.py: the ``docker build``
commands of README.md, docs/, examples/ and the docker/ Dockerfiles' comments, and the
``--build-arg NAME=VALUE`` docs/backendai.md gives for "the image above"), so that a wrong
build argument in the docs fails here: BuildKit ignores an argument no ``ARG`` declares
(docs/backendai.md once said ``ARG FRAMEWORKS=tensorflow`` for ``DE_FRAMEWORKS``, and the
build made a PyTorch image). Each distinct variant (Dockerfile + documented build arguments)
is built once with Debian's Docker engine (tests/e2e/engine.py), offline:

* docker/<framework>.Dockerfile from the repository root with the documented arguments
  plus this machine's own (:data:`engine.OFFLINE_ARGS`: the Debian base, torch from this
  host's disk); ``DERIVE_ENV_WHEELS=wheelhouse`` (``make wheelhouse`` first) builds the
  same image and is built as the default;
* examples/backendai/Dockerfile (docs/backendai.md shows it verbatim) from a folder holding
  it, ``train.py`` and the copy of this repository as ``derive-env/`` it COPYs from, with
  two lines stood in: ``FROM`` the Debian base (python:3.11-slim is in no registry here)
  and no ``pip install torch`` (PyPI's torch is the CUDA build, several GB; the docs leave
  the framework install to the reader: "and TensorFlow installed").

Then for each image: the frameworks label is the documented framework (the value of
``DE_FRAMEWORKS`` when documented, else the Dockerfile's: docker/<framework>.Dockerfile's
framework, PyTorch for docs/backendai.md's "3-container PyTorch job"), every label fed by a
build argument has that argument's value, the labels file agrees with the labels, derive-env
in the image derives the variables of those frameworks and no others (docker/env/sub1.env),
and a docker/ image has exactly the documented frameworks installed and importable.

Measured on 2 shared cores with the engine's cache warm (the docker/ images already built by
test_e2e_docker.py): about 50 s, most of it the frameworks' imports in the images; about 35 s
more after a change of src/ (derive-env's install into the Backend.AI image, from PyPI).
Needs root, Debian's docker.io and mmdebstrap (`make engine`); skipped without them, a
FAILURE under CI=true.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path

import pytest

from engine import OFFLINE_ARGS, REPO, Engine, base_image, offline_build_args
from support.image_docs import (
    BACKENDAI_DOCKERFILE,
    FRAMEWORKS_LABEL,
    declared_args,
    documented_builds,
    documented_frameworks,
    label_args,
    undeclared,
    variants,
)

pytestmark = pytest.mark.e2e

BUILDS = documented_builds()
#: ``DERIVE_ENV_WHEELS=wheelhouse`` makes the same image from a prepared wheelhouse/.
VARIANTS = variants(BUILDS, OFFLINE_ARGS | {"DERIVE_ENV_WHEELS"})
#: Each framework's module, and a variable derive-env derives for it alone.
MODULES = {"pytorch": "torch", "tensorflow": "tensorflow", "jax": "jax"}
MARKERS = {"pytorch": "MASTER_ADDR", "tensorflow": "TF_CONFIG", "jax": "JAX_PROCESS_ID"}
Variant = tuple[str, tuple[tuple[str, str], ...]]


def _slug(variant: Variant) -> str:
    dockerfile, args = variant
    name = Path(dockerfile).stem if dockerfile.startswith("docker/") else "backendai"
    return "-".join([name, *(f"{n}={v}" for n, v in args)])


def _backendai_context(engine: Engine, folder: Path) -> Path:
    """The folder docs/backendai.md builds from: the Dockerfile (FROM the Debian base, no
    ``pip install torch``), ``train.py`` and ``derive-env/`` with what its COPYs name."""
    text = (REPO / BACKENDAI_DOCKERFILE).read_text()
    text, froms = re.subn(r"^FROM python:\S+$", f"FROM {base_image(engine)}", text, flags=re.M)
    text, installs = re.subn(r"^RUN pip install [^\n]*\btorch\b[^\n]*\n", "", text, flags=re.M)
    assert (froms, installs) == (1, 1), (
        f"{BACKENDAI_DOCKERFILE}: the test stands in one `FROM python:...` line and one "
        f"`RUN pip install ... torch` line; found {froms} and {installs}")
    folder.mkdir()
    (folder / "Dockerfile").write_text(text)
    for line in re.findall(r"^COPY (.+)$", text, flags=re.M):
        for source in line.split()[:-1]:
            inside = source.removeprefix("derive-env/")
            origin = (REPO / inside if inside != source
                      else REPO / Path(BACKENDAI_DOCKERFILE).parent / source)
            target = folder / source
            target.parent.mkdir(parents=True, exist_ok=True)
            if origin.is_dir():
                shutil.copytree(origin, target, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy(origin, target)
    return folder


def _build(engine: Engine, variant: Variant, tmp_path: Path) -> str:
    """Build ``variant`` (see the module docstring); its tag."""
    dockerfile, args = variant
    tag = "derive-env-e2e/variant:" + re.sub(r"[^a-z0-9_.-]+", "-", _slug(variant).lower())
    documented = [a for name, value in args for a in ("--build-arg", f"{name}={value}")]
    if dockerfile == BACKENDAI_DOCKERFILE:
        context = _backendai_context(engine, tmp_path / "context")
        engine.docker("build", "--network", "host", *documented, "-t", tag, str(context),
                      timeout=1800)
    else:
        engine.docker("build", "--network", "host", "-f", dockerfile,
                      *offline_build_args(engine, dockerfile), *documented, "-t", tag, ".",
                      cwd=REPO, timeout=1800)
    return tag


def _run(engine: Engine, tag: str, *command: str) -> str:
    """stdout of ``command`` in a container of ``tag`` (no network, no entrypoint)."""
    return engine.docker("run", "--rm", "--network", "none", "--entrypoint", command[0],
                         "--env-file", str(REPO / "docker" / "env" / "sub1.env"), tag,
                         *command[1:], timeout=300).stdout


@pytest.mark.parametrize("variant", sorted(VARIANTS), ids=_slug)
def test_documented_variant_has_the_documented_labels_and_frameworks(
        engine: Engine, variant: Variant, tmp_path: Path) -> None:
    dockerfile, args = variant
    where = ", ".join(VARIANTS[variant])
    assert [m for b in BUILDS if b.dockerfile == dockerfile for m in undeclared(b)] == []
    started = time.monotonic()
    tag = _build(engine, variant, tmp_path)
    print(f"{_slug(variant)} ({where}): built in {time.monotonic() - started:.1f} s")
    frameworks = documented_frameworks(dockerfile, args)

    labels = json.loads(engine.docker("image", "inspect", "--format",
                                      "{{json .Config.Labels}}", tag).stdout)
    assert labels[FRAMEWORKS_LABEL] == frameworks, where
    declared = declared_args(dockerfile)
    fed = {label: dict(args).get(arg, declared[arg])
           for label, arg in label_args(dockerfile).items()}
    assert {label: labels.get(label) for label in fed} == fed, where
    baked = json.loads(_run(engine, tag, "cat", "/etc/derive-env/labels.json"))
    assert baked == {label: labels.get(label) for label in baked}, where
    assert baked[FRAMEWORKS_LABEL] == frameworks, where

    derived = dict(line.split("=", 1) for line in _run(
        engine, tag, "derive-env", "--dry-run", "--format", "env").splitlines())
    assert {f for f, name in MARKERS.items() if name in derived} == set(
        frameworks.split(",")), derived
    if dockerfile.startswith("docker/"):
        present = _run(engine, tag, "python", "-c", (
            "import importlib.util as u; print(*sorted(m for m in ('torch', 'tensorflow', "
            "'jax') if u.find_spec(m)))")).split()
        assert present == sorted(MODULES[f] for f in frameworks.split(","))
        imported = _run(engine, tag, "python", "-c", "; ".join(
            f"import {m}; print({m}.__name__)" for m in present)).split()
        assert imported == present
