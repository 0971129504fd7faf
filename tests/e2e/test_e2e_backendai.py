"""The main job as Backend.AI starts it, on Backend.AI's own runtime in real containers.

Each session is 3 containers of the example PyTorch image on the tests' Docker engine
(tests/e2e/engine.py), created as Backend.AI's agent creates them and run by Backend.AI's
own entrypoint.sh, kernel runner, su-exec, libbaihook and dropbear from its wheels
(tests/e2e/bai_containers.py). Backend.AI's entrypoint sources the image's hook
(docker/bootstrap.sh), the runner serves dropbear on port 2200; only main1's runner gets the
batch command, over its own sockets, as the agent's feed_batch sends it. The batch commands
are what docs/backendai.md tells users: ``on-every-node torchrun train.py``.

Under CI=true a machine without the engine, the runtime's wheels or root FAILS these tests.
"""

from __future__ import annotations

import random
import re
import shlex
import signal
from pathlib import Path

import pytest

from bai_containers import IMAGE_SCRIPT, TORCH_BATCH, ContainerSession, wait_until
from bai_session import (
    DEFAULT,
    TEMPLATE,
    TORCH_USER_ENV,
    assert_torch_session,
    torch_labels,
    torch_problems,
    torch_summary,
)
from engine import Engine

pytestmark = pytest.mark.e2e

#: Seconds for a torch session (torch imports take seconds per process on 2 loaded cores).
TORCH_TIMEOUT_S = 180.0
#: Seconds for a session whose batch command is a few shell commands.
SHORT_TIMEOUT_S = 90.0
#: The warning derive-env gives for a batch command started in main1 alone (exact text).
MAIN1_HINT = (
    "derive-env: warning: only this container (main1 of 3) runs sh -c 'exit 0': Backend.AI "
    "starts the batch command in main1 alone, so the other containers never join the job. "
    "Start it on every node: on-every-node sh -c 'exit 0' (docs/backendai.md, \"Only main1 "
    "started the job\")")


def _port() -> int:
    return random.randrange(20000, 60000)


@pytest.mark.parametrize("layout", [DEFAULT, TEMPLATE], ids=["default", "template"])
def test_torchrun_on_every_node_all_ranks_agree(engine: Engine, bai_image: str, layout) -> None:
    """default: HOSTS sub1,main1,sub2; template: main:1,worker:2 with LOCAL_RANK worker1=0,
    worker2=1, main1=2. The hook (sourced by Backend.AI's entrypoint) exports canonical node
    ranks, main1 first; the batch command fans torchrun out over dropbear; 6 ranks, 2 per
    container in canonical order, sum to 21."""
    port = _port()
    with ContainerSession(engine, bai_image, layout, TORCH_BATCH, torch_labels(port),
                          user_env=TORCH_USER_ENV) as session:
        result = session.run(timeout=TORCH_TIMEOUT_S)
    assert_torch_session(result, port)
    assert session.leftovers() == []


def test_without_baimulti0_the_default_follows_the_route_to_main1(engine: Engine,
                                                                    bai_image: str) -> None:
    """No label socket-ifname, and no baimulti0 (the containers join a bridge network, as a
    Backend.AI session joins a project's persistent network): in Backend.AI's container the
    hook exports GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME = eth0, the interface of the route
    to main1, in every container; the job runs (6 ranks, sum 21)."""
    port = _port()
    labels = {k: v for k, v in torch_labels(port).items() if not k.endswith("socket-ifname")}
    with ContainerSession(engine, bai_image, DEFAULT, TORCH_BATCH, labels,
                          user_env=TORCH_USER_ENV) as session:
        result = session.run(timeout=TORCH_TIMEOUT_S)
    problems = torch_problems(result, port)
    assert problems == [], torch_summary(result, port, problems) + "\n" + result.describe()
    assert {h: (c.exports.get("GLOO_SOCKET_IFNAME"), c.exports.get("NCCL_SOCKET_IFNAME"))
            for h, c in result.containers.items()} == dict.fromkeys(DEFAULT.hosts,
                                                                    ("eth0", "eth0"))
    assert session.leftovers() == []


def test_on_every_node_output_status_arguments(engine: Engine, bai_image: str) -> None:
    """Over dropbear: each node's output arrives, arguments byte for byte, in the same
    directory, with no input to read, ON_EVERY_NODE=1, the hook's NODE_RANK in the SSH
    session; --keep-going's status is the first non-zero one in canonical order."""
    arg = "it's  \"two\"\n$HOME `x` \\ *\n\n"
    batch = (
        "on-every-node mkdir sub && cd sub && on-every-node --keep-going sh -c 'cat; "
        "sleep 1; echo \"out of $(hostname)\"; "
        "printf \"%s|%s|%s|%s\" \"$(hostname)\" \"$PWD\" \"$ON_EVERY_NODE\" \"$1\" "
        "> \"$(hostname).out\"; "
        f"exit $((NODE_RANK + 3))' sh {shlex.quote(arg)}"
    )
    with ContainerSession(engine, bai_image, DEFAULT, batch, torch_labels(_port())) as session:
        result = session.run(timeout=SHORT_TIMEOUT_S)
        outs = {h: (session.container_dir(h) / "work" / "sub" / f"{h}.out").read_text()
                for h in DEFAULT.hosts}
    assert result.batch_rc == 3, result.describe()
    assert outs == {h: f"{h}|/home/work/sub|1|{arg}" for h in DEFAULT.hosts}
    # the remote output (a terminal's CR LF kept as LF by stty -onlcr)
    assert sorted(line for line in result.main.stdout.splitlines()
                  if line.startswith("out of ")) == [
        "out of main1", "out of sub1", "out of sub2"], result.describe()
    lines = [line for line in result.main.stderr.splitlines()
             if line.startswith("on-every-node:")
             # a wait for a peer's sshd (containers start without a barrier)
             and " SSH answered after " not in line and "for every node's SSH" not in line]
    # each of the two invocations is a run of its own: a start line with its own run id
    starts = [re.fullmatch(r"on-every-node: run ([0-9a-f]{16}) \(DERIVE_ENV_RUN_ID\) on 3 "
                           "nodes", line) for line in lines[:2]]
    assert all(starts) and starts[0].group(1) != starts[1].group(1), lines
    assert lines[2:] == [
        "on-every-node: main1: exit status 3",
        "on-every-node: sub1: exit status 4",
        "on-every-node: sub2: exit status 5",
    ]
    assert session.leftovers() == []


