"""Issue 14 item 3: ``derive-env check`` on every node of a real job, as an operator runs it.

- In the simulated Backend.AI session (tests/e2e/bai_session.py: hook, kernel runner, real
  sshd, 3 containers in network namespaces), main1's batch command runs
  ``on-every-node derive-env check``: all pass in the healthy session; a listener already on
  the master port in main1 is named; sub1 resolving sub2 to another address (its
  /etc/netns/<ns>/hosts edited) is named.
- On the real Slurm cluster, the digest: every task of one step prints the same one, and a
  node with another master port (a session label there) another one.
- On the real Slurm cluster (tests/e2e/slurmcluster.py), ``srun derive-env check`` with one
  task per node (the node layer) and two (the process layer: rank 0 listens, every other
  task connects): all pass; a listener already on the master port of the first node is named.
- Open MPI's ``mpirun`` over SSH (no host list: the user gives MASTER_ADDR), 2 ranks per
  node: rank 0 listens, all pass.
- sub2 never runs the check: the master names it, within the bound.

Each node's check is timed by the shell around it; every one must end within the bound
(15 s by default) plus a small slack for the interpreter's start. Needs root, ``ip netns``,
sshd, slurm-wlm, munge and openmpi-bin: skipped without them, FAILS under CI=true.
"""

from __future__ import annotations

import re
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bai_session import DEFAULT, BackendAISession, missing_tools, torch_labels
from hpc_jobs import NODES, cluster, job_env, require_hpc, write_labels
from sessions import require, require_frameworks, venv_bin
from slurmcluster import SlurmCluster
from timed_check import check_port, elapsed, timed_check

pytestmark = pytest.mark.e2e

#: derive-env check's default bound, and the slack allowed on top of it for the
#: interpreter's start and the shell around it (the machine may be loaded).
BOUND_S = 15.0
SLACK_S = 2.0
#: The jobs' PATH: this venv's derive-env first.
PATH = f"{venv_bin()}:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
#: One node's check, timed: prints ``elapsed HOST MILLISECONDS`` after the check's output.
TIMED_CHECK = timed_check()
#: main1's batch command: wait until every peer's SSH answers, then check on every node.
# --keep-going: every node's own row, also after the first node's check failed (the default
# stops the others at once: the master's verdict alone)
BATCH = f"on-every-node true && on-every-node --keep-going sh -c {shlex.quote(TIMED_CHECK)}"
#: A program already listening on the master port (it never accepts: a hung server).
HOLD_PORT = ("import socket, sys, time; s = socket.socket(); "
             "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
             "s.bind(('', int(sys.argv[1]))); s.listen(); print('holding', flush=True); "
             "time.sleep(300)")


def _within_bound(text: str, hosts: list[str]) -> dict[str, float]:
    times = elapsed(text)
    assert sorted(times) == sorted(hosts), text
    assert all(t < BOUND_S + SLACK_S for t in times.values()), times
    return times


def _session(batch: str, port: int, edit=None) -> tuple[str, int | None, list[str]]:
    """Run one session whose batch command is ``batch``; main1's output, the batch status,
    what the session left behind."""
    require_frameworks()  # root, ip netns, derive-env next to this Python
    require(not missing_tools(), f"missing {missing_tools()} (install openssh-server)")
    with BackendAISession(DEFAULT, batch, torch_labels(port)) as session:
        if edit is not None:
            edit(session)
        result = session.run(timeout=90)
    return result.main.stdout + result.main.stderr, result.batch_rc, session.leftovers()


def _table(port: int, rows: list[str], last: str) -> str:
    return (f"derive-env check: 3 nodes, master main1:{port}, within 15 s\n"
            + "".join(f"{r}\n" for r in rows) + last + "\n")


def test_healthy_session_every_check_passes() -> None:
    port = check_port()
    out, rc, left = _session(BATCH, port)
    assert rc == 0, out
    assert _table(port, ["node  host   name         peers  port       iface",
                         "0     main1  198.18.0.10  ok     listening  eth0",
                         "1     sub1   198.18.0.11  ok     connected  eth0",
                         "2     sub2   198.18.0.12  ok     connected  eth0"],
                  "all checks pass on 3 nodes") in out
    for host, address in (("sub1", "198.18.0.11"), ("sub2", "198.18.0.12")):
        assert (f"node  host  name         peers  port       iface\n"
                f"{host[-1]}     {host}  {address}  ok     connected  eth0\n"
                "master main1: all checks pass on 3 nodes\n") in out
    print("healthy session, seconds per node:", _within_bound(out, list(DEFAULT.hosts)))
    assert left == []


