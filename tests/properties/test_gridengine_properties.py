"""Whole Grid Engine PE jobs through the whole pipeline (sources/managers/gridengine.py).

A model of what sge_execd gives each process, checked against the recordings in
tests/sources/test_gridengine.py (tests/fixtures/gridengine): the master task on the first
host of PE_HOSTFILE (one line per granted queue, a host twice when it has slots in two
queues) with the job's NHOSTS/NSLOTS; a ``qrsh -inherit -V`` task on every host with the
master's PE_HOSTFILE, NHOSTS/NSLOTS of its own part on the other hosts (exec_job.c counts
the granted queues the execd knows) and its spool folder ``active_jobs/<job>.1/1.<host>``;
Open MPI's ranks mapped by slot in the file's host order, those on the master host
mpirun's children (the master task's variables), the others under qrsh -inherit -V.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from derive_env.digest import digest_of, facts_of
from derive_env.errors import TopologyError
from derive_env.pipeline import derive
from derive_env.sources import BY_NAME
from derive_env.sources.managers import gridengine

LABELS = {"ai.backend.distributed.frameworks": "pytorch"}
SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])
PATH = "/var/spool/sge/{host}/active_jobs/{job}.1/pe_hostfile"


@st.composite
def pe_jobs(draw: st.DrawFn) -> tuple[int, list[str], list[tuple[int, int]], str]:
    """(job id, hosts in file order, per host (slots in queue a, slots in queue b or 0),
    the PE_HOSTFILE text: every queue-a line, then every queue-b line)."""
    job = draw(st.integers(1, 10**6))
    count = draw(st.integers(1, 6))
    hosts = [f"node{n:02d}" for n in draw(
        st.lists(st.integers(0, 99), min_size=count, max_size=count, unique=True))]
    slots = [(draw(st.integers(1, 4)), draw(st.integers(0, 2))) for _ in hosts]
    lines = [f"{h} {a} a.q@{h} UNDEFINED" for h, (a, _) in zip(hosts, slots, strict=True)]
    lines += [f"{h} {b} b.q@{h} UNDEFINED" for h, (_, b) in zip(hosts, slots, strict=True) if b]
    return job, hosts, slots, "\n".join(lines) + "\n"


def base(job: int, host: str, nhosts: int, nslots: int, master: str) -> dict[str, str]:
    return {"JOB_ID": str(job), "PE": "mpi", "NHOSTS": str(nhosts), "NSLOTS": str(nslots),
            "HOSTNAME": host, "SGE_TASK_ID": "undefined",
            "PE_HOSTFILE": PATH.format(host=master, job=job)}


def task_env(job: int, hosts: list[str], slots: list[tuple[int, int]], i: int) -> dict[str, str]:
    """A qrsh -inherit -V task on hosts[i] (recorded qrsh-inherit-V)."""
    total = sum(a + b for a, b in slots)
    whole = i == 0
    env = base(job, hosts[i], len(hosts) if whole else 1, total if whole else sum(slots[i]),
               hosts[0])
    return {**env, "JOB_SCRIPT": "QRSH", "QRSH_PORT": f"{hosts[0]}:40000",
            "SGE_JOB_SPOOL_DIR": f"/var/spool/sge/{hosts[i]}/active_jobs/{job}.1/1.{hosts[i]}"}


def files_of(job: int, hosts: list[str], text: str):
    path = PATH.format(host=hosts[0], job=job)
    return lambda paths: {p: (text if p == path else None) for p in paths}


@SETTINGS
@given(pe_jobs())
def test_every_host_of_a_pe_job_derives_one_job(job_spec) -> None:
    """One qrsh -inherit -V task per host: the same master (the first host), port and
    digest; node ranks 0..n-1 in file order; never a job of one node when n > 1."""
    job, hosts, slots, text = job_spec
    derivations = []
    for i in range(len(hosts)):
        d = derive(task_env(job, hosts, slots, i), LABELS, files=files_of(job, hosts, text))
        assert d is not None
        derivations.append(d)
    changes = [d.changes() for d in derivations]
    assert [d.topology.node_rank for d in derivations] == list(range(len(hosts)))
    assert {d.topology.num_nodes for d in derivations} == {len(hosts)}
    assert len({c["MASTER_PORT"] for c in changes}) == 1
    if len(hosts) > 1:
        assert {c["MASTER_ADDR"] for c in changes} == {hosts[0]}
    assert len({digest_of(facts_of(d.topology, d)) for d in derivations}) == 1


@SETTINGS
@given(pe_jobs())
def test_every_rank_of_mpirun_in_a_pe_job_derives_one_job(job_spec) -> None:
    """mpirun -n <all slots>: ranks by slot in the file's host order; every rank the same
    master, port and digest, its own rank, its host's node rank."""
    job, hosts, slots, text = job_spec
    per_host = [a + b for a, b in slots]
    world = sum(per_host)
    master = {**base(job, hosts[0], len(hosts), world, hosts[0]),
              "SGE_JOB_SPOOL_DIR": f"/var/spool/sge/{hosts[0]}/active_jobs/{job}.1"}
    derived, rank = [], 0
    for i, count in enumerate(per_host):
        for local in range(count):
            env = {**(master if i == 0 else {**master, **task_env(job, hosts, slots, i)}),
                   "OMPI_COMM_WORLD_RANK": str(rank), "OMPI_COMM_WORLD_SIZE": str(world),
                   "OMPI_COMM_WORLD_LOCAL_RANK": str(local),
                   "OMPI_COMM_WORLD_LOCAL_SIZE": str(count)}
            d = derive(env, LABELS, files=files_of(job, hosts, text))
            assert d is not None
            derived.append(d)
            assert d.topology.node_rank == i
            rank += 1
    changes = [d.changes() for d in derived]
    assert [int(c["RANK"]) for c in changes] == list(range(world))
    assert {c["WORLD_SIZE"] for c in changes} == {str(world)}
    assert len({c["MASTER_PORT"] for c in changes}) == 1
    assert len({c["MASTER_ADDR"] for c in changes}) == 1
    assert len({digest_of(facts_of(d.topology, d)) for d in derived}) == 1


