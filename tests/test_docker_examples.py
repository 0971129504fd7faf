"""The docker/ examples, kept correct without a Docker engine.

What is checked, by reading the files and running derive-env on them:

* docker/compose.yaml (PyTorch image), compose.tensorflow.yaml and compose.jax.yaml run
  services main1, sub1, sub2, each with its own host name and its docker/env/<service>.env
  (the compose files keep the variables in env files so that this test can read them
  without a YAML library), built from their own example Dockerfile;
* the env files describe one Backend.AI session (same HOSTS, not starting with main1;
  LOCAL_RANK main1=0, sub1=1, sub2=2);
* each example Dockerfile (PyTorch, TensorFlow, JAX) declares every label value once as a
  build ARG, and its LABEL instruction and the labels file its RUN step writes hold the
  same labels, which derive-env accepts;
* each installs derive-env isolated (a venv of its own, only the command linked onto PATH)
  from a wheelhouse with ``pip install --no-index``: built from the source in a stage of
  its own, or the build context's ``wheelhouse/`` (``make wheelhouse``) for air-gapped
  builds, bind-mounted into the install step (no COPY: no layer keeps a wheel); the base
  is the build arg BASE_IMAGE (python:3.11-slim by default); the PyTorch image takes torch
  from PyTorch's CPU wheel index, or from the build context's torch-wheels/;
* ``derive-env --dry-run --format json`` run for each service with each image's labels
  gives one consistent session: master main1, 3 nodes, node ranks 0, 1, 2 matching the
  host names, the same TF_CONFIG cluster everywhere;
* docker/bootstrap.sh is valid POSIX sh, exports the variables when sourced, and stops
  the (simulated) entrypoint with derive-env's exit code on bad input.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCKER = REPO / "docker"
SERVICES = ("main1", "sub1", "sub2")
NODE_RANKS = {"main1": 0, "sub1": 1, "sub2": 2}
DOCKERFILES = ("pytorch.Dockerfile", "tensorflow.Dockerfile", "jax.Dockerfile")
#: compose file -> the example Dockerfile its services build
COMPOSE_FILES = {
    "compose.yaml": "docker/pytorch.Dockerfile",
    "compose.tensorflow.yaml": "docker/tensorflow.Dockerfile",
    "compose.jax.yaml": "docker/jax.Dockerfile",
}
#: The isolated install (docs/integration.md), as every example image runs it: the wheels
#: bind-mounted from the wheels stage for this step only (no layer keeps them).
ISOLATED_INSTALL = (
    "--mount=type=bind,from=derive-env-wheels,source=/wheelhouse,target=/mnt "
    "python3 -m venv /opt/derive-env "
    "&& /opt/derive-env/bin/pip install --no-cache-dir --no-index --find-links /mnt derive-env "
    "&& ln -s /opt/derive-env/bin/derive-env /usr/local/bin/derive-env"
)
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
PREFIX = "ai.backend.distributed."
SHARED = (
    "BACKENDAI_SESSION_ID",
    "BACKENDAI_CLUSTER_SIZE",
    "BACKENDAI_CLUSTER_HOSTS",
    "BACKENDAI_CLUSTER_REPLICAS",
)


# ---------------------------------------------------------------- small readers


def read_env_file(path: Path) -> dict[str, str]:
    """``KEY=VALUE`` lines; blank lines and ``#`` comments skipped (Compose's env_file)."""
    result = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, sep, value = line.partition("=")
            assert sep, f"{path}: not KEY=VALUE: {line!r}"
            result[key] = value
    return result


def compose_services(text: str) -> dict[str, dict[str, object]]:
    """The ``services:`` of a compose file written in the plain block style of ours.

    Returns service -> {key: scalar or list of scalars}; only two levels are read
    (``hostname: x``, ``env_file:`` followed by ``- item`` lines), which is all the test
    needs. Anchors and merge keys are left as their text.
    """
    services: dict[str, dict[str, object]] = {}
    in_services = False
    service = key = None
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].rstrip()
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        indent = len(line) - len(line.lstrip())
        content = line.strip()
        if indent == 0:
            in_services = content == "services:"
            continue
        if not in_services:
            continue
        if indent == 2 and content.endswith(":"):
            service, key = content[:-1], None
            services[service] = {}
        elif indent == 4 and service is not None:
            key, _, value = (s.strip() for s in content.partition(":"))
            services[service][key] = value if value else []
        elif indent == 6 and content.startswith("- ") and service and key:
            items = services[service][key]
            assert isinstance(items, list), f"{service}.{key}: mixed scalar and list"
            items.append(content[2:].strip())
    return services