def test_a_listener_already_on_the_master_port_is_named() -> None:
    port = check_port()
    batch = (f"python -c {shlex.quote(HOLD_PORT)} {port} & sleep 1; {BATCH}")
    out, rc, left = _session(batch, port)
    assert rc == 1, out
    assert re.search(
        rf"0     main1  198\.18\.0\.10  ok     FAIL  eth0\n"
        rf"main1 port: main1:{port} is already in use \(by pid \d+, python[0-9.]*\)\n"
        r"FAILED: main1 \(port\)\n", out), out
    for host in ("sub1", "sub2"):
        assert (f"{host} port: main1:{port} is already in use: a program there accepts "
                f"connections but does not greet as derive-env check\n"
                f"FAILED: {host} (port)\n") in out
        assert f"on-every-node: {host}: exit status 1" in out
    print("port taken, seconds per node:", _within_bound(out, list(DEFAULT.hosts)))
    assert left == []


def test_a_peer_name_that_resolves_otherwise_on_one_node_is_named() -> None:
    port = check_port()

    def edit(session: BackendAISession) -> None:
        assert session.cluster is not None
        hosts = Path("/etc/netns") / session.cluster.namespace("sub1") / "hosts"
        text = hosts.read_text()
        assert "198.18.0.12 sub2\n" in text
        hosts.write_text(text.replace("198.18.0.12 sub2\n", "198.18.0.99 sub2\n"))

    out, rc, left = _session(BATCH, port, edit)
    assert rc == 1, out
    assert _table(port, ["node  host   name         peers  port       iface",
                         "0     main1  198.18.0.10  ok     listening  eth0",
                         "1     sub1   198.18.0.11  FAIL   connected  eth0",
                         "2     sub2   198.18.0.12  ok     connected  eth0",
                         "sub1 peers: sub1 resolves sub2 to 198.18.0.99, the others to "
                         "198.18.0.12"],
                  "FAILED: sub1 (peers)") in out
    assert ("sub1 peers: sub1 resolves sub2 to 198.18.0.99, the others to 198.18.0.12\n"
            "master main1: FAILED: sub1 (peers)\n") in out
    print("name differs, seconds per node:", _within_bound(out, list(DEFAULT.hosts)))
    assert left == []


def test_a_node_that_never_checks_is_named_within_the_bound() -> None:
    """sub2 does not run the check: the master waits until shortly before its bound, then
    names sub2; sub1 gets that verdict; neither outlives the bound. (The nodes start up to a
    few seconds apart under on-every-node, whose SSH sessions start one after the other: a
    much shorter --timeout than the default leaves them no common window.)"""
    port = check_port()
    skip_sub2 = f'[ "$(hostname)" = sub2 ] && exit 0; {TIMED_CHECK}'
    out, rc, left = _session(f"on-every-node true && on-every-node sh -c {shlex.quote(skip_sub2)}",
                             port)
    assert rc == 1, out
    assert _table(port, ["node  host   name         peers  port       iface",
                         "0     main1  198.18.0.10  ok     listening  eth0",
                         "1     sub1   198.18.0.11  ok     connected  eth0",
                         "2     sub2   -            -      FAIL       -",
                         "sub2 port: sub2 did not report to the master (not started, or it "
                         "cannot connect)"],
                  "FAILED: sub2 (port)") in out
    assert "master main1: FAILED: sub2 (port)\n" in out
    times = elapsed(out)
    assert sorted(times) == ["main1", "sub1"], out
    assert 10.0 < times["main1"] < BOUND_S + SLACK_S, times
    assert times["sub1"] < BOUND_S + SLACK_S, times
    print("sub2 never checks, seconds per node:", times)
    assert left == []


# ------------------------------------------------------------------------ the Slurm cluster


@pytest.fixture(scope="module")
def slurm() -> Iterator[SlurmCluster]:
    """One real Slurm cluster for the Slurm cases (removed afterwards, also on failure)."""
    require_hpc("srun")
    with cluster() as slurm:
        yield slurm


