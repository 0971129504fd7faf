"""The wheel and sdist, installed as a user would (issue 8): online, offline, isolated.

One wheel and sdist are built per test session (``python -m build``, as ``make dist``), then:

* their metadata: Requires-Python ``>=3.10``, exactly pydantic, click and tomli-w with the
  ranges of pyproject.toml, the Apache-2.0 LICENSE inside; ``twine check --strict`` passes;
* the wheel installs into fresh CPython 3.10 and 3.13 venvs, online (dependencies from the
  package index) and offline (a wheelhouse made by ``pip download`` for that Python, then
  ``pip install --no-index`` with every pip configuration switched off), and there derives
  the variables of container sub1 of docker/env/'s Backend.AI session;
* the isolated install of the docs: derive-env in a venv of its own, linked onto PATH, runs
  ``derive-env -- python -c ...`` in a "training" venv that pins pydantic 1.x and click 7;
  the user's code runs in the user's interpreter with the derived variables, and nothing of
  derive-env's venv (VIRTUAL_ENV, PYTHONPATH, PYTHONHOME, its interpreter or its path) leaks
  into the command's environment, also when the image's PYTHONPATH holds that pydantic 1.x;
* the documented wrapper (``python -I -m derive_env``) for images that set PYTHONHOME.

Needs the network for the online installs (the package index is reachable here and on CI).
The interpreters come from pyenv, as in the Makefile; under ``CI=true`` a missing one fails.
Marked ``packaging``: the per-Python unit test runs of ``make test`` leave these out.
"""

from __future__ import annotations

import email.parser
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from helpers import tomllib

pytestmark = pytest.mark.packaging

REPO = Path(__file__).resolve().parents[1]
PREFIX = "ai.backend.distributed."
#: What container sub1 of docker/env/'s session gets with labels pytorch,tensorflow,jax
#: (contract sections 5 and 6: main1 is the master although HOSTS lists it last).
SUB1_EXPECTED = {
    "MASTER_ADDR": "main1",
    "MASTER_PORT": "29500",
    "NODE_RANK": "1",
    "PET_NNODES": "3",
    "PET_NODE_RANK": "1",
    "PET_MASTER_ADDR": "main1",
    "PET_MASTER_PORT": "29500",
    "TF_CONFIG": '{"cluster":{"worker":["main1:2222","sub1:2222","sub2:2222"]},'
    '"task":{"type":"worker","index":1}}',
    "JAX_COORDINATOR_ADDRESS": "main1:1234",
    "JAX_NUM_PROCESSES": "3",
    "JAX_PROCESS_ID": "1",
    "DERIVE_ENV_RUN_ID": "c971aac866e48a11",  # the session's id, hashed
}
INSTALL_TIMEOUT = 600  # seconds, per pip run (a slow index must not hang the suite)


# ---------------------------------------------------------------- helpers


def find_python(version: str) -> str:
    """The newest CPython ``version`` (e.g. ``3.10``) under pyenv, else ``python3.10`` on PATH.

    The same search as the Makefile's ``python_of``; skips (fails under CI=true) if none.
    """
    from helpers import require

    root = os.environ.get("PYENV_ROOT") or str(Path.home() / ".pyenv")
    if shutil.which("pyenv"):
        out = subprocess.run(["pyenv", "root"], capture_output=True, text=True, timeout=30)
        root = out.stdout.strip() or root
    found = sorted(
        Path(root, "versions").glob(f"{version}.*/bin/python3"),
        key=lambda p: [int(n) for n in re.findall(r"\d+", p.parent.parent.name)],
    )
    candidate = str(found[-1]) if found else shutil.which(f"python{version}")
    require(candidate is not None, f"no CPython {version} (pyenv or python{version} on PATH)")
    assert candidate is not None
    return candidate