def dockerfile_instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    logical: list[str] = []
    pending = ""
    for raw in path.read_text().splitlines():
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue  # comment lines inside a continued instruction are ignored by Docker
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        logical.append(pending + stripped)
        pending = ""
    assert not pending, f"{path}: ends inside a continued instruction"
    result = []
    for line in logical:
        word, _, rest = line.partition(" ")
        result.append((word.upper(), rest.strip()))
    return result


def arg_defaults(instructions: list[tuple[str, str]]) -> dict[str, str]:
    args = {}
    for word, rest in instructions:
        if word == "ARG":
            name, sep, default = rest.partition("=")
            assert sep, f"ARG {name} has no default: the example must build as it is"
            args[name] = default
    return args


def substitute(value: str, args: dict[str, str]) -> str:
    """Docker's ``${NAME}`` / ``$NAME`` substitution from build ARGs (no modifiers used)."""

    def one(match: re.Match[str]) -> str:
        name = match["braced"] or match["bare"]
        assert name in args, f"${name} is not a declared ARG"
        return args[name]

    return re.sub(r"\$(?:\{(?P<braced>\w+)\}|(?P<bare>\w+))", one, value)


def label_instruction_labels(
    instructions: list[tuple[str, str]], args: dict[str, str]
) -> dict[str, str]:
    labels = {}
    for word, rest in instructions:
        if word == "LABEL":
            for item in shlex.split(rest):
                key, sep, value = item.partition("=")
                assert sep, f"LABEL item {item!r} is not key=value"
                labels[key] = substitute(value, args)
    return labels


def labels_file_from_run(
    instructions: list[tuple[str, str]], args: dict[str, str], root: Path
) -> dict[str, str]:
    """Run the Dockerfile's RUN step that writes /etc/derive-env/labels.json, under ``root``.

    The step runs in ``sh`` with the ARG defaults in the environment, as docker build does.
    """
    steps = [rest for word, rest in instructions if word == "RUN" and "labels.json" in rest]
    assert len(steps) == 1, f"expected one RUN writing labels.json, found {len(steps)}"
    script = steps[0].replace("/etc/derive-env", str(root / "etc" / "derive-env"))
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **args}
    subprocess.run(["sh", "-c", script], env=env, check=True, timeout=30)
    return json.loads((root / "etc" / "derive-env" / "labels.json").read_text())