@pytest.mark.parametrize(("sig", "status"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)],
                         ids=["SIGTERM", "SIGINT"])
def test_on_every_node_signal_stops_every_node(engine: Engine, bai_image: str,
                                               sig: signal.Signals, status: int) -> None:
    """SIGTERM / Ctrl-C to on-every-node stops the command on every node, the remote ones
    too (dropbear hangs their terminal up), and it exits 143 / 130."""
    batch = ("echo $$ > oen.pid; exec on-every-node sh -c "
             "'echo $$ > \"$(hostname).pid\"; exec sleep 600'")
    with ContainerSession(engine, bai_image, DEFAULT, batch, torch_labels(_port())) as session:
        session.start()
        work = {h: session.container_dir(h) / "work" for h in DEFAULT.hosts}
        files = [work["main1"] / "oen.pid", *(w / f"{h}.pid" for h, w in work.items())]
        wait_until(lambda: all(p.exists() and p.read_text().strip() for p in files),
                   SHORT_TIMEOUT_S, "every node's command")
        pids = {h: int((w / f"{h}.pid").read_text()) for h, w in work.items()}
        assert all(session.alive(h, p) for h, p in pids.items()), pids
        oen = int((work["main1"] / "oen.pid").read_text())
        assert session.exec("main1", f"kill -{sig.name[3:]} {oen}").returncode == 0
        wait_until(lambda: not any(session.alive(h, p) for h, p in pids.items()), 20,
                   "every node's command stopped")
        result = session.wait(timeout=SHORT_TIMEOUT_S)
    assert result.batch_rc == status, result.describe()
    assert session.leftovers() == []


def test_the_main1_hint_only_for_the_runners_batch_command(engine: Engine, bai_image: str) -> None:
    """``derive-env -- CMD`` as the batch command: main1 warns that only it runs CMD (the
    runner started it, _BACKEND_BATCH_MODE=1). The same BACKENDAI_* variables on plain
    Docker, where the image's ENTRYPOINT runs the command in every container: no warning."""
    with ContainerSession(engine, bai_image, DEFAULT, "derive-env -- sh -c 'exit 0'",
                          torch_labels(_port())) as session:
        result = session.run(timeout=SHORT_TIMEOUT_S)
        docker_env = {k: v for k, v in session.given_env("main1").items()
                      if k.startswith("BACKENDAI_")}
    assert result.batch_rc == 0, result.describe()
    assert result.main.stderr.splitlines() == [MAIN1_HINT], result.describe()

    with engine.network(f"de-hint-{random.randrange(100000)}") as net:
        name = engine.run(bai_image, net, "main1", "sh", "-c", "exit 0", env=docker_env)
        assert engine.wait(name, timeout=SHORT_TIMEOUT_S) == 0
        logs = engine.logs(name)
    assert "derive-env: warning" not in logs, logs
    assert "only this container" not in logs


def test_the_image_script_path() -> None:
    """The batch commands name the all-reduce where docker/pytorch.Dockerfile copies it."""
    dockerfile = (Path(__file__).resolve().parents[2] / "docker" / "pytorch.Dockerfile")
    assert f"COPY examples/training/torch_allreduce.py {IMAGE_SCRIPT}\n" in dockerfile.read_text()


def _docs_loop() -> str:
    """The plain ssh loop of docs/backendai.md section 4.2, as printed there."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "backendai.md").read_text()
    section = text[text.index("### 4.2 The plain loop it implements"):]
    start = section.index("```sh\n") + len("```sh\n")
    return section[start:section.index("\n```", start)]


def test_the_documented_ssh_loop_all_ranks_agree(engine: Engine, bai_image: str) -> None:
    """The plain loop users may write instead of on-every-node (docs/backendai.md 4.2),
    byte for byte but for the script's path, as the batch command over dropbear: every
    node's output arrives and all 6 ranks agree (after the documented wait for SSH)."""
    loop = _docs_loop().replace("torchrun train.py", f"torchrun {IMAGE_SCRIPT}")
    assert loop.count(IMAGE_SCRIPT) == 3  # the comment, this container, the others
    port = _port()
    batch = "on-every-node true && sh loop.sh"  # on-every-node true: every peer's SSH is up
    with ContainerSession(engine, bai_image, DEFAULT, batch, torch_labels(port),
                          user_env=TORCH_USER_ENV) as session:
        loop_file = session.container_dir("main1") / "work" / "loop.sh"
        loop_file.write_text(loop)
        result = session.run(timeout=TORCH_TIMEOUT_S)
    problems = torch_problems(result, port)
    assert problems == [], torch_summary(result, port, problems) + "\n" + result.describe()
    assert session.leftovers() == []