def run(argv: Sequence[str], *, env: Mapping[str, str] | None = None,
        timeout: float = INSTALL_TIMEOUT) -> subprocess.CompletedProcess[str]:
    """Run ``argv``; a non-zero exit fails the test with its output."""
    result = subprocess.run(
        list(argv), capture_output=True, text=True, timeout=timeout,
        env=None if env is None else dict(env),
    )
    assert result.returncode == 0, (argv, result.stdout[-3000:], result.stderr[-3000:])
    return result


def offline_pip_env() -> dict[str, str]:
    """This environment without any pip setting: no index, no find-links from a config file.

    So ``pip install --no-index --find-links WHEELHOUSE`` can only use the wheelhouse.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def new_venv(python: str, folder: Path) -> Path:
    """``python -m venv folder``; returns its ``bin``."""
    run([python, "-m", "venv", str(folder)], timeout=120)
    return folder / "bin"


def derive_sub1(bin_dir: Path, tmp: Path) -> dict[str, str]:
    """``derive-env --dry-run --format json`` of that venv for container sub1."""
    empty = tmp / "no-baked-labels.json"
    empty.write_text("{}")
    env = {"PATH": "/usr/bin:/bin", "DERIVE_ENV_LABELS_FILE": str(empty)}
    out = run(
        [str(bin_dir / "derive-env"), "--dry-run", "--format", "json",
         "--env-file", str(REPO / "docker" / "env" / "sub1.env"),
         "--label", PREFIX + "frameworks=pytorch,tensorflow,jax"],
        env=env, timeout=60,
    )
    return json.loads(out.stdout)


def pyproject_dependencies() -> list[str]:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]


def requirement_key(text: str) -> tuple[str, frozenset[str]]:
    """``"pydantic>=2.6,<3"`` and ``"pydantic<3,>=2.6"`` -> ("pydantic", {">=2.6", "<3"})."""
    match = re.fullmatch(r"\s*([A-Za-z0-9_.-]+)\s*(.*)", text)
    assert match, text
    name = re.sub(r"[-_.]+", "-", match[1]).lower()
    return name, frozenset(s.replace(" ", "") for s in match[2].split(",") if s.strip())


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def dist(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The wheel and sdist of this checkout, built once per test process (``python -m
    build``) from a copy: setuptools writes ``build/`` and ``*.egg-info`` into the tree it
    builds, and two xdist workers building one tree at once break each other's build."""
    out = tmp_path_factory.mktemp("dist")
    tree = tmp_path_factory.mktemp("checkout") / "derive-env"
    shutil.copytree(REPO, tree, symlinks=True, ignore=shutil.ignore_patterns(
        ".git", ".venv*", "build", "dist", "*.egg-info", "__pycache__", ".*_cache",
        ".hypothesis", "torch-wheels", "wheelhouse"))
    run([sys.executable, "-m", "build", "--outdir", str(out), str(tree)])
    wheels, sdists = list(out.glob("*.whl")), list(out.glob("*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, list(out.iterdir())
    return {"wheel": wheels[0], "sdist": sdists[0]}


@pytest.fixture(scope="session")
def online_venvs(dist: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
                 ) -> dict[str, Path]:
    """Python version -> ``bin`` of a fresh venv with the wheel installed from the index."""
    result = {}
    for version in ("3.10", "3.13"):
        python = find_python(version)
        bin_dir = new_venv(python, tmp_path_factory.mktemp(f"online-{version}") / "venv")
        run([str(bin_dir / "pip"), "install", "--quiet", str(dist["wheel"])])
        result[version] = bin_dir
    return result


# ---------------------------------------------------------------- metadata


def test_wheel_metadata_lists_exactly_the_runtime_dependencies(dist: dict[str, Path]) -> None:
    with zipfile.ZipFile(dist["wheel"]) as wheel:
        names = wheel.namelist()
        (metadata_name,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        metadata = email.parser.Parser().parsestr(wheel.read(metadata_name).decode())
        (license_name,) = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]
        license_text = wheel.read(license_name).decode()
    assert metadata["Name"] == "derive-env"
    assert metadata["Requires-Python"] == ">=3.10"
    assert metadata["License-Expression"] == "Apache-2.0"
    required = sorted(requirement_key(r) for r in metadata.get_all("Requires-Dist"))
    assert required == sorted(requirement_key(r) for r in pyproject_dependencies())
    assert [name for name, _ in required] == ["click", "pydantic", "tomli-w"]
    assert dict(required)["pydantic"] == {">=2.6", "<3"}
    # click 8.4's wording of its usage errors is what the CLI tests (and docs) show
    assert dict(required)["click"] == {">=8.4", "<9"}
    assert metadata.get_all("Provides-Extra") is None  # test tools are a dependency group
    assert license_text == (REPO / "LICENSE").read_text()
    assert "Apache License\n                           Version 2.0" in license_text
    classifiers = metadata.get_all("Classifier")
    for version in ("3.10", "3.11", "3.12", "3.13"):
        assert f"Programming Language :: Python :: {version}" in classifiers
    home = "https://github.com/derive-env/derive-env"
    assert metadata.get_all("Project-URL") == [
        f"Homepage, {home}", f"Documentation, {home}/tree/main/docs",
        f"Changelog, {home}/blob/main/docs/CHANGELOG.md", f"Issues, {home}/issues"]
    assert "derive_env/__main__.py" in names
    assert not [n for n in names if n.startswith("tests/")]


def test_makefile_tests_the_lower_bounds_of_the_ranges() -> None:
    """``make test``'s run with the lowest allowed versions uses exactly the lower bounds."""
    (line,) = [
        line for line in (REPO / "Makefile").read_text().splitlines()
        if line.startswith("LOWEST_DEPS :=")
    ]
    pinned = dict(pin.split("==") for pin in line.split(":=", 1)[1].split())
    lower = {}
    for name, specifiers in map(requirement_key, pyproject_dependencies()):
        (bound,) = [s[2:] for s in specifiers if s.startswith(">=")]
        lower[name] = bound

    def release(version: str) -> tuple[int, ...]:
        """``"1.0.0"`` and ``"1.0"`` -> ``(1,)``: equal versions compare equal."""
        parts = [int(n) for n in version.split(".")]
        while parts and parts[-1] == 0:
            parts.pop()
        return tuple(parts)

    assert {name: release(v) for name, v in pinned.items()} == {
        name: release(v) for name, v in lower.items()
    }


def test_sdist_holds_license_sources_and_tests(dist: dict[str, Path]) -> None:
    with tarfile.open(dist["sdist"]) as sdist:
        names = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    for name in ("LICENSE", "README.md", "pyproject.toml", "src/derive_env/__init__.py",
                 "src/derive_env/sources/managers/backendai.py"):
        assert name in names, name


def test_twine_check_passes(dist: dict[str, Path]) -> None:
    out = run([sys.executable, "-m", "twine", "check", "--strict",
               str(dist["wheel"]), str(dist["sdist"])], timeout=120)
    assert out.stdout.count("PASSED") == 2, out.stdout


# ---------------------------------------------------------------- installs


@pytest.mark.parametrize("version", ["3.10", "3.13"])
def test_online_install_derives_a_backendai_container(
    online_venvs: dict[str, Path], version: str, tmp_path: Path
) -> None:
    bin_dir = online_venvs[version]
    out = run([str(bin_dir / "python"), "-c",
               "import sys, derive_env; print(sys.version_info[:2], derive_env.__file__)"],
              timeout=60)
    assert out.stdout.startswith(f"({version.replace('.', ', ')})"), out.stdout
    assert str(bin_dir.parent) in out.stdout  # the installed wheel, not this checkout
    assert derive_sub1(bin_dir, tmp_path) == SUB1_EXPECTED


@pytest.mark.parametrize("version", ["3.10", "3.13"])
def test_wheelhouse_installs_with_no_index(
    dist: dict[str, Path], version: str, tmp_path: Path
) -> None:
    """As docs/integration.md and ``make wheelhouse``: download for the target Python, then
    install where no index is reachable."""
    python = find_python(version)
    wheelhouse = tmp_path / "wheelhouse"
    run([sys.executable, "-m", "pip", "download", "--quiet", "--dest", str(wheelhouse),
         "--only-binary=:all:", "--python-version", version, "--implementation", "cp",
         "--platform", f"manylinux2014_{platform.machine()}", str(dist["wheel"])])
    files = sorted(p.name for p in wheelhouse.iterdir())
    assert dist["wheel"].name in files
    for project in ("pydantic-", "pydantic_core-", "click-", "tomli_w-"):
        assert any(name.startswith(project) for name in files), (project, files)
    tag = f"cp{version.replace('.', '')}"
    assert next(n for n in files if n.startswith("pydantic_core-")).split("-")[2] == tag

    bin_dir = new_venv(python, tmp_path / "venv")
    run([str(bin_dir / "pip"), "install", "--quiet", "--no-index", "--find-links",
         str(wheelhouse), "derive-env"], env=offline_pip_env())
    assert derive_sub1(bin_dir, tmp_path) == SUB1_EXPECTED


# ---------------------------------------------------------------- isolated install

#: Run by the training interpreter: who am I, what did I get.
PROBE = """
import importlib.util, json, os, sys
import click, pydantic
print(json.dumps({
    "executable": sys.executable,
    "prefix": sys.prefix,
    "pydantic": pydantic.VERSION,
    "click": click.__version__,
    "derive_env_importable": importlib.util.find_spec("derive_env") is not None,
    "environ": dict(os.environ),
}))
"""
LEAKY = ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "PYTHONEXECUTABLE", "__PYVENV_LAUNCHER__")


@pytest.fixture(scope="module")
def training_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 3.10 "training" venv with an older stack's pins: pydantic 1.x and click 7."""
    bin_dir = new_venv(find_python("3.10"), tmp_path_factory.mktemp("training") / "venv")
    run([str(bin_dir / "pip"), "install", "--quiet", "pydantic<2", "click<8"])
    return bin_dir


@pytest.fixture
def isolated_path(online_venvs: dict[str, Path], tmp_path: Path) -> tuple[Path, Path]:
    """(own venv, bin folder holding only the ``derive-env`` link), as the docs install it:
    ``ln -s /opt/derive-env/bin/derive-env /usr/local/bin/derive-env``."""
    own = online_venvs["3.13"]
    link_dir = tmp_path / "usr-local-bin"
    link_dir.mkdir()
    (link_dir / "derive-env").symlink_to(own / "derive-env")
    return own.parent, link_dir


@pytest.mark.parametrize("how", ["python on PATH", "absolute path"])
@pytest.mark.parametrize(
    "image_env", ["plain", "training venv activated", "PYTHONPATH holds the training stack"]
)
def test_isolated_install_runs_the_users_interpreter_untouched(
    training_venv: Path, isolated_path: tuple[Path, Path], tmp_path: Path,
    how: str, image_env: str,
) -> None:
    own_venv, link_dir = isolated_path
    labels = tmp_path / "labels.json"
    labels.write_text(json.dumps({PREFIX + "frameworks": "pytorch"}))
    user_lib = tmp_path / "workspace-lib"
    user_lib.mkdir()
    env = {
        "PATH": f"{link_dir}:{training_venv}:/usr/bin:/bin",
        "DERIVE_ENV_LABELS_FILE": str(labels),
        **_read_env(REPO / "docker" / "env" / "sub1.env"),
    }
    if image_env == "training venv activated":
        # An image whose Dockerfile sets ENV VIRTUAL_ENV/PYTHONPATH for ITS training code:
        # those values are the user's, and must reach the command exactly as set.
        env["VIRTUAL_ENV"] = str(training_venv.parent)
        env["PYTHONPATH"] = str(user_lib)
    elif image_env == "PYTHONPATH holds the training stack":
        # pydantic 1.x and click 7 on PYTHONPATH must not shadow derive-env's own (they did:
        # ImportError: cannot import name 'BeforeValidator' from 'pydantic').
        (site,) = training_venv.parent.glob("lib/python3.*/site-packages")
        env["PYTHONPATH"] = f"{user_lib}{os.pathsep}{site}"
    python = "python" if how == "python on PATH" else str(training_venv / "python")
    result = subprocess.run(
        ["derive-env", "--", python, "-c", PROBE],
        capture_output=True, text=True, timeout=60, env=env,
        executable=str(link_dir / "derive-env"),
    )
    assert result.returncode == 0, result.stderr
    probe = json.loads(result.stdout)
    seen = probe["environ"]

    assert probe["executable"] == str(training_venv / "python")
    assert probe["prefix"] == str(training_venv.parent)
    assert probe["pydantic"].startswith("1.")
    assert probe["click"].startswith("7.")
    assert probe["derive_env_importable"] is False
    for name in ("MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "PET_NNODES", "PET_NODE_RANK"):
        assert seen[name] == SUB1_EXPECTED[name], name
    expected_user = {k: env[k] for k in LEAKY if k in env}
    assert {k: seen[k] for k in LEAKY if k in seen} == expected_user
    assert seen["PATH"] == env["PATH"]
    leaked = {k: v for k, v in seen.items() if str(own_venv) in v}
    assert leaked == {}, f"derive-env's venv leaked into the command's environment: {leaked}"


def _read_env(path: Path) -> dict[str, str]:
    """A Compose env file (``KEY=VALUE``, ``#`` comments) as a dict."""
    lines = path.read_text().splitlines()
    pairs = (line.split("=", 1) for line in lines if line.strip() and not line.startswith("#"))
    return {key.strip(): value.strip() for key, value in pairs}


def test_isolated_mode_wrapper_survives_an_images_pythonhome(
    training_venv: Path, online_venvs: dict[str, Path], tmp_path: Path
) -> None:
    """docs/integration.md's fix for an image that sets PYTHONHOME: a wrapper running
    derive-env's Python with -I. derive-env runs; the command still gets PYTHONHOME."""
    documented = r"""printf '#!/bin/sh\nexec /opt/derive-env/bin/python -I -m derive_env "$@"\n'"""
    assert documented in (REPO / "docs" / "integration.md").read_text()
    own = online_venvs["3.10"]
    wrapper = tmp_path / "derive-env"
    wrapper.write_text(f'#!/bin/sh\nexec {own / "python"} -I -m derive_env "$@"\n')
    wrapper.chmod(0o755)
    labels = tmp_path / "labels.json"
    labels.write_text(json.dumps({PREFIX + "frameworks": "pytorch"}))
    env = {
        "PATH": "/usr/bin:/bin",
        "DERIVE_ENV_LABELS_FILE": str(labels),
        # The training venv's prefix as PYTHONHOME: no stdlib there for derive-env's Python.
        "PYTHONHOME": str(training_venv.parent),
        **_read_env(REPO / "docker" / "env" / "sub2.env"),
    }
    # derive-env's symlinked script does not even start under this PYTHONHOME:
    broken = subprocess.run([str(own / "derive-env"), "--version"], capture_output=True,
                            text=True, timeout=60, env=env)
    assert broken.returncode != 0
    assert "No module named 'encodings'" in broken.stderr
    result = subprocess.run(
        [str(wrapper), "--", "/bin/sh", "-c", 'echo "$PYTHONHOME $NODE_RANK $MASTER_ADDR"'],
        capture_output=True, text=True, timeout=60, env=env,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{training_venv.parent} 2 main1\n"
