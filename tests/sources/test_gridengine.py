"""The Grid Engine source (sources/managers/gridengine.py) on environments recorded from a real Son
of Grid Engine 8.1.9 cluster (tests/fixtures/gridengine, README there; recorded by
tests/e2e/record_gridengine.py), and on cases typed from its code.

Typed cases cite hpc-gridware/clusterscheduler ``source/daemons/execd/exec_job.c``
(``sge_exec_job``): ``NHOSTS``/``NSLOTS``/``NQUEUES`` are counted over the granted queues the
execd knows (``get_nhosts(gdil)``, ``pe_slots += JG_slots``), ``SGE_TASK_ID`` is the literal
``undefined`` for a job that is not an array, ``PE_HOSTFILE`` is set only when ``petep ==
NULL`` ("forward PE_HOSTFILE only to master task"); Open Cluster Scheduler sets
``SGE_PE_TASK_ID`` in a task (its docs: "SGE_PE_TASK_ID is set in a task (e.g. "1.node7")
and not in the master task").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import pytest

from derive_env.errors import ON_ERROR_WARN, TopologyError
from derive_env.labels import PREFIX
from derive_env.pipeline import derive
from derive_env.sources import BY_NAME, seen_sources
from derive_env.sources.lists import HostSlots, pe_hostfile
from derive_env.sources.managers import gridengine
from derive_env.sources.report import Report
from derive_env.topology import Node
from support.recorded import GRIDENGINE as FIXTURES
from support.recorded import SGE_RUN_DIR as RUN_DIR
from support.recorded import load_fixture

LINE = BY_NAME["gridengine"]
PYTORCH = {PREFIX + "frameworks": "pytorch"}
#: The recorded scenarios' PE_HOSTFILE: the scheduler chose sge-c3 as master host.
HOSTS = ("sge-c3", "sge-a1", "sge-b2")


def processes(scenario: str) -> list[tuple[str, dict[str, str]]]:
    """(host it ran on, its variables) of every recorded process of ``scenario``."""
    paths = sorted((FIXTURES / scenario).glob("*.env"), key=lambda p: int(p.stem))
    assert paths, scenario
    return [load_fixture(p) for p in paths]


def reader(scenario: str) -> Callable[[Sequence[str]], Mapping[str, str | None]]:
    """The edge's file reader for a recorded scenario: the job's PE_HOSTFILE path (any
    host's spool folder: the recording's folders were one shared filesystem) -> the
    recorded file; any other path unreadable."""
    folder = FIXTURES / scenario

    def read(paths: Sequence[str]) -> dict[str, str | None]:
        out: dict[str, str | None] = {}
        for path in paths:
            task = path.split("/active_jobs/")[1].split("/")[0].split(".")[1] if (
                "/active_jobs/" in path) else ""
            name = "pe_hostfile" if (folder / "pe_hostfile").exists() else f"pe_hostfile.{task}"
            out[path] = (folder / name).read_text() if path.startswith(RUN_DIR) else None
        return out

    return read


def read(env: Mapping[str, str], scenario: str) -> Report:
    paths = gridengine.files_needed(env, "gridengine")
    return gridengine.read(env, LINE, reader(scenario)(paths))


# -- the recordings ----------------------------------------------------------------------------


def test_recorded_pe_hostfile_is_master_first_one_line_per_queue() -> None:
    """The recorded files: the master host first; extra.q's lines after all.q's."""
    assert (FIXTURES / "master-task" / "pe_hostfile").read_text() == (
        "sge-c3 2 all.q@sge-c3 UNDEFINED\nsge-a1 2 all.q@sge-a1 UNDEFINED\n"
        "sge-b2 2 all.q@sge-b2 UNDEFINED\n")
    text = (FIXTURES / "two-queues" / "pe_hostfile").read_text()
    assert pe_hostfile(text, gridengine._FORMAT) == HostSlots(HOSTS, (3, 3, 3))
    assert text.count("\n") == 6


def test_the_job_script_of_three_hosts_refuses_with_the_fix() -> None:
    """The master task (recorded): the job's hosts, node rank 0, and the problem that the
    composer raises (nothing inner uses the facts), naming mpirun and qrsh -inherit -V."""
    [(host, env)] = processes("master-task")
    assert (host, env["HOSTNAME"], env["NHOSTS"], env["SGE_TASK_ID"]) == (
        "sge-c3", "sge-c3", "3", "undefined")
    report = read(env, "master-task")
    assert (report.nodes, report.node_rank, report.job, report.session_id) == (
        tuple(Node(h) for h in HOSTS), 0, ("gridengine", "1", ""), "1")
    assert report.problem == (
        "run derive-env inside mpirun or qrsh -inherit, after it: mpirun derive-env -- python "
        "train.py (Open MPI reads PE_HOSTFILE), or one task per host: qrsh -inherit -V <host> "
        "derive-env -- torchrun ... (-V passes PE_HOSTFILE on). Here it runs in the job script "
        "(derive-env -- mpirun ... runs it there too), which runs on the master host only, the "
        "first of PE_HOSTFILE's NHOSTS='3', and Grid Engine starts nothing on the others")
    with pytest.raises(TopologyError) as caught:
        derive(env, PYTORCH, files=reader("master-task"))
    assert str(caught.value) == report.problem


def test_two_queues_per_host_sum_their_slots() -> None:
    """9 slots, every host in all.q and extra.q (recorded): 3 hosts of 3 slots, NSLOTS=9,
    NQUEUES=6 (one line per queue)."""
    [(_, env)] = processes("two-queues")
    assert (env["NHOSTS"], env["NSLOTS"], env["NQUEUES"]) == ("3", "9", "6")
    report = read(env, "two-queues")
    assert report.nodes == tuple(Node(h) for h in HOSTS)
    assert report.notes == ("the job script (master task) on sge-c3; 9 slot(s) on 3 host(s)",)


def test_mpirun_ranks_take_the_hosts_from_the_file_on_every_host() -> None:
    """mpirun -n 6 in the job script (recorded): ranks on the master host are mpirun's
    children (the master task's variables), the others run under qrsh -inherit -V daemons
    (NHOSTS=1, NSLOTS=2, the master's PE_HOSTFILE path). Every rank derives the same job."""
    got = []
    for host, env in processes("mpirun"):
        rank = int(env["OMPI_COMM_WORLD_RANK"])
        assert host == HOSTS[rank // 2]
        assert env["NHOSTS"] == ("3" if host == HOSTS[0] else "1")
        derivation = derive(env, PYTORCH, files=reader("mpirun"))
        assert derivation is not None
        changes = derivation.changes()
        got.append({k: changes[k] for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "NODE_RANK",
                                             "MASTER_ADDR")})
        assert derivation.topology.nodes == tuple(Node(h) for h in HOSTS)
        ports = {changes["MASTER_PORT"]}
    assert got == [{"RANK": str(r), "LOCAL_RANK": str(r % 2), "WORLD_SIZE": "6",
                    "NODE_RANK": str(r // 2), "MASTER_ADDR": "sge-c3"} for r in range(6)]
    assert len(ports) == 1


def test_qrsh_inherit_v_tasks_are_the_node_layer() -> None:
    """One qrsh -inherit -V task per host (recorded): node rank = HOSTNAME's line, 3 nodes,
    master sge-c3, one port; no problem (a task, by its spool folder)."""
    derived = {}
    for host, env in processes("qrsh-inherit-V"):
        report = read(env, "qrsh-inherit-V")
        assert report.problem is None
        assert report.notes[0].startswith(f"a task (qrsh -inherit) on {host};")
        derivation = derive(env, PYTORCH, files=reader("qrsh-inherit-V"))
        assert derivation is not None
        changes = derivation.changes()
        derived[host] = (changes["PET_NODE_RANK"], changes["PET_NNODES"],
                         changes["PET_MASTER_ADDR"], changes["PET_MASTER_PORT"])
    port = derived["sge-c3"][3]
    assert derived == {h: (str(i), "3", "sge-c3", port) for i, h in enumerate(HOSTS)}


def test_qrsh_inherit_without_v_is_refused_with_the_fix() -> None:
    """Without -V a task has no PE_HOSTFILE (recorded): the gridengine line is not seen; on
    another host NHOSTS=1 says nothing of the job, QRSH_PORT does: refused, naming -V."""
    for host, env in processes("qrsh-inherit"):
        assert "PE_HOSTFILE" not in env
        assert seen_sources(env) == []
        with pytest.raises(TopologyError) as caught:
            derive(env, PYTORCH)
        assert str(caught.value) == (
            f"QRSH_PORT={env['QRSH_PORT']!r}: expected unset: a Grid Engine task (qrsh "
            "-inherit) states a job of more than one host, and derive-env cannot read its job "
            "from these variables; derive-env would describe a job of one host. Start it with "
            "qrsh -inherit -V, which passes the job's PE_HOSTFILE on (Open MPI's mpirun "
            "does); " + ON_ERROR_WARN), host


def test_a_job_of_one_host_is_a_single_node() -> None:
    [(_, env)] = processes("one-host")
    derivation = derive(env, PYTORCH, files=reader("one-host"))
    assert derivation is not None
    assert (derivation.topology.nodes, derivation.topology.node_rank) == ((Node("sge-c3"),), 0)


def test_array_tasks_are_two_jobs() -> None:
    """An array PE job (recorded, SGE_TASK_ID 1 and 2): the array task is part of the job
    (two ports), the session id JOB_ID.TASK."""
    reports = [read(env, "array") for _, env in processes("array")]
    assert [(r.job, r.session_id) for r in reports] == [
        (("gridengine", "7", "1"), "7.1"), (("gridengine", "7", "2"), "7.2")]


# -- typed from exec_job.c ----------------------------------------------------------------------

HOSTFILE = "/var/spool/sge/n1/active_jobs/17.1/pe_hostfile"


def job(host: str = "n1", nhosts: int = 2, nslots: int = 8, **extra: str) -> dict[str, str]:
    """A master task on ``host`` (exec_job.c ``sge_exec_job`` with ``petep == NULL``)."""
    return {"JOB_ID": "17", "PE": "mpi", "PE_HOSTFILE": HOSTFILE, "NHOSTS": str(nhosts),
            "NSLOTS": str(nslots), "NQUEUES": str(nhosts), "HOSTNAME": host,
            "SGE_TASK_ID": "undefined", "SGE_JOB_SPOOL_DIR": "/var/spool/sge/n1/active_jobs/17.1",
            **extra}


TEXT = "n1 4 all.q@n1 UNDEFINED\nn2 4 all.q@n2 UNDEFINED\n"


def typed(env: dict[str, str], text: str | None = TEXT) -> Report:
    return gridengine.read(env, LINE, {HOSTFILE: text})


def test_open_cluster_scheduler_task_id_marks_a_task() -> None:
    report = typed(job("n1", SGE_PE_TASK_ID="1.n1", SGE_JOB_SPOOL_DIR=""))
    assert (report.problem, report.node_rank) == (None, 0)


def test_fully_qualified_file_against_a_short_hostname() -> None:
    text = "n1.cluster.example 4 all.q@n1 UNDEFINED\nn2.cluster.example 4 all.q@n2 UNDEFINED\n"
    report = typed(job("n2", nhosts=1, nslots=4), text)
    assert (report.node_rank, report.problem) == (1, None)


def test_unreadable_file_is_a_problem_with_the_fix() -> None:
    """A task on another host than the master, its spool folder not shared."""
    report = typed(job("n2", nhosts=1, nslots=4), None)
    assert report.nodes == ()
    assert report.problem == (
        f"PE_HOSTFILE={HOSTFILE!r}: expected a file this process can read (Grid Engine writes "
        "it before the job script starts): copy it to a shared folder in the job script and "
        "point PE_HOSTFILE there before starting the tasks (cp \"$PE_HOSTFILE\" "
        "~/pe_hostfile.$JOB_ID; export PE_HOSTFILE=~/pe_hostfile.$JOB_ID), or share the execd "
        "spool folder; " + ON_ERROR_WARN)


@pytest.mark.parametrize(("env", "text", "message"), [
    (job(JOB_ID="17.1"), TEXT, "JOB_ID='17.1': expected an integer >= 1 (Grid Engine's job "
     "number)"),
    (job(SGE_TASK_ID="0"), TEXT, "SGE_TASK_ID='0': expected an integer >= 1 (an array task), "
     "or 'undefined' (a job that is not an array: exec_job.c sets the literal)"),
    (job(), "", f"PE_HOSTFILE={HOSTFILE!r}: expected one line per granted queue: <host> "
     "<slots> <queue> <processors>; the file has none"),
    (job(), "n1\n", f"PE_HOSTFILE={HOSTFILE!r}: expected one line per granted queue: <host> "
     "<slots> <queue> <processors>; line 1 ('n1') has no slot count >= 1 after its host"),
    (job(), "n1 0 all.q@n1 UNDEFINED\n", f"PE_HOSTFILE={HOSTFILE!r}: expected one line per "
     "granted queue: <host> <slots> <queue> <processors>; line 1 ('n1 0 all.q@n1 UNDEFINED') "
     "has no slot count >= 1 after its host"),
    (job(), "n_1 4 q UNDEFINED\n", f"PE_HOSTFILE={HOSTFILE!r}: expected one line per granted "
     "queue: <host> <slots> <queue> <processors>; host 'n_1': a host name (letters, digits, "
     "'-' and '.') or an IP address"),
    (job(nhosts=3), TEXT, f"NHOSTS='3': expected 2, the hosts of PE_HOSTFILE={HOSTFILE!r} (or "
     "1 in a task qrsh -inherit started on another host); the file belongs to another job"),
    (job(nslots=6), TEXT, "NSLOTS='6': expected 8, the sum of the slots of PE_HOSTFILE "
     "(exec_job.c counts both from the same granted queues); the file belongs to another job"),
    (job("n2", nhosts=1, nslots=2), TEXT, "NSLOTS='2': expected 4, the slots of 'n2' there "
     "(exec_job.c counts both from the same granted queues); the file belongs to another job"),
    (job("n1", nhosts=1, nslots=4), TEXT, "NHOSTS='1': expected 2 on the master host 'n1' "
     "(HOSTNAME): Grid Engine counts the whole job there; NHOSTS=1 is a task's on another "
     "host"),
    (job("n9"), TEXT, f"HOSTNAME='n9': expected one of the hosts of PE_HOSTFILE={HOSTFILE!r} "
     "(n1, n2): Grid Engine sets HOSTNAME to the host the process runs on; the file belongs to "
     "another job, or HOSTNAME was changed"),
])
def test_malformed_and_misleading(env: dict[str, str], text: str, message: str) -> None:
    with pytest.raises(TopologyError) as caught:
        typed(env, text)
    assert str(caught.value) == message


def test_master_task_without_hostname_is_on_the_first_host() -> None:
    env = job()
    del env["HOSTNAME"]
    report = typed(env)
    assert (report.node_rank, report.inputs["node_rank"]) == (0, ("PE_HOSTFILE",))


def test_files_needed_is_the_pe_hostfile() -> None:
    assert gridengine.files_needed(job(), "gridengine") == (HOSTFILE,)
    assert gridengine.files_needed({}, "gridengine") == ()