@SETTINGS
@given(pe_jobs())
def test_the_job_script_of_more_than_one_host_never_derives_one_node(job_spec) -> None:
    job, hosts, slots, text = job_spec
    env = {**base(job, hosts[0], len(hosts), sum(a + b for a, b in slots), hosts[0]),
           "SGE_JOB_SPOOL_DIR": f"/var/spool/sge/{hosts[0]}/active_jobs/{job}.1"}
    if len(hosts) == 1:
        d = derive(env, LABELS, files=files_of(job, hosts, text))
        assert d is not None and d.topology.num_nodes == 1
        return
    try:
        derive(env, LABELS, files=files_of(job, hosts, text))
    except TopologyError as exc:
        assert str(exc).startswith("run derive-env inside mpirun or qrsh -inherit, after it: ")
        assert f"PE_HOSTFILE's NHOSTS='{len(hosts)}'" in str(exc)
    else:
        raise AssertionError("a job script of several hosts derived a topology")


TEXT = st.text(st.characters(codec="utf-8"), max_size=16) | st.sampled_from(
    ["undefined", "0", "1", "3", "-1", "01", "n1 2 q UNDEFINED\nn2 2 q UNDEFINED\n",
     "n1 2\nn1 1\n", "n1", "\n", "", "99999999999999999999"])
NAMES = ("JOB_ID", "PE_HOSTFILE", "NHOSTS", "NSLOTS", "HOSTNAME", "SGE_TASK_ID",
         "SGE_JOB_SPOOL_DIR", "SGE_PE_TASK_ID")


@settings(max_examples=300, deadline=None)
@given(values=st.fixed_dictionaries({n: TEXT for n in NAMES}), content=TEXT | st.none())
def test_arbitrary_text_gives_a_report_or_a_topology_error(values, content) -> None:
    values = {**values, "PE_HOSTFILE": values["PE_HOSTFILE"] or "/x"}
    try:
        report = gridengine.read(values, BY_NAME["gridengine"], {values["PE_HOSTFILE"]: content})
    except TopologyError as exc:
        assert str(exc).split("=", 1)[0] in NAMES
        return
    if report.nodes:
        assert report.node_rank is None or 0 <= report.node_rank < len(report.nodes)