def derive_json(env: dict[str, str], labels_file: Path, tmp_path: Path) -> dict[str, str]:
    """``derive-env --dry-run --format json`` for one container; ``env`` is its input."""
    # A labels file baked into this machine must not leak in: point the baked path at {}.
    empty = tmp_path / "no-baked-labels.json"
    empty.write_text("{}")
    env_file = tmp_path / "container.env"
    env_file.write_text(
        "".join(f"{k}={v}\n" for k, v in {**env, "DERIVE_ENV_LABELS_FILE": str(empty)}.items())
    )
    result = subprocess.run(
        [sys.executable, "-m", "derive_env", "--dry-run", "--format", "json",
         "--env-file", str(env_file), "--labels-file", str(labels_file)],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def service_envs() -> dict[str, dict[str, str]]:
    return {s: read_env_file(DOCKER / "env" / f"{s}.env") for s in SERVICES}


@pytest.fixture(params=DOCKERFILES)
def image_labels(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, Path]:
    """(Dockerfile name, path of the labels file its RUN step writes)."""
    instructions = dockerfile_instructions(DOCKER / request.param)
    args = arg_defaults(instructions)
    labels_file_from_run(instructions, args, tmp_path)
    return request.param, tmp_path / "etc" / "derive-env" / "labels.json"


# ---------------------------------------------------------------- compose and env files


@pytest.mark.parametrize("compose_file", list(COMPOSE_FILES))
def test_compose_runs_three_services_from_their_env_files(compose_file: str) -> None:
    text = (DOCKER / compose_file).read_text()
    services = compose_services(text)
    assert sorted(services) == sorted(SERVICES)
    for name, spec in services.items():
        assert spec.get("hostname") == name
        assert spec.get("env_file") == [f"env/{name}.env"]
        assert (DOCKER / "env" / f"{name}.env").is_file()
        assert spec.get("networks") is None or spec.get("networks") == ["session"]
    # the services share one anchor: the build of this file's example image
    assert f"    dockerfile: {COMPOSE_FILES[compose_file]}\n" in text
    assert (REPO / COMPOSE_FILES[compose_file]).is_file()


@pytest.mark.parametrize("compose_file", list(COMPOSE_FILES))
def test_compose_reader_agrees_with_a_yaml_parser(compose_file: str) -> None:
    """Guard for the small reader above, where a YAML library happens to be installed.

    PyYAML is no dependency of derive-env; it comes with Lightning in the test virtualenv.
    """
    yaml = pytest.importorskip("yaml")
    document = yaml.safe_load((DOCKER / compose_file).read_text())
    ours = compose_services((DOCKER / compose_file).read_text())
    assert sorted(document["services"]) == sorted(ours)
    for name, spec in document["services"].items():
        assert spec["hostname"] == ours[name]["hostname"]
        assert spec["env_file"] == ours[name]["env_file"]
        assert spec["networks"] == ["session"]
        assert spec["build"]["dockerfile"] == COMPOSE_FILES[compose_file]
        assert (DOCKER / spec["build"]["context"] / spec["build"]["dockerfile"]).is_file()


def test_env_files_describe_one_backendai_session(
    service_envs: dict[str, dict[str, str]],
) -> None:
    for key in SHARED:
        assert len({env[key] for env in service_envs.values()}) == 1, key
    hosts = service_envs["main1"]["BACKENDAI_CLUSTER_HOSTS"].split(",")
    assert sorted(hosts) == sorted(SERVICES)
    assert hosts[0] != "main1", "HOSTS must not start with main1: its order is not guaranteed"
    for name, env in service_envs.items():
        assert env["BACKENDAI_CLUSTER_SIZE"] == "3"
        assert env["BACKENDAI_CLUSTER_REPLICAS"] == "main:1,sub:2"
        assert env["BACKENDAI_CLUSTER_HOST"] == name
        assert env["BACKENDAI_CLUSTER_ROLE"] + env["BACKENDAI_CLUSTER_IDX"] == name
        assert env["BACKENDAI_CLUSTER_LOCAL_RANK"] == str(NODE_RANKS[name])


# ---------------------------------------------------------------- Dockerfiles


@pytest.mark.parametrize("dockerfile", DOCKERFILES)
def test_dockerfile_declares_each_label_once_and_both_places_agree(
    dockerfile: str, tmp_path: Path
) -> None:
    instructions = dockerfile_instructions(DOCKER / dockerfile)
    args = arg_defaults(instructions)
    labels = label_instruction_labels(instructions, args)
    assert PREFIX + "frameworks" in labels
    assert all(key.startswith(PREFIX) for key in labels)
    labels_text = [rest for word, rest in instructions if word == "LABEL"]
    for key in labels:
        # the value is an ARG reference, never a literal typed a second time
        assert re.search(re.escape(key) + r'="\$\{\w+\}"', " ".join(labels_text)), key
    assert labels_file_from_run(instructions, args, tmp_path) == labels


@pytest.mark.parametrize("dockerfile", DOCKERFILES)
def test_dockerfile_entrypoint_copies_and_build_check(dockerfile: str) -> None:
    instructions = dockerfile_instructions(DOCKER / dockerfile)
    entrypoints = [rest for word, rest in instructions if word == "ENTRYPOINT"]
    assert [json.loads(e) for e in entrypoints] == [["tini", "--", "derive-env", "--"]]
    assert all(isinstance(json.loads(rest), list) for word, rest in instructions if word == "CMD")
    for word, rest in instructions:
        if word == "COPY":
            flags = [w for w in rest.split() if w.startswith("--")]
            *sources, _destination = [w for w in rest.split() if not w.startswith("--")]
            assert not flags, f"{dockerfile}: COPY {rest}: wheels are bind-mounted, not copied"
            for source in sources:
                if source in ("wheelhouse/", "torch-wheels/"):  # made for offline builds
                    continue
                assert (REPO / source).exists(), f"{dockerfile}: COPY {source}: not in the repo"
    runs = [rest for word, rest in instructions if word == "RUN"]
    assert any("tini" in run and "apt-get install" in run for run in runs)
    # Backend.AI: the fan-out script and its ssh client (Backend.AI brings only the server).
    assert any("openssh-client" in run and "apt-get install" in run for run in runs)
    copies = [rest for word, rest in instructions if word == "COPY"]
    assert "docker/on-every-node.sh /usr/local/bin/on-every-node" in copies
    assert "chmod 0755 /usr/local/bin/on-every-node" in runs
    assert "derive-env --dry-run --explain" in runs, "the build should validate the labels"


@pytest.mark.parametrize("dockerfile", DOCKERFILES)
def test_dockerfile_installs_derive_env_isolated_from_a_wheelhouse(dockerfile: str) -> None:
    """Stages: the wheels (from source, or from the build context's wheelhouse/), chosen by
    ARG DERIVE_ENV_WHEELS; then the image, whose only install of derive-env is the isolated
    one, with no index, before the build's own check."""
    instructions = dockerfile_instructions(DOCKER / dockerfile)
    froms = [rest for word, rest in instructions if word == "FROM"]
    torch_stages = [
        "scratch AS torch-wheels-index",
        "scratch AS torch-wheels-folder",
        "torch-wheels-${TORCH_WHEELS} AS torch-wheels",
    ] if dockerfile == "pytorch.Dockerfile" else []
    assert froms == [
        "${BASE_IMAGE} AS derive-env-wheels-source",
        "scratch AS derive-env-wheels-wheelhouse",
        "derive-env-wheels-${DERIVE_ENV_WHEELS} AS derive-env-wheels",
        *torch_stages,
        "${BASE_IMAGE}",
    ]
    # global: before any FROM
    globals_ = instructions[: [w for w, _ in instructions].index("FROM")]
    assert ("ARG", "DERIVE_ENV_WHEELS=source") in globals_
    assert ("ARG", "BASE_IMAGE=python:3.11-slim") in globals_
    source_stage = instructions[: [w for w, _ in instructions].index("FROM", len(globals_) + 1)]
    assert ("RUN", "pip wheel --no-cache-dir --wheel-dir /wheelhouse /opt/derive-env-src") in (
        source_stage)
    assert ("COPY", "wheelhouse/ /wheelhouse/") in instructions
    image = instructions[len(instructions) - instructions[::-1].index(("FROM", froms[-1])):]
    runs = [" ".join(rest.split()) for word, rest in image if word == "RUN"]
    installs = [run for run in runs if "derive-env" in run and "pip install" in run]
    assert len(installs) == 1, installs
    assert installs[0].startswith(ISOLATED_INSTALL), installs[0]
    assert runs.index(installs[0]) < runs.index("derive-env --dry-run --explain")
    assert [rest for word, rest in image if word == "COPY" and "wheel" in rest] == []
    torch_installs = [run for run in runs if "torch==" in run]
    if dockerfile == "pytorch.Dockerfile":
        assert ("ARG", "TORCH_WHEELS=index") in globals_
        assert ("COPY", "torch-wheels/ /") in instructions
        assert ("ARG", f"TORCH_INDEX_URL={TORCH_CPU_INDEX}") in image
        assert torch_installs == [
            "--mount=type=bind,from=torch-wheels,target=/mnt pip install --no-cache-dir "
            '--find-links /mnt --index-url "${TORCH_INDEX_URL}" "torch==${TORCH_VERSION}" numpy'
        ]
    # The air-gapped stage's wheelhouse/ must reach the build context: ignored by git only.
    assert "wheelhouse/" in (REPO / ".gitignore").read_text().split()
    assert "torch-wheels/" in (REPO / ".gitignore").read_text().split()
    assert not any(
        "wheelhouse" in line for line in (REPO / ".dockerignore").read_text().splitlines()
        if not line.startswith("#")
    )


def test_dockerignore_keeps_venvs_caches_and_test_output_out() -> None:
    ignored = {
        line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    for pattern in (".venv", ".venv-py*", ".venv-dist", "**/__pycache__", ".pytest_cache",
                    ".ruff_cache", ".hypothesis", "dist", "build"):
        assert pattern in ignored, pattern
    for needed in ("pyproject.toml", "README.md", "LICENSE", "src", "docker", "tests"):
        assert needed not in ignored, needed


def test_dockerfile_labels_are_valid_for_derive_env(image_labels: tuple[str, Path]) -> None:
    """As the build's ``RUN derive-env --dry-run --explain`` does: no cluster, exit 0."""
    _name, labels_file = image_labels
    result = subprocess.run(
        [sys.executable, "-m", "derive_env", "--dry-run", "--explain",
         "--env-file", os.devnull, "--labels-file", str(labels_file)],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stderr
    # --labels-file is no image's file: the header speaks of a node (docs/behaviour.md)
    assert result.stdout.startswith("source: standalone, single node\nframeworks: ")
    assert "not opted in" not in result.stdout


# ---------------------------------------------------------------- one consistent session


def test_services_agree_on_the_session(
    image_labels: tuple[str, Path],
    service_envs: dict[str, dict[str, str]],
    tmp_path: Path,
) -> None:
    name, labels_file = image_labels
    frameworks = json.loads(labels_file.read_text())[PREFIX + "frameworks"].split(",")
    derived = {}
    for service, env in service_envs.items():
        folder = tmp_path / service
        folder.mkdir()
        derived[service] = derive_json(env, labels_file, folder)

    if "pytorch" in frameworks:
        for service, out in derived.items():
            assert out["MASTER_ADDR"] == out["PET_MASTER_ADDR"] == "main1", service
            assert out["PET_NNODES"] == "3", service
            assert out["NODE_RANK"] == out["PET_NODE_RANK"] == str(NODE_RANKS[service])
            assert "RANK" not in out and "LOCAL_RANK" not in out  # torchrun mode
        assert len({out["MASTER_PORT"] for out in derived.values()}) == 1
        assert {int(out["NODE_RANK"]) for out in derived.values()} == {0, 1, 2}

    if "tensorflow" in frameworks:
        configs = {s: json.loads(out["TF_CONFIG"]) for s, out in derived.items()}
        clusters = [json.dumps(c["cluster"], sort_keys=True) for c in configs.values()]
        assert len(set(clusters)) == 1, clusters
        tasks = set()
        for service, config in configs.items():
            task = config["task"]
            own = config["cluster"][task["type"]][task["index"]]
            assert own.split(":")[0] == service, (service, config)
            tasks.add((task["type"], task["index"]))
        assert len(tasks) == 3
        first = configs["main1"]["cluster"]
        assert (first.get("chief") or first["worker"])[0].startswith("main1:")

    if "jax" in frameworks:
        for service, out in derived.items():
            assert out["JAX_COORDINATOR_ADDRESS"] == "main1:1234", service
            assert out["JAX_NUM_PROCESSES"] == "3", service
            assert out["JAX_PROCESS_ID"] == str(NODE_RANKS[service]), service

    assert frameworks, name


# ---------------------------------------------------------------- Backend.AI hook


def test_bootstrap_hook_is_posix_sh() -> None:
    result = subprocess.run(
        ["sh", "-n", str(DOCKER / "bootstrap.sh")], capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 0, result.stderr
    assert os.access(DOCKER / "bootstrap.sh", os.X_OK), "Backend.AI sources it only if executable"


def _source_hook(env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Source the hook as Backend.AI's entrypoint does, with derive-env on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "derive-env"
    wrapper.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m derive_env "$@"\n')
    wrapper.chmod(0o755)
    labels = tmp_path / "labels.json"
    labels.write_text(json.dumps({PREFIX + "frameworks": "pytorch,tensorflow"}))
    script = (
        f". {shlex.quote(str(DOCKER / 'bootstrap.sh'))}\n"
        'printf "%s|%s|%s|%s\\n" "$MASTER_ADDR" "$NODE_RANK" "$TF_CONFIG" '
        '"${_derive_env_out-gone}"\n'
    )
    full_env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "DERIVE_ENV_LABELS_FILE": str(labels),
        **env,
    }
    return subprocess.run(
        ["sh", "-c", script], env=full_env, capture_output=True, text=True, timeout=60
    )


def test_bootstrap_hook_exports_the_variables(
    service_envs: dict[str, dict[str, str]], tmp_path: Path
) -> None:
    result = _source_hook(service_envs["sub2"], tmp_path)
    assert result.returncode == 0, result.stderr
    master, node_rank, tf_config, leftover = result.stdout.strip().split("|")
    assert (master, node_rank, leftover) == ("main1", "2", "gone")
    assert json.loads(tf_config)["task"] == {"type": "worker", "index": 2}


def test_bootstrap_hook_stops_the_entrypoint_on_bad_input(
    service_envs: dict[str, dict[str, str]], tmp_path: Path
) -> None:
    bad = {**service_envs["sub2"], "BACKENDAI_CLUSTER_LOCAL_RANK": "0"}
    result = _source_hook(bad, tmp_path)
    assert result.returncode == 3, result.stderr
    assert result.stdout == ""  # nothing after the hook ran
    assert "BACKENDAI_CLUSTER_LOCAL_RANK='0'" in result.stderr
    assert "bootstrap.sh: derive-env failed (exit 3)" in result.stderr