def _srun(slurm: SlurmCluster, per_node: int, port: int) -> tuple[int, dict[str, str], str]:
    """``srun -l -N3 --ntasks-per-node=N sh -c 'derive-env check, timed'``: the status, each
    task's output (by task id, srun's ``-l`` prefix removed), the whole output."""
    labels = write_labels(slurm, {"frameworks": "pytorch", "master-port": str(port)})
    env = job_env(labels, PATH=PATH)
    res = slurm.run(["srun", "--time=1", "-l", "-N3", f"--ntasks-per-node={per_node}",
                     "sh", "-c", TIMED_CHECK], timeout=90, env=env)
    tasks: dict[str, str] = {}
    for line in res.stdout.splitlines():
        task, _, text = line.partition(": ")
        tasks[task.strip()] = tasks.get(task.strip(), "") + text + "\n"
    return res.returncode, tasks, res.stdout + res.stderr


def test_srun_one_task_per_node_every_check_passes(slurm: SlurmCluster) -> None:
    port = check_port()
    rc, tasks, out = _srun(slurm, 1, port)
    assert rc == 0, out
    assert tasks["0"].startswith(
        f"derive-env check: 3 nodes, master {NODES[0]}:{port}, within 15 s\n"
        "node  host         name         peers  port       iface\n"
        "0     gpu-a100-09  198.18.0.10  ok     listening  eth0\n"
        "1     gpu-a100-10  198.18.0.11  ok     connected  eth0\n"
        "2     gpu-a100-11  198.18.0.12  ok     connected  eth0\n"
        "all checks pass on 3 nodes\n"), out
    assert "master gpu-a100-09: all checks pass on 3 nodes\n" in tasks["2"]
    print("srun, 1 task per node, seconds per node:", _within_bound(out, NODES))


def _six_tasks_pass(port: int) -> str:
    """Rank 0's table when 2 tasks on each of the 3 nodes pass: rank 0 listens."""
    return (f"derive-env check: 6 tasks, master {NODES[0]}:{port}, within 15 s\n"
            "rank  host         name         peers  port       iface\n"
            "0     gpu-a100-09  198.18.0.10  -      listening  eth0\n"
            "1     gpu-a100-09  198.18.0.10  -      connected  eth0\n"
            "2     gpu-a100-10  198.18.0.11  ok     connected  eth0\n"
            "3     gpu-a100-10  198.18.0.11  ok     connected  eth0\n"
            "4     gpu-a100-11  198.18.0.12  ok     connected  eth0\n"
            "5     gpu-a100-11  198.18.0.12  ok     connected  eth0\n"
            "all checks pass on 6 tasks\n")


def test_srun_two_tasks_per_node_rank_0_listens(slurm: SlurmCluster) -> None:
    port = check_port()
    rc, tasks, out = _srun(slurm, 2, port)
    assert rc == 0, out
    assert tasks["0"].startswith(_six_tasks_pass(port)), out
    assert "master gpu-a100-09: all checks pass on 6 tasks\n" in tasks["5"]
    times = {task: elapsed(text) for task, text in sorted(tasks.items())}
    assert [list(t) for t in times.values()] == [[n] for n in NODES for _ in (0, 1)], out
    assert all(t < BOUND_S + SLACK_S for each in times.values() for t in each.values()), times
    print("srun, 2 tasks per node, seconds per task:", times)


def test_srun_a_listener_already_on_the_master_port_is_named(slurm: SlurmCluster) -> None:
    port = check_port()
    holder = slurm.sim.popen(NODES[0], [sys.executable, "-c", HOLD_PORT, str(port)], {},
                             stdout=-1)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"holding\n"
        rc, tasks, out = _srun(slurm, 1, port)
    finally:
        holder.kill()
        holder.wait(10)
    assert rc != 0, out
    assert re.search(rf"gpu-a100-09 port: gpu-a100-09:{port} is already in use \(by pid \d+, "
                     r"python[0-9.]*\)\nFAILED: gpu-a100-09 \(port\)\n", tasks["0"]), out
    for task, node in (("1", NODES[1]), ("2", NODES[2])):
        assert (f"{node} port: gpu-a100-09:{port} is already in use: a program there accepts "
                "connections but does not greet as derive-env check\n") in tasks[task], out
    print("srun, port taken, seconds per node:", _within_bound(out, NODES))


