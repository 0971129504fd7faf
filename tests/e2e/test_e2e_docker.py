"""The example images for real: built by Debian's Docker engine, run as 3-container jobs.

Each docker/<framework>.Dockerfile is built as docs/integration.md says (tests/e2e/engine.py:
BuildKit, ``--network host``, a Debian base through ``BASE_IMAGE``), once per session. Every
job runs main1, sub1 and sub2 at once on an internal network in 198.19.0.0/24, each with its
docker/env/<host>.env (BACKENDAI_CLUSTER_HOSTS not starting with main1), through the image's
ENTRYPOINT ``tini -- derive-env -- CMD``, and the framework itself proves the session:

* docker/compose.yaml, compose.jax.yaml and compose.tensorflow.yaml with Debian's
  docker-compose (v1), the override only making their network internal in 198.19.0.0/24:
  the gloo all-reduce over 6 ranks (PyTorch, no NumPy warning), jax.distributed's
  collectives, MultiWorkerMirroredStrategy built from TF_CONFIG (the image's CMD);
* ``docker run`` of the TensorFlow image with examples/training/tf_worker.py: the strategy's
  collectives over the chief and 2 workers.

Then what an image promises its users: tini as PID 1 with the command as its child,
``docker stop`` reaching torchrun in the rendezvous, exit statuses passing through, the
image labels equal to its labels file, no wheel left in any layer.

Needs root, Debian's docker.io, docker-compose and mmdebstrap (`make engine`); skipped
without them, a FAILURE under CI=true. Measured on 2 shared cores: about 6.5 minutes with
no image cache (the base and three images built), 1.5 to 3.5 minutes with it.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from engine import COMPOSE, REPO, SUBNET, Ended, Engine, describe, ended, example_image
from sessions import json_lines

pytestmark = pytest.mark.e2e

HOSTS = ("main1", "sub1", "sub2")
HERE = Path(__file__).resolve().parent
#: Quiet TensorFlow's C++ log; unbuffered Python, so a killed worker still shows its output.
JOB_ENV = {"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"}
JOB_TIMEOUT_S = 300.0
FRAMEWORKS = ("pytorch", "tensorflow", "jax")


def all_succeeded(results: dict[str, Ended]) -> None:
    assert {h: r.code for h, r in results.items()} == dict.fromkeys(HOSTS, 0), \
        describe(results)


def run_job(engine: Engine, image: str, name: str, *command: str,
            options: tuple[str, ...] = ()) -> dict[str, Ended]:
    """main1, sub1 and sub2 of ``image`` (``docker run``) started at once on an internal
    network, each with its docker/env/<host>.env, until all ended."""
    with engine.network(name) as net:
        return ended(engine, {host: engine.run(image, net, host, *command, env=JOB_ENV, options=(
            "--env-file", str(REPO / "docker" / "env" / f"{host}.env"), *options))
            for host in HOSTS}, JOB_TIMEOUT_S)


#: The only change the tests make to the compose files: the network internal, in 198.19/24.
OVERRIDE = {"networks": {"session": {"internal": True,
                                     "ipam": {"config": [{"subnet": SUBNET}]}}}}


def compose_job(engine: Engine, compose_file: str, framework: str,
                tmp_path: Path) -> dict[str, Ended]:
    """`docker-compose up` of docker/<compose_file> (its image already built, as `--build`
    would make it) with :data:`OVERRIDE`, until its 3 services ended; then `down`."""
    example_image(engine, framework)
    override = tmp_path / "override.yaml"
    override.write_text(json.dumps(OVERRIDE))  # JSON is YAML
    compose = [COMPOSE, "--project-name", f"de{framework}", "-f",
               str(REPO / "docker" / compose_file), "-f", str(override)]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*compose, *args], env=engine.env(), capture_output=True,
                              text=True, timeout=120, check=False)

    try:
        up = run("up", "--detach", "--no-build")
        assert up.returncode == 0, up.stderr
        return ended(engine, {h: run("ps", "-q", h).stdout.strip() for h in HOSTS},
                     JOB_TIMEOUT_S)
    finally:
        run("down", "--volumes", "--timeout", "5")


@pytest.fixture(scope="session", params=FRAMEWORKS)
def image(request: pytest.FixtureRequest, engine: Engine) -> tuple[str, str]:
    """(framework, tag) of each example image."""
    return request.param, example_image(engine, request.param)


def test_pytorch_compose_session(engine: Engine, tmp_path: Path) -> None:
    """docker/compose.yaml: `tini -- derive-env -- torchrun allreduce.py` in 3 containers:
    6 ranks in node order, master main1, every all-reduce 21; no NumPy warning."""
    results = compose_job(engine, "compose.yaml", "pytorch", tmp_path)

    all_succeeded(results)
    workers = [w for r in results.values() for w in json_lines(r.out)]
    assert sorted((w["hostname"], w["rank"], w["group_rank"]) for w in workers) == [
        ("main1", 0, 0), ("main1", 1, 0), ("sub1", 2, 1), ("sub1", 3, 1),
        ("sub2", 4, 2), ("sub2", 5, 2),
    ], describe(results)
    assert {(w["master_addr"], w["world_size"], w["result"]) for w in workers} == {
        ("main1", 6, 21.0)}
    assert [h for h, r in results.items() if "NumPy" in r.out + r.err] == [], describe(results)


def test_jax_compose_session(engine: Engine, tmp_path: Path) -> None:
    """docker/compose.jax.yaml: jax.distributed from the derived coordinator, count and id:
    processes 0, 1, 2 in node order; the all-gather gives 10, 20, 30, the jitted sum 1+4+9."""
    results = compose_job(engine, "compose.jax.yaml", "jax", tmp_path)

    all_succeeded(results)
    reports = {h: json_lines(r.out)[-1] for h, r in results.items()}
    assert {h: (r["process_index"], r["process_count"]) for h, r in reports.items()} == {
        "main1": (0, 3), "sub1": (1, 3), "sub2": (2, 3)}
    assert {(tuple(r["gathered"]), r["sum"], r["psum_of_squares"])
            for r in reports.values()} == {((10, 20, 30), 60, 14)}


def test_tensorflow_compose_session(engine: Engine, tmp_path: Path) -> None:
    """docker/compose.tensorflow.yaml: the image's CMD builds MultiWorkerMirroredStrategy
    from the derived TF_CONFIG and prints task type, index and replicas in sync."""
    results = compose_job(engine, "compose.tensorflow.yaml", "tensorflow", tmp_path)

    all_succeeded(results)
    assert {h: r.out for h, r in results.items()} == {
        "main1": "chief 0 3\n", "sub1": "worker 0 3\n", "sub2": "worker 1 3\n"}


def test_tensorflow_job_docker_run(engine: Engine) -> None:
    """`docker run` of 3 containers (examples/training/tf_worker.py mounted): MultiWorkerMirrored-
    Strategy's collectives over chief main1 (100) and workers sub1, sub2 (1, 2) give 103."""
    results = run_job(engine, example_image(engine, "tensorflow"), "de-tf",
                      "python", "/e2e/tf_worker.py",
                      options=("-v", f"{HERE.parents[1] / 'examples' / 'training'}:/e2e:ro"))

    all_succeeded(results)
    reports = {h: json_lines(r.out)[-1] for h, r in results.items()}
    assert {h: (r["task_type"], r["task_id"]) for h, r in reports.items()} == {
        "main1": ("chief", 0), "sub1": ("worker", 0), "sub2": ("worker", 1)}
    assert {(r["num_replicas_in_sync"], r["all_reduce"], r["reduce"])
            for r in reports.values()} == {(3, 103.0, 103.0)}
    assert {tuple(r["all_gather"]) for r in reports.values()} == {(100.0, 1.0, 2.0)}


