"""The OpenPBS / Torque source (sources/managers/pbs.py): the node file, batch script vs TM task.

No PBS server runs here (Debian 12 has none): each process's variables are TYPED from
openpbs/openpbs@cd7ab5e ``src/resmom/start_exec.c``:

- the batch script, ``finish_exec``: ``PBS_JOBID``, ``PBS_NODENUM`` = ``"%d"`` of
  ``ji_nodeid`` (0 on the mother superior), ``PBS_TASKNUM`` = ``"%u"`` (decimal),
  ``PBS_MOMPORT``, ``PBS_NODEFILE`` (``generate_pbs_nodefile``), ``NCPUS``,
  ``PBS_ENVIRONMENT=PBS_BATCH``, ``ENVIRONMENT=BATCH``;
- a TM task (``pbsdsh``, an MPI launcher's ``tm`` daemons), ``start_process``: the same names,
  ``PBS_NODENUM`` = this MoM's ``ji_nodeid`` and ``PBS_TASKNUM`` = ``"%8.8X"`` (eight
  hexadecimal digits, upper case);
- the node file, ``generate_pbs_nodefile``: one line per vnode entry (``ji_vnods``), the short
  host name; MoMs numbered by first appearance (``add_mom_to_job``).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from derive_env.digest import digest_of, facts_of
from derive_env.errors import TopologyError
from derive_env.labels import PREFIX
from derive_env.pipeline import derive
from derive_env.preflight import plan_of
from derive_env.sources import BY_NAME, seen_sources
from derive_env.sources.compose import topology_from
from derive_env.sources.managers import pbs
from derive_env.sources.report import Report
from derive_env.topology import Node

NODEFILE = "/var/spool/pbs/aux/1234.pbs-server"
#: Three MoMs: n07 with two vnode entries, n03 with one, n12 with three (exec_vnode order).
LINES = "n07\nn07\nn03\nn12\nn12\nn12\n"
LABELS = {PREFIX + "frameworks": "pytorch,jax"}


def batch(**extra: str) -> dict[str, str]:
    """The batch script's environment (start_exec.c finish_exec)."""
    return {"PBS_JOBNAME": "train", "PBS_JOBID": "1234.pbs-server", "PBS_QUEUE": "workq",
            "PBS_JOBCOOKIE": "0000000012AB34CD", "PBS_NODENUM": "0", "PBS_TASKNUM": "1",
            "PBS_MOMPORT": "15003", "PBS_NODEFILE": NODEFILE, "OMP_NUM_THREADS": "2",
            "NCPUS": "2", "PBS_ENVIRONMENT": "PBS_BATCH", "ENVIRONMENT": "BATCH",
            "PBS_O_WORKDIR": "/home/u", "PBS_O_HOST": "login1", **extra}


def tm_task(node: int, task: int) -> dict[str, str]:
    """A TM task's environment on MoM ``node`` (start_exec.c start_process: %8.8X)."""
    return batch(PBS_NODENUM=str(node), PBS_TASKNUM=f"{task:08X}")


def files(text: str | None = LINES):
    return lambda paths: {path: (text if path == NODEFILE else None) for path in paths}


def read(environ: dict[str, str], text: str | None = LINES) -> Report:
    return pbs.read(environ, BY_NAME["pbs"], {NODEFILE: text})


def test_the_hexadecimal_task_number_of_a_tm_task_gives_its_node_exactly() -> None:
    env = tm_task(2, 0x1A)
    assert env["PBS_TASKNUM"] == "0000001A"
    assert [line.name for line in seen_sources(env)] == ["pbs"]
    assert read(env) == Report(
        source="pbs", title="an OpenPBS/Torque job",
        nodes=(Node("n07"), Node("n03"), Node("n12")), node_rank=2,
        job=("pbs", "1234.pbs-server", "allocation"), session_id="1234.pbs-server",
        inputs={"ports": ("PBS_JOBID",), "node_rank": ("PBS_NODENUM", "PBS_TASKNUM"),
                "nodes": ("PBS_NODEFILE",)},
        order="PBS_NODEFILE order: the hosts by first appearance, the mother superior first "
              "(src/resmom/start_exec.c generate_pbs_nodefile, add_mom_to_job)",
        notes=("a TM task (PBS_TASKNUM='0000001A', hexadecimal) on node PBS_NODENUM=2",
               "slots per host: n07 2, n03 1, n12 3"))