def _srun_digests(slurm: SlurmCluster, script: str) -> dict[str, list[str]]:
    """``srun -l -N3 --ntasks-per-node=2 sh -c SCRIPT`` (SCRIPT ends in the digest): each
    task's line ``DIGEST NODE_RANK HOST``, split, by task id."""
    labels = write_labels(slurm, {"frameworks": "pytorch,tensorflow,jax"})
    env = job_env(labels, PATH=PATH)
    res = slurm.run(["srun", "--time=1", "-l", "-N3", "--ntasks-per-node=2", "sh", "-c",
                     script], timeout=90, env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    tasks = {}
    for line in res.stdout.splitlines():
        task, _, text = line.partition(": ")
        tasks[task.strip()] = text.split()
    assert sorted(tasks, key=int) == [str(i) for i in range(6)], res.stdout
    return tasks


def test_srun_every_task_derives_one_digest(slurm: SlurmCluster) -> None:
    """Contract section 8 on the real cluster: the six tasks of one step, two per node, print
    the same digest and each its own node rank and host."""
    tasks = _srun_digests(slurm, "exec derive-env --dry-run --format digest")
    assert len({digest for digest, _, _ in tasks.values()}) == 1, tasks
    assert all(re.fullmatch(r"[0-9a-f]{32}", digest) for digest, _, _ in tasks.values())
    assert [(rank, host) for _, rank, host in (tasks[str(i)] for i in range(6))] == [
        (str(n), NODES[n]) for n in range(3) for _ in (0, 1)]


def test_srun_one_node_with_another_port_has_another_digest(slurm: SlurmCluster) -> None:
    """A job-wide fact set on one node only (a session label there: another master port)
    changes that node's digest alone: what on-every-node or a launcher compares."""
    tasks = _srun_digests(slurm, 'if [ "$SLURM_NODEID" = 1 ]; then '
                                 "export DERIVE_ENV_MASTER_PORT=29611; fi; "
                                 "exec derive-env --dry-run --format digest")
    by_node = {int(rank): digest for digest, rank, _ in tasks.values()}
    assert len({digest for digest, _, _ in tasks.values()}) == 2, tasks
    assert by_node[0] == by_node[2] != by_node[1], tasks


# ------------------------------------------------------------------ Open MPI over SSH


@pytest.fixture(scope="module")
def mpi() -> Iterator[SlurmCluster]:
    """A cluster with sshd on every node, for mpirun over SSH (removed afterwards)."""
    require_hpc("mpirun.openmpi", "sshd")
    with cluster(ssh=True) as slurm:
        yield slurm


def test_mpirun_over_ssh_rank_0_listens(mpi: SlurmCluster) -> None:
    """mpirun.openmpi -H gpu-a100-09:2,...:2 -np 6 -x MASTER_ADDR=gpu-a100-09: Open MPI states
    ranks, no host list; rank 0 listens, the 5 others connect; every task passes."""
    port = check_port()
    labels = write_labels(mpi, {"frameworks": "pytorch", "master-port": str(port)})
    env = job_env(labels, PATH=PATH)
    exported = [a for k in env for a in ("-x", k)]
    hosts = ",".join(f"{n}:2" for n in NODES)
    res = mpi.run(["mpirun.openmpi", "--allow-run-as-root", "--tag-output", "--mca",
                   "plm_rsh_agent", str(mpi.ssh_wrapper), "-H", hosts, "-np", "6",
                   "-x", f"MASTER_ADDR={NODES[0]}", *exported, "sh", "-c", TIMED_CHECK],
                  timeout=90, env=env)
    tasks: dict[str, str] = {}
    for task, text in re.findall(r"^\[\d+,(\d+)\]<stdout>:(.*)$", res.stdout, re.M):
        tasks[task] = tasks.get(task, "") + text + "\n"
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert tasks["0"].startswith(_six_tasks_pass(port)), out
    assert "master gpu-a100-09: all checks pass on 6 tasks\n" in tasks["5"], out
    times = {task: elapsed(text) for task, text in sorted(tasks.items())}
    assert all(t < BOUND_S + SLACK_S for each in times.values() for t in each.values()), times
    print("mpirun over SSH, 2 tasks per node, seconds per task:", times)
