"""on-every-node proves agreement, then fails fast, on Backend.AI's own runtime (dropbear).

A Backend.AI session of 3 containers of the example image on the tests' Docker engine, run by
Backend.AI's entrypoint, kernel runner and dropbear from its wheels (tests/e2e/bai_containers.py;
main1's runner gets the batch command over its own sockets):

- sub2's sshd not running: ``on-every-node torchrun ...`` says it waits, exits 255 within the
  probe bound (ON_EVERY_NODE_SSH_WAIT=5), names sub2, and the command started nowhere;
- sub1 has another labels file (another master port): the digest check names sub1 and the
  master port facts with both values, exit 3, nothing started;
- the command exits 1 on sub1 after the start while the others sleep: both are stopped
  within 15 s, on-every-node exits 1 naming sub1.

The healthy case is tests/e2e/test_e2e_backendai.py (torchrun over the same fan-out); the same
cases over OpenSSH's sshd are in tests/e2e/test_e2e_openssh.py. Under CI=true a machine
without the engine, the runtime's wheels or root FAILS these tests.
"""

from __future__ import annotations

import random
import re
import time

import pytest

from bai_containers import IMAGE_SCRIPT, ContainerSession, wait_until
from bai_session import DEFAULT, STOPPED_AFTER_SUB1, torch_labels
from engine import Engine

pytestmark = pytest.mark.e2e

#: Seconds for a session whose batch command is a few shell commands.
SHORT_TIMEOUT_S = 60.0
#: The probe bound the tests set (ON_EVERY_NODE_SSH_WAIT).
PROBE_BOUND_S = 5
#: What on-every-node may add to the bound: two derive-env dry runs before the probe, the
#: status poll (0.5 s) and stopping the last attempt; generous for a loaded 2-core machine.
PROBE_SLACK_S = 5.0
#: The issue's bound from one node's failure to every other node's command stopped.
STOP_BOUND_S = 15.0
#: The job: torchrun on every node, after a marker file that proves the command started.
MARKED_TORCHRUN = ("on-every-node sh -c 'touch \"started.$(hostname)\"; exec torchrun \"$0\"' "
                   + IMAGE_SCRIPT)
#: main1's batch: the job, timed (seconds since the epoch before and after).
TIMED = ('date +%s.%N > t0; ' + MARKED_TORCHRUN + '; rc=$?; date +%s.%N > t1; exit "$rc"')


def _port() -> int:
    return random.randrange(20000, 60000)


#: The lines of a wait for a peer's sshd: when they appear depends on when each container's
#: sshd came up (containers start without a barrier).
WAIT_LINE = re.compile(r"on-every-node: (waiting up to \d+s for every node's SSH "
                       r"\(ON_EVERY_NODE_SSH_WAIT\)|\S+: SSH answered after \d+s)")


def _lines(text: str, waits: bool = False) -> list[str]:
    """on-every-node's lines; those of the wait for a peer's sshd only with ``waits``."""
    return [line for line in text.splitlines() if line.startswith("on-every-node:")
            and (waits or not WAIT_LINE.fullmatch(line))]


#: on-every-node's start line, its run id in group 1.
START = re.compile(r"on-every-node: run ([0-9a-f]{16}) \(DERIVE_ENV_RUN_ID\) on 3 nodes")


def _started(session: ContainerSession) -> list[str]:
    return sorted(str(p.relative_to(session.tmp)) for h in DEFAULT.hosts
                  for p in (session.container_dir(h) / "work").glob("started.*"))


def test_a_peer_without_sshd_starts_nothing_within_the_probe_bound(engine: Engine,
                                                                    bai_image: str) -> None:
    with ContainerSession(engine, bai_image, DEFAULT,
                          f"export ON_EVERY_NODE_SSH_WAIT={PROBE_BOUND_S}; {TIMED}",
                          torch_labels(_port()), without_sshd={"sub2"}) as session:
        result = session.run(timeout=SHORT_TIMEOUT_S)
        work = session.container_dir("main1") / "work"
        elapsed = float((work / "t1").read_text()) - float((work / "t0").read_text())
        started = _started(session)
    print(f"probe failure after {elapsed:.2f}s (bound {PROBE_BOUND_S}s)")
    assert result.batch_rc == 255, result.describe()
    assert _lines(result.main.stderr, waits=True) == [
        "on-every-node: waiting up to 5s for every node's SSH (ON_EVERY_NODE_SSH_WAIT)",
        "on-every-node: sub2: SSH did not answer within 5s (ssh: connect to host sub2 port "
        "2200: Connection refused)",
        "on-every-node: nothing was started (ON_EVERY_NODE_SSH_WAIT=5)",
    ], result.describe()
    assert PROBE_BOUND_S - 1 <= elapsed < PROBE_BOUND_S + PROBE_SLACK_S, elapsed
    assert started == []
    assert session.leftovers() == []