def test_a_tm_task_derives_the_mother_superior_as_master() -> None:
    derivation = derive(tm_task(1, 3), LABELS, files=files())
    assert derivation is not None
    changes = derivation.changes()
    assert (changes["MASTER_ADDR"], changes["NODE_RANK"], changes["PET_NNODES"]) == (
        "n07", "1", "3")


def test_the_batch_script_of_several_hosts_is_refused_with_the_fix() -> None:
    env = batch()
    report = read(env)
    assert (report.node_rank, report.notes[0]) == (
        None, "PBS_TASKNUM='1' (decimal): the batch script's environment, here or copied by "
              "a launcher; PBS_NODENUM is not this process's node")
    with pytest.raises(TopologyError) as caught:
        topology_from(env, files=files())
    assert str(caught.value) == (
        "run derive-env inside the launcher, after it: pbsdsh -u derive-env -- torchrun ... "
        "(one task per host), or mpiexec ... derive-env -- python train.py. Here it runs in "
        "the batch script (derive-env -- mpiexec ... runs it there too), which runs on the "
        f"first of the job's 3 hosts only (PBS_NODEFILE={NODEFILE!r})")


def test_the_batch_script_of_one_host_is_node_zero() -> None:
    topology = topology_from(batch(), files=files("n07\nn07\n"))
    assert (topology.source, [n.host for n in topology.nodes], topology.node_rank) == (
        "pbs", ["n07"], 0)


def test_mpi_ranks_in_the_batch_script_get_the_node_file_as_host_list() -> None:
    """Hydra copies mpiexec's PBS_NODENUM=0 into every rank: the node rank is not taken
    from it; the MPI launcher gives the ranks, the node file the master."""
    env = batch(PMI_RANK="4", PMI_SIZE="6", MPI_LOCALRANKID="1", MPI_LOCALNRANKS="2")
    topology = topology_from(env, files=files())
    assert ([n.host for n in topology.nodes], topology.node_rank, topology.processes.rank) == (
        ["n07", "n03", "n12"], None, 4)
    derivation = derive(env, LABELS, files=files())
    assert derivation is not None
    assert (derivation.changes()["MASTER_ADDR"], derivation.changes()["RANK"]) == ("n07", "4")


def test_a_sister_without_the_node_file_is_refused_with_the_fix() -> None:
    with pytest.raises(TopologyError) as caught:
        topology_from(tm_task(1, 2), files=files(None))
    assert str(caught.value) == (
        f"PBS_NODEFILE={NODEFILE!r}: expected a file this process can read (the job's hosts; "
        "the master is its first line): the MoM writes it on the first host only, unless the "
        "MoM option gen_nodefile_on_sister_mom is 1 (set it, and make $PBS_HOME/aux visible "
        "inside the container), or set MASTER_ADDR to the first host of the node file for "
        "every process")


@pytest.mark.parametrize(("env", "text", "message"), [
    (tm_task(3, 1), LINES, "PBS_NODENUM='3': expected an index below the 3 host(s) of "
     "PBS_NODEFILE: the MoM numbers the job's hosts from 0 in the file's order; was the file "
     "or the variable copied from another job?"),
    ({**tm_task(0, 1), "PBS_NODENUM": ""}, LINES, "PBS_TASKNUM='00000001': expected "
     "PBS_NODENUM to be set as well: the MoM sets both for a TM task (src/resmom/start_exec.c "
     "start_process)"),
    (batch(PBS_NUM_NODES="2"), LINES, f"PBS_NUM_NODES='2': expected the number of distinct "
     f"hosts of PBS_NODEFILE={NODEFILE!r} (3): both describe this job, so one belongs to "
     "another job or was set by hand"),
    (batch(PBS_NP="4"), LINES, f"PBS_NP='4': expected the number of lines of PBS_NODEFILE="
     f"{NODEFILE!r} (6): both describe this job, so one belongs to another job or was set by "
     "hand"),
    (batch(), "n07\nn_3\n", f"PBS_NODEFILE={NODEFILE!r}: expected one host name per line, one "
     "line per slot: entry 2 ('n_3'): a host name (letters, digits, '-' and '.') or an IP "
     "address (the file the MoM wrote for this job; was it edited?)"),
    (batch(), "\n", f"PBS_NODEFILE={NODEFILE!r}: expected one host name per line, one line "
     "per slot: at least one host (the file the MoM wrote for this job; was it edited?)"),
])
def test_bad_values_are_refused_exactly(env: dict[str, str], text: str, message: str) -> None:
    with pytest.raises(TopologyError) as caught:
        read(env, text)
    assert str(caught.value) == message