# ---- what the image promises -------------------------------------------------------------
def test_tini_is_pid_1_and_the_command_its_child(engine: Engine, image: tuple[str, str]) -> None:
    """PID 1 is `tini -- derive-env -- CMD`; derive-env exec'd the command, so the command
    is tini's child (parent pid 1) under its own name."""
    _, tag = image
    done = engine.docker("run", "--rm", "--network", "none", tag, "sh", "-c",
                         'tr "\\0" " " </proc/1/cmdline; echo; echo "ppid=$PPID";'
                         ' tr "\\0" " " </proc/$$/cmdline; echo')
    assert done.stdout.splitlines() == [
        'tini -- derive-env -- sh -c tr "\\0" " " </proc/1/cmdline; echo; echo "ppid=$PPID";'
        ' tr "\\0" " " </proc/$$/cmdline; echo ',
        "ppid=1",
        'sh -c tr "\\0" " " </proc/1/cmdline; echo; echo "ppid=$PPID";'
        ' tr "\\0" " " </proc/$$/cmdline; echo ',
    ]


def test_exit_statuses_pass_through(engine: Engine) -> None:
    """The command's own status is the container's; a derive-env refusal (3: bad cluster
    variables) is too, and the command does not run."""
    tag = example_image(engine, "pytorch")
    ran = engine.docker("run", "--rm", "--network", "none", tag, "sh", "-c", "echo ran; exit 7",
                        check=False)
    assert (ran.returncode, ran.stdout) == (7, "ran\n")
    refused = engine.docker("run", "--rm", "--network", "none", "--env-file",
                            str(REPO / "docker" / "env" / "sub1.env"),
                            "--env", "BACKENDAI_CLUSTER_SIZE=three", tag, "sh", "-c", "echo ran",
                            check=False)
    assert (refused.returncode, refused.stdout) == (3, ""), refused.stderr
    assert "BACKENDAI_CLUSTER_SIZE" in refused.stderr


