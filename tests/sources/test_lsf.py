"""The LSF source (sources/managers/lsf.py): a batch script's hosts, a jsrun task's ranks and hosts.

No LSF cluster runs here: the variables are TYPED from what LSF and its tools write:

- ``LSB_MCPU_HOSTS`` with the launch node first and one slot, as IBM's CSM launch wrapper
  documents it (IBM/CAST ``csmi/src/launch/src/csm_launch_main.cc``, ``main``:
  ``LSB_MCPU_HOSTS=c931f04p20-vm01 1 c931f04p20-vm25 2 c931f04p20-vm22 2 c931f04p20-vm03 2``,
  "LSF passes the launch node in the list");
- ``LSB_DJOB_RANKFILE`` with the launch node on its first line (PyTorch Lightning
  ``lightning/fabric/plugins/environments/lsf.py`` ``LSFEnvironment._read_hosts``: "remove
  the launch node (i.e. the first node in LSB_DJOB_RANKFILE) from the list"; the same CSM
  file writes the launch node, then the compute nodes, for its PMIx server);
- jsrun's ``JSM_NAMESPACE_RANK`` / ``_LOCAL_RANK`` / ``_SIZE`` / ``_LOCAL_SIZE`` (the same
  Lightning file, ``global_rank``, ``local_rank``, ``world_size``), and Spectrum MPI's
  ``OMPI_COMM_WORLD_*`` beside them;
- ``LSB_HOSTS``: one word per slot, the batch script's host first (LSF's "Environment
  variables set for job execution"; sources-cloud.md 20).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from derive_env.digest import digest_of, facts_of
from derive_env.errors import TopologyError
from derive_env.labels import PREFIX
from derive_env.pipeline import derive
from derive_env.sources import BY_NAME, seen_sources
from derive_env.sources.compose import topology_from
from derive_env.sources.managers import lsf
from derive_env.sources.report import Processes, Report
from derive_env.topology import Node

LAUNCH = "c931f04p20-vm01"
COMPUTE = ["c931f04p20-vm25", "c931f04p20-vm22", "c931f04p20-vm03"]
MCPU = f"{LAUNCH} 1 c931f04p20-vm25 2 c931f04p20-vm22 2 c931f04p20-vm03 2"
RANKFILE = "/home/u/.lsbatch/1234.rankfile"
LABELS = {PREFIX + "frameworks": "pytorch,jax"}


def rankfile(compute: list[str], per_host: int) -> str:
    """The launch node, then each compute host once per slot."""
    return "".join([f"{LAUNCH}\n", *(f"{h}\n" * per_host for h in compute)])


def batch(mcpu: str = MCPU, **extra: str) -> dict[str, str]:
    return {"LSB_JOBID": "1234", "LSB_JOBNAME": "train", "LSB_QUEUE": "batch",
            "LSB_MCPU_HOSTS": mcpu, "LSB_DJOB_HOSTFILE": "/home/u/.lsbatch/1234.hostfile",
            "LSB_DJOB_RANKFILE": RANKFILE, **extra}


def jsrun_task(rank: int, per_host: int, hosts: int, spectrum: bool = True) -> dict[str, str]:
    """Task ``rank`` of jsrun with ``per_host`` tasks on each of ``hosts`` hosts (packed)."""
    env = batch(JSM_NAMESPACE_RANK=str(rank), JSM_NAMESPACE_LOCAL_RANK=str(rank % per_host),
                JSM_NAMESPACE_SIZE=str(per_host * hosts), JSM_NAMESPACE_LOCAL_SIZE=str(per_host))
    if spectrum:
        env.update(OMPI_COMM_WORLD_RANK=str(rank), OMPI_COMM_WORLD_LOCAL_RANK=str(rank % per_host),
                   OMPI_COMM_WORLD_SIZE=str(per_host * hosts),
                   OMPI_COMM_WORLD_LOCAL_SIZE=str(per_host))
    return env


def files(text: str | None):
    return lambda paths: {path: (text if path == RANKFILE else None) for path in paths}


def test_a_jsrun_task_exactly() -> None:
    env = jsrun_task(3, 2, 3, spectrum=False)
    assert [line.name for line in seen_sources(env)] == ["jsrun"]  # not the launch node's
    report = lsf.read(env, BY_NAME["jsrun"], {RANKFILE: rankfile(COMPUTE, 2)})
    assert report == Report(
        source="jsrun", title="LSF jsrun",
        nodes=(Node("c931f04p20-vm25"), Node("c931f04p20-vm22"), Node("c931f04p20-vm03")),
        processes=Processes(3, 1, 6, 2), job=("lsf", "1234", "allocation"), session_id="1234",
        inputs={"nodes": ("LSB_DJOB_RANKFILE",), "processes": lsf._JSM,
                "rank": ("JSM_NAMESPACE_RANK",), "local_rank": ("JSM_NAMESPACE_LOCAL_RANK",),
                "world_size": ("JSM_NAMESPACE_SIZE",),
                "local_world_size": ("JSM_NAMESPACE_LOCAL_SIZE",), "ports": ("LSB_JOBID",)},
        order="LSB_DJOB_RANKFILE order without its first line (the launch node): the compute "
              "hosts by first appearance",
        notes=("the launch node (the rank file's first line) runs no task; 3 compute host(s)",))


def test_the_launch_node_is_never_the_master() -> None:
    """LSB_MCPU_HOSTS lists the launch node first: the master is the first compute host."""
    derivation = derive(jsrun_task(2, 2, 3), LABELS, files=files(rankfile(COMPUTE, 2)))
    assert derivation is not None
    changes = derivation.changes()
    assert (changes["MASTER_ADDR"], changes["RANK"], changes["WORLD_SIZE"]) == (
        "c931f04p20-vm25", "2", "6")
    assert derivation.topology.layers[0] == (
        "sources seen (innermost first): openmpi (Open MPI (mpirun)), jsrun (LSF jsrun)")


def test_the_batch_script_exactly_and_refused_beyond_one_host() -> None:
    report = lsf.read(batch(), BY_NAME["lsf"])
    assert (report.nodes[0].host, len(report.nodes), report.node_rank, report.notes) == (
        LAUNCH, 4, None,
        (f"slots per host: {LAUNCH} 1, c931f04p20-vm25 2, c931f04p20-vm22 2, "
         "c931f04p20-vm03 2",))
    with pytest.raises(TopologyError) as caught:
        topology_from(batch())
    assert str(caught.value) == (
        "run derive-env inside jsrun or mpirun, after it: jsrun ... derive-env -- python "
        "train.py. Here it runs in the batch script (derive-env -- jsrun ... runs it there "
        f"too), which runs on the first of the job's 4 hosts only (LSB_MCPU_HOSTS={MCPU!r})")


def test_a_batch_script_of_one_host_is_node_zero() -> None:
    topology = topology_from(batch("hostA 4", LSB_HOSTS="hostA hostA hostA hostA"))
    assert ([n.host for n in topology.nodes], topology.node_rank) == (["hostA"], 0)


def test_mpirun_ranks_in_the_batch_script_use_the_hosts() -> None:
    env = batch("hostA 2 hostB 2", OMPI_COMM_WORLD_RANK="3", OMPI_COMM_WORLD_LOCAL_RANK="1",
                OMPI_COMM_WORLD_SIZE="4", OMPI_COMM_WORLD_LOCAL_SIZE="2")
    derivation = derive(env, LABELS)
    assert derivation is not None
    assert derivation.changes()["MASTER_ADDR"] == "hostA"


@pytest.mark.parametrize(("env", "message"), [
    (batch("hostA 4 hostB"), "LSB_MCPU_HOSTS='hostA 4 hostB': expected each execution host "
     "followed by its slot count: an even number of words (a count after each host), not 3"),
    (batch("hostA 0"), "LSB_MCPU_HOSTS='hostA 0': expected each execution host followed by "
     "its slot count: entry 1 ('hostA'): a slot count >= 1, not '0'"),
    (batch("hostA 2 hostB 2", LSB_HOSTS="hostA hostA hostB"), "LSB_HOSTS='hostA hostA hostB': "
     "expected the hosts and slots of LSB_MCPU_HOSTS='hostA 2 hostB 2' (one word per slot): "
     "LSF sets both for one job, so one was set by hand or inherited"),
])
def test_bad_allocations_are_refused_exactly(env: dict[str, str], message: str) -> None:
    with pytest.raises(TopologyError) as caught:
        lsf.read(env, BY_NAME["lsf"])
    assert str(caught.value) == message


@pytest.mark.parametrize(("env", "text", "message"), [
    (jsrun_task(0, 2, 3), None, f"LSB_DJOB_RANKFILE={RANKFILE!r}: expected a file this task "
     "can read: its hosts after the first line (the launch node) are the job's compute hosts, "
     "the master is the first of them; make the file visible at the same path inside the "
     "container (bind-mount its folder), or choose --source openmpi with MASTER_ADDR set for "
     "every rank"),
    (jsrun_task(0, 2, 3), f"{LAUNCH}\n", f"LSB_DJOB_RANKFILE={RANKFILE!r}: expected the launch "
     "node on the first line and at least one compute host after it, not 1 line(s)"),
    (jsrun_task(0, 1, 2), rankfile(COMPUTE, 1), "JSM_NAMESPACE_SIZE='2': expected at least the "
     "3 compute host(s) of LSB_DJOB_RANKFILE: jsrun runs this job's tasks on them; a jsrun of "
     "fewer tasks than hosts (jsrun -n) leaves hosts without a task, and derive-env cannot "
     "tell which"),
    ({**jsrun_task(0, 2, 3), "JSM_NAMESPACE_LOCAL_SIZE": ""}, rankfile(COMPUTE, 2),
     "JSM_NAMESPACE_LOCAL_SIZE='': expected jsrun's value: jsrun sets all of "
     "JSM_NAMESPACE_RANK, JSM_NAMESPACE_LOCAL_RANK, JSM_NAMESPACE_SIZE, "
     "JSM_NAMESPACE_LOCAL_SIZE for each task; run derive-env in the command jsrun starts"),
    ({**jsrun_task(0, 2, 3), "JSM_NAMESPACE_RANK": "6"}, rankfile(COMPUTE, 2),
     "JSM_NAMESPACE_RANK='6': expected a value below JSM_NAMESPACE_SIZE='6': LSF jsrun sets "
     "both for one task, so one was exported by hand"),
])
def test_bad_jsrun_tasks_are_refused_exactly(env: dict[str, str], text: str | None,
                                             message: str) -> None:
    with pytest.raises(TopologyError) as caught:
        lsf.read(env, BY_NAME["jsrun"], {RANKFILE: text})
    assert str(caught.value) == message


def test_spectrum_mpi_ranks_that_disagree_with_jsrun_are_refused() -> None:
    env = {**jsrun_task(1, 2, 3), "OMPI_COMM_WORLD_RANK": "4"}
    with pytest.raises(TopologyError) as caught:
        topology_from(env, files=files(rankfile(COMPUTE, 2)))
    assert str(caught.value) == (
        "OMPI_COMM_WORLD_RANK='4': expected the same value as JSM_NAMESPACE_RANK='1': under "
        "jsrun, Spectrum MPI's ranks are jsrun's tasks, so one of them was exported by hand or "
        "inherited; unset OMPI_COMM_WORLD_RANK or JSM_NAMESPACE_RANK, whichever is stale")


HOSTS = st.lists(st.from_regex(r"[a-z][a-z0-9]{0,6}", fullmatch=True).filter(
    lambda h: h != LAUNCH), min_size=2, max_size=10, unique=True)


@settings(max_examples=60, deadline=None)
@given(hosts=HOSTS, per_host=st.integers(1, 4), spectrum=st.booleans())
def test_every_task_of_a_jsrun_job_derives_one_job(hosts: list[str], per_host: int,
                                                   spectrum: bool) -> None:
    """Same master (the first compute host), same ports, one digest, on every task."""
    text = rankfile(hosts, per_host)
    derivations = [derive(jsrun_task(rank, per_host, len(hosts), spectrum), LABELS,
                          files=files(text)) for rank in range(per_host * len(hosts))]
    assert all(d is not None for d in derivations)
    changes = [d.changes() for d in derivations]
    assert {c["MASTER_ADDR"] for c in changes} == {hosts[0]}
    assert len({c["MASTER_PORT"] for c in changes}) == 1
    assert [d.topology.processes.rank for d in derivations] == list(
        range(per_host * len(hosts)))
    assert len({digest_of(facts_of(d.topology, d)) for d in derivations}) == 1


TEXT = st.text(st.characters(codec="utf-8"), max_size=14) | st.sampled_from(
    ["0", "1", "2", "-1", "hostA 4", "hostA 4 hostB 4", "hostA", "a a b", "", "\n"])
NAMES = ["LSB_JOBID", "LSB_MCPU_HOSTS", "LSB_HOSTS", "JSM_NAMESPACE_RANK",
         "JSM_NAMESPACE_LOCAL_RANK", "JSM_NAMESPACE_SIZE", "JSM_NAMESPACE_LOCAL_SIZE"]


@settings(max_examples=300, deadline=None)
@given(values=st.fixed_dictionaries({name: TEXT for name in NAMES}), content=TEXT,
       name=st.sampled_from(["lsf", "jsrun"]))
def test_arbitrary_text_gives_a_report_or_a_topology_error(values: dict[str, str],
                                                           content: str, name: str) -> None:
    values = {**values, "LSB_DJOB_RANKFILE": RANKFILE}
    try:
        report = lsf.read(values, BY_NAME[name], {RANKFILE: content})
    except TopologyError:
        return
    assert report.nodes


@settings(max_examples=100, deadline=None)
@given(hosts=HOSTS, data=st.data())
def test_no_job_of_several_hosts_derives_one_node(hosts: list[str], data: st.DataObject) -> None:
    mcpu = " ".join(f"{h} 2" for h in hosts)
    env = data.draw(st.sampled_from([batch(mcpu), jsrun_task(0, 1, len(hosts)),
                                     jsrun_task(len(hosts) - 1, 1, len(hosts), False)]))
    env["LSB_MCPU_HOSTS"] = mcpu
    text = data.draw(st.sampled_from([rankfile(hosts, 1), None]))
    try:
        derivation = derive(env, LABELS, files=files(text))
    except TopologyError as exc:
        assert exc.exit_code == 3
        return
    assert derivation is not None and derivation.topology.multi_node