def test_torque_counts_that_agree_are_named() -> None:
    report = read(tm_task(0, 1) | {"PBS_NUM_NODES": "3", "PBS_NP": "6"})
    assert report.inputs["num_nodes"] == ("PBS_NUM_NODES", "PBS_NP")


HOSTS = st.lists(st.from_regex(r"[a-z][a-z0-9]{0,6}", fullmatch=True), min_size=2,
                 max_size=12, unique=True)


@settings(max_examples=60, deadline=None)
@given(hosts=HOSTS, data=st.data())
def test_every_node_of_a_job_derives_one_job(hosts: list[str], data: st.DataObject) -> None:
    """pbsdsh -u on a job of n hosts (gen_nodefile_on_sister_mom): same master, same ports,
    node ranks 0..n-1, one digest."""
    slots = data.draw(st.lists(st.integers(1, 4), min_size=len(hosts), max_size=len(hosts)))
    text = "".join(f"{h}\n" * s for h, s in zip(hosts, slots, strict=True))
    derivations = [derive(tm_task(node, node + 1), LABELS, files=files(text))
                   for node in range(len(hosts))]
    assert all(d is not None for d in derivations)
    changes = [d.changes() for d in derivations]
    assert {c["MASTER_ADDR"] for c in changes} == {hosts[0]}
    assert len({c["MASTER_PORT"] for c in changes}) == 1
    assert [d.topology.node_rank for d in derivations] == list(range(len(hosts)))
    assert len({digest_of(facts_of(d.topology, d)) for d in derivations}) == 1


TEXT = st.text(st.characters(codec="utf-8"), max_size=12) | st.sampled_from(
    ["0", "1", "00000001", "0000000A", "0000000a", "-1", "n1\nn2", "", "\n", "n1 n2"])
NAMES = ["PBS_JOBID", "PBS_NODEFILE", "PBS_NODENUM", "PBS_TASKNUM", "PBS_NUM_NODES", "PBS_NP"]


@settings(max_examples=300, deadline=None)
@given(values=st.fixed_dictionaries({name: TEXT for name in NAMES}), content=TEXT)
def test_arbitrary_text_gives_a_report_or_a_topology_error(values: dict[str, str],
                                                           content: str) -> None:
    values = {**values, "PBS_JOBID": values["PBS_JOBID"] or "1", "PBS_NODEFILE": NODEFILE}
    try:
        report = read(values, content)
    except TopologyError:
        return
    assert report.node_rank is None or 0 <= report.node_rank < len(report.nodes)


@settings(max_examples=100, deadline=None)
@given(hosts=HOSTS, data=st.data())
def test_no_job_of_several_hosts_derives_one_node(hosts: list[str], data: st.DataObject) -> None:
    """Batch script, TM task, a rank of an MPI launcher, the file readable or not: multi-node
    or refused, never a single node with exit 0."""
    node = data.draw(st.integers(0, len(hosts) - 1))
    env = data.draw(st.sampled_from([batch(), tm_task(node, 1), batch(
        OMPI_COMM_WORLD_SIZE="4", OMPI_COMM_WORLD_RANK="1", OMPI_COMM_WORLD_LOCAL_RANK="1",
        OMPI_COMM_WORLD_LOCAL_SIZE="2")]))
    text = data.draw(st.sampled_from(["\n".join(hosts), None]))
    try:
        derivation = derive(env, LABELS, files=files(text))
    except TopologyError as exc:
        assert exc.exit_code == 3
        return
    assert derivation is not None and derivation.topology.multi_node