def test_a_node_with_another_master_port_is_named_and_nothing_starts(engine: Engine,
                                                                     bai_image: str) -> None:
    port = _port()
    other = port + 1
    with ContainerSession(engine, bai_image, DEFAULT, TIMED, torch_labels(port),
                          host_labels={"sub1": torch_labels(other)}) as session:
        result = session.run(timeout=SHORT_TIMEOUT_S)
        started = _started(session)
    assert result.batch_rc == 3, result.describe()
    assert _lines(result.main.stderr) == [
        "on-every-node: the nodes do not agree on the job (derive-env --dry-run --format "
        "digest); nothing was started",
        "on-every-node: sub1 differs from main1 (this node) in:",
        # The label, and the variables the hook exported from it (the SSH session's
        # environment is the runner's): derive-env --dry-run --format digest-facts.
        f"on-every-node:     main1: label.master-port: {port}",
        f"on-every-node:     sub1: label.master-port: {other}",
        f"on-every-node:     main1: var.MASTER_PORT: {port}",
        f"on-every-node:     sub1: var.MASTER_PORT: {other}",
        f"on-every-node:     main1: var.PET_MASTER_PORT: {port}",
        f"on-every-node:     sub1: var.PET_MASTER_PORT: {other}",
    ], result.describe()
    assert started == []
    assert session.leftovers() == []


def test_a_node_that_fails_after_the_start_stops_every_other_node(engine: Engine,
                                                                  bai_image: str) -> None:
    """sub1's command exits 1 three seconds after the start; main1's and sub2's sleep: both
    are stopped (SIGTERM locally, SIGHUP when dropbear closes the session) within 15 s.
    Every node's command has the run id of the start line, not the hook's (the session's)."""
    batch = ("echo \"$DERIVE_ENV_RUN_ID\" > hook.id; on-every-node sh -c "
             "'echo \"$DERIVE_ENV_RUN_ID\" > \"$(hostname).id\"; echo $$ > \"$(hostname).pid\"; "
             "[ \"$(hostname)\" = sub1 ] && { sleep 3; exit 1; }; exec sleep 600'")
    with ContainerSession(engine, bai_image, DEFAULT, batch, torch_labels(_port())) as session:
        session.start()
        files = {h: session.container_dir(h) / "work" / f"{h}.pid" for h in DEFAULT.hosts}
        wait_until(lambda: all(p.exists() and p.read_text().strip() for p in files.values()),
                   SHORT_TIMEOUT_S, "every node's command")
        pids = {h: int(p.read_text()) for h, p in files.items()}
        wait_until(lambda: not session.alive("sub1", pids["sub1"]), SHORT_TIMEOUT_S,
                   "sub1's failure")
        failed_at = time.monotonic()
        deadline = failed_at + 30
        while any(session.alive(h, pids[h]) for h in ("main1", "sub2")):
            if time.monotonic() > deadline:
                break
            time.sleep(0.1)
        stopped_after = time.monotonic() - failed_at
        alive = {h: p for h, p in pids.items() if session.alive(h, p)}
        result = session.wait(timeout=SHORT_TIMEOUT_S)
        ids = {h: (session.container_dir(h) / "work" / f"{h}.id").read_text().strip()
               for h in DEFAULT.hosts}
        hook_id = (session.container_dir("main1") / "work" / "hook.id").read_text().strip()
    print(f"every other node stopped {stopped_after:.2f}s after sub1 failed "
          f"(bound {STOP_BOUND_S}s)")
    assert alive == {}
    assert stopped_after < STOP_BOUND_S
    assert result.batch_rc == 1, result.describe()
    # main1's command got SIGTERM (143); sub2's ssh client too: ssh's own status 255.
    start, *lines = _lines(result.main.stderr)
    run_id = START.fullmatch(start)
    assert run_id, result.describe()
    assert ids == dict.fromkeys(DEFAULT.hosts, run_id.group(1))
    assert re.fullmatch("[0-9a-f]{16}", hook_id) and hook_id != run_id.group(1)
    assert lines == STOPPED_AFTER_SUB1, result.describe()
    assert session.leftovers() == []