def _listening(engine: Engine, container: str, port: int) -> bool:
    """Whether a socket of ``container`` listens on ``port`` (its /proc/net/tcp{,6})."""
    done = engine.docker("exec", container, "cat", "/proc/net/tcp", "/proc/net/tcp6",
                         check=False)
    wanted = f":{port:04X}"
    return any(f[1].endswith(wanted) and f[3] == "0A"
               for f in (line.split() for line in done.stdout.splitlines()[1:]) if len(f) > 3)


def test_docker_stop_reaches_torchrun_in_the_rendezvous(engine: Engine) -> None:
    """main1 alone: torchrun serves the rendezvous on port 29500 and waits for sub1 and
    sub2; `docker stop` (SIGTERM to tini, forwarded) ends it at once, not by SIGKILL."""
    tag = example_image(engine, "pytorch")
    with engine.network("de-stop") as net:
        cid = engine.run(tag, net, "main1", env=JOB_ENV, options=(
            "--env-file", str(REPO / "docker" / "env" / "main1.env")))
        deadline = time.monotonic() + 120
        while not _listening(engine, cid, 29500):
            assert time.monotonic() < deadline, engine.logs(cid)
            time.sleep(0.5)
        started = time.monotonic()
        engine.docker("stop", "--time", "60", cid, timeout=90)
        elapsed = time.monotonic() - started
        code = int(engine.docker("inspect", "--format", "{{.State.ExitCode}}", cid).stdout)
        logs = engine.logs(cid)
    assert code == 143, logs
    assert elapsed < 30, f"docker stop took {elapsed:.1f} s (SIGTERM not forwarded?)"


def test_image_labels_equal_its_labels_file(engine: Engine, image: tuple[str, str]) -> None:
    """`docker image inspect`'s labels are exactly /etc/derive-env/labels.json."""
    _, tag = image
    labels = json.loads(engine.docker("image", "inspect", "--format",
                                      "{{json .Config.Labels}}", tag).stdout)
    baked = json.loads(engine.docker("run", "--rm", "--network", "none", "--entrypoint", "cat",
                                     tag, "/etc/derive-env/labels.json").stdout)
    assert labels == baked
    assert labels["ai.backend.distributed.frameworks"] == image[0]


def test_no_layer_keeps_wheels(engine: Engine, image: tuple[str, str]) -> None:
    """The wheels (derive-env's and torch's) were only bind-mounted: no layer copies them
    and nothing is left under /tmp."""
    _, tag = image
    history = engine.docker("history", "--no-trunc", "--format", "{{.CreatedBy}}", tag).stdout
    assert [line for line in history.splitlines() if "COPY" in line and "wheel" in line] == []
    left = engine.docker("run", "--rm", "--network", "none", "--entrypoint", "sh", tag, "-c",
                         "ls -A /tmp /mnt; find / -xdev -name '*.whl'"
                         " ! -path '/usr/share/python-wheels/*'").stdout
    assert left == "/mnt:\n\n/tmp:\n"


def test_job_network_is_internal(engine: Engine) -> None:
    """A job's network is internal and in 198.19.0.0/24: a container's routes are its
    subnet and the bridge on this host (198.19.0.1), which forwards nothing further (dockerd
    runs with --ip-forward=false and no masquerading); its DNS is Docker's embedded server,
    which forwards to an address nobody answers."""
    tag = example_image(engine, "pytorch")
    with engine.network("de-route") as net:
        internal = engine.docker("network", "inspect", "--format", "{{.Internal}}", net.name)
        cid = engine.run(tag, net, "main1", "sh", "-c",
                         "cat /proc/net/route; grep nameserver /etc/resolv.conf")
        assert engine.wait(cid, 60) == 0
        printed = engine.logs(cid, stderr=False).splitlines()
        dns = engine.docker("inspect", "--format", "{{json .HostConfig.Dns}}", cid).stdout
    assert internal.stdout.strip() == "true"
    # (destination, gateway, mask) in /proc/net/route's little-endian hex
    routes = sorted(tuple(f[i] for i in (1, 2, 7)) for f in map(str.split, printed[1:-1]))
    assert routes == [
        ("00000000", "010013C6", "00000000"),  # default via 198.19.0.1
        ("000013C6", "00000000", "00FFFFFF"),  # 198.19.0.0/24 on eth0
    ], printed
    assert printed[-1] == "nameserver 127.0.0.11"
    assert json.loads(dns) == ["198.19.0.254"]