@settings(max_examples=60, deadline=None)
@given(hosts=HOSTS, data=st.data())
def test_every_rank_of_mpirun_in_a_pbs_job_derives_one_job(hosts: list[str],
                                                           data: st.DataObject) -> None:
    """Open MPI's tm launcher: ranks on the mother superior keep the batch script's
    environment, ranks on a sister inherit their orted's TM task (hexadecimal PBS_TASKNUM,
    that MoM's PBS_NODENUM); the node file readable everywhere (gen_nodefile_on_sister_mom).
    One master (the first host), one port, one world, ranks a permutation. (No TF_CONFIG:
    the node file's slots are not the processes mpirun started, so no source states every
    node's processes, as for mpirun in a Slurm allocation.)"""
    per_node = data.draw(st.lists(st.integers(1, 3), min_size=len(hosts),
                                  max_size=len(hosts)))
    text = "".join(f"{h}\n" * n for h, n in zip(hosts, per_node, strict=True))
    world, rank, values = sum(per_node), 0, []
    for node, count in enumerate(per_node):
        for local in range(count):
            env = batch() if node == 0 else tm_task(node, 1)
            env.update(OMPI_COMM_WORLD_RANK=str(rank), OMPI_COMM_WORLD_LOCAL_RANK=str(local),
                       OMPI_COMM_WORLD_SIZE=str(world), OMPI_COMM_WORLD_LOCAL_SIZE=str(count),
                       PMIX_NAMESPACE="prterun-n07-4242@1", PMIX_RANK=str(rank))
            derivation = derive(env, LABELS, files=files(text))
            assert derivation is not None
            values.append(derivation.changes())
            rank += 1
    first = values[0]
    for name in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "JAX_COORDINATOR_ADDRESS"):
        assert {v[name] for v in values} == {first[name]}, name
    assert first["MASTER_ADDR"] == hosts[0]
    assert sorted(int(v["RANK"]) for v in values) == list(range(world))
    assert sorted(int(v["JAX_PROCESS_ID"]) for v in values) == list(range(world))


# -- Torque: pbsdsh tasks (adaptivecomputing/torque src/resmom/start_exec.c InitUserEnv) ------

TORQUE_FILE = "/var/spool/torque/aux/77.head"


def torque(node: int, task: int, vnode: int, nodefile: bool, **extra: str) -> dict[str, str]:
    """A Torque job's process, TYPED from InitUserEnv: ``PBS_NODENUM`` = ``"%d"`` of
    ``ji_nodeid``, ``PBS_TASKNUM`` = ``"%d"`` of ``ti_task`` (1: the batch script), the job's
    ``nodes=3:ppn=2`` as ``PBS_NUM_NODES``/``PBS_NUM_PPN``, ``PBS_NODEFILE`` only where the
    MoM wrote it (MOM_HAS_NODEFILE: the mother superior); ``PBS_VNODENUM`` = tm_spawn's node
    (mom_comm.c) or 0 in the batch script."""
    env = {"PBS_JOBID": "77.head", "PBS_JOBNAME": "t", "PBS_QUEUE": "batch",
           "PBS_MOMPORT": "15003", "PBS_NUM_NODES": "3", "PBS_NUM_PPN": "2",
           "PBS_VERSION": "TORQUE-6.1.3", "PBS_ENVIRONMENT": "PBS_BATCH",
           "ENVIRONMENT": "BATCH", "PBS_NODENUM": str(node), "PBS_TASKNUM": str(task),
           "PBS_VNODENUM": str(vnode), **extra}
    if nodefile:
        env["PBS_NODEFILE"] = TORQUE_FILE
    return env


TORQUE_LINES = "n1\nn1\nn2\nn2\nn3\nn3\n"


def torque_derive(env: dict[str, str]) -> dict[str, str]:
    derivation = derive(env, {PREFIX + "frameworks": "pytorch"},
                        files=lambda paths: {p: TORQUE_LINES if p == TORQUE_FILE else None
                                             for p in paths})
    return {v.name: v.value for v in derivation.variables}


def test_a_torque_pbsdsh_task_on_the_mother_superior_needs_the_master_as_its_sisters() -> None:
    """Read as its sisters' tasks are (torque-task): the node file is not a source of the
    master there, or the mother superior alone would state a job its sisters cannot."""
    with pytest.raises(TopologyError) as info:
        torque_derive(torque(0, 2, 0, nodefile=True))
    assert str(info.value) == (
        "a Torque TM task (pbsdsh) on node PBS_NODENUM=0 of PBS_NUM_NODES=3: Torque writes "
        "PBS_NODEFILE on the mother superior only (src/resmom/start_exec.c InitUserEnv, "
        "MOM_HAS_NODEFILE), so the job's first host, the master, is not known on the sister "
        "hosts (here, n1); pass it to every task: pbsdsh -u -e MASTER_ADDR=$(head -n1 "
        "$PBS_NODEFILE) derive-env -- torchrun ..., from the batch script")


def test_the_mother_superiors_node_file_is_cross_checked() -> None:
    with pytest.raises(TopologyError) as info:
        torque_derive(torque(0, 2, 0, nodefile=True, MASTER_ADDR="n1", PBS_NUM_NODES="2"))
    assert str(info.value).startswith(
        "PBS_NUM_NODES='2': expected the number of distinct hosts of "
        f"PBS_NODEFILE={TORQUE_FILE!r} (3)")
    with pytest.raises(TopologyError, match=r"^PBS_NODENUM='5': expected "):
        torque_derive(torque(5, 2, 0, nodefile=True, MASTER_ADDR="n1"))


def test_torques_pbsdsh_tasks_state_one_digest_and_one_job_key_on_every_host() -> None:
    """Before: the mother superior's ``521d8c05... 0 n1`` (source pbs, node.* from its node
    file) against the sisters' ``e128c87c... 1 -`` (source torque-task): one job, two
    digests and two check keys."""
    derivations = [
        derive(torque(node, 2 + node, 2 * node, nodefile=node == 0, MASTER_ADDR="n1"),
               {PREFIX + "frameworks": "pytorch"},
               files=lambda paths: {p: TORQUE_LINES if p == TORQUE_FILE else None
                                    for p in paths})
        for node in range(3)]
    assert [d.topology.source for d in derivations] == ["torque-task"] * 3
    assert [d.topology.node_rank for d in derivations] == [0, 1, 2]
    assert len({digest_of(facts_of(d.topology, d)) for d in derivations}) == 1
    keys = set()
    for d in derivations:
        env = {v.name: v.value for v in d.variables}
        keys.add(plan_of(d.topology, env, f"n{d.topology.node_rank + 1}").key)
    assert len(keys) == 1


def test_torques_batch_script_is_still_refused_beyond_one_host() -> None:
    with pytest.raises(TopologyError, match=r"^run derive-env inside the launcher, after it: "
                       r".* which runs on the first of the job's 3 hosts only"):
        torque_derive(torque(0, 1, 0, nodefile=True, PBS_NP="6"))


def test_a_torque_pbsdsh_task_on_a_sister_host_asks_for_the_master() -> None:
    """No node file on a sister. Before: no source seen, MASTER_ADDR=127.0.0.1, one node
    (and with MASTER_ADDR passed, NODE_RANK=0 of 1)."""
    env = torque(1, 3, 2, nodefile=False)
    assert [s.name for s in seen_sources(env)] == ["torque-task"]
    with pytest.raises(TopologyError) as info:
        torque_derive(env)
    assert str(info.value) == (
        "a Torque TM task (pbsdsh) on node PBS_NODENUM=1 of PBS_NUM_NODES=3: Torque writes "
        "PBS_NODEFILE on the mother superior only (src/resmom/start_exec.c InitUserEnv, "
        "MOM_HAS_NODEFILE), so the job's first host, the master, is not known here; pass it "
        "to every task: pbsdsh -u -e MASTER_ADDR=$(head -n1 $PBS_NODEFILE) derive-env -- "
        "torchrun ..., from the batch script")


def test_torques_pbsdsh_tasks_with_the_master_passed_are_one_job() -> None:
    """``pbsdsh -u -e MASTER_ADDR=n1``: every host's task, the mother superior's from the
    node file, the sisters' from PBS_NODENUM and PBS_NUM_NODES."""
    got = [torque_derive(torque(node, 2 + node, 2 * node, nodefile=node == 0,
                                MASTER_ADDR="n1")) for node in range(3)]
    assert [(v["NODE_RANK"], v["MASTER_ADDR"], v["PET_NNODES"]) for v in got] == [
        ("0", "n1", "3"), ("1", "n1", "3"), ("2", "n1", "3")]
