"""The Flux source (sources/managers/flux.py): a task's ranks and node count; no host list.

No Flux instance runs here (Debian 12 has no flux-core): each task's variables are TYPED from
flux-framework/flux-core@4a5e79f:

- ``src/shell/shell.c`` ``shell_setup_environment``: ``FLUX_JOB_SIZE`` = ``total_ntasks``,
  ``FLUX_JOB_NNODES`` = ``shell_size``, ``FLUX_JOB_ID`` = ``idf58(jobid)``, ``FLUX_URI``,
  ``FLUX_KVS_NAMESPACE``, ``FLUX_JOB_ID_PATH``;
- ``src/shell/task.c`` ``shell_task_create``: ``FLUX_TASK_LOCAL_ID``, ``FLUX_TASK_RANK``;
- ``src/shell/pmi/pmi.c`` ``shell_pmi_task_init``: ``PMI_RANK``, ``PMI_SIZE``, ``PMI_FD``;
- the F58 ids of ``src/common/libutil/test/fluid.c`` ``f58_tests``: the same id as ``ƒ...``
  (UTF-8 locale) and ``f...`` (``fluid_f58_encode`` without a multibyte locale).
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
from derive_env.sources.managers import flux
from derive_env.sources.report import Processes, Report
from support.jobs import flux_task as task

LABELS = {PREFIX + "frameworks": "pytorch,jax"}


@pytest.mark.parametrize(("text", "number"), [
    # fluid.c f58_tests: {id, f58, f58_alt}
    ("ƒ1", 0), ("f1", 0), ("ƒz", 57), ("fNH", 1234), ("ƒ7YXq9G", 4294967295),
    ("ƒuZZybuNNy", 6731191091817518), ("fuZZybuNNy", 6731191091817518),
    ("fjpXCZedGfVQ", 18446744073709551615), ("1234", 1234), ("0x4d2", 1234),
])
def test_the_job_id_is_decoded_in_every_locale(text: str, number: int) -> None:
    assert flux.job_integer(text) == number


@pytest.mark.parametrize("text", ["ƒ", "f0", "fl", "ƒjpXCZedGfVR1", "x12", "", "0xzz"])
def test_a_malformed_job_id_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        flux.job_integer(text)


def test_one_task_per_node_exactly() -> None:
    env = task(1, 0, 2, 2)
    assert [line.name for line in seen_sources(env)] == ["flux"]
    assert flux.read(env, BY_NAME["flux"]) == Report(
        source="flux", title="Flux", num_nodes=2, processes=Processes(1, 0, 2, 1, (1, 1)),
        job=("flux", "6731191091817518", ""), session_id="6731191091817518",
        inputs={"num_nodes": ("FLUX_JOB_NNODES",), "ports": ("FLUX_JOB_ID",),
                "processes": ("FLUX_TASK_RANK", "FLUX_TASK_LOCAL_ID", "FLUX_JOB_SIZE",
                              "FLUX_JOB_NNODES"),
                "rank": ("FLUX_TASK_RANK",), "local_rank": ("FLUX_TASK_LOCAL_ID",),
                "world_size": ("FLUX_JOB_SIZE",),
                "local_world_size": ("FLUX_JOB_SIZE", "FLUX_JOB_NNODES")},
        notes=("FLUX_JOB_ID='ƒuZZybuNNy' is job 6731191091817518 (F58 decoded: the same in "
               "every locale)",))


def test_the_locale_does_not_change_the_job() -> None:
    """ƒ in a UTF-8 locale, f in C: the same ports and digest on both."""
    both = [derive({**task(0, 0, 2, 2, job), "MASTER_ADDR": "n1"}, LABELS)
            for job in ("ƒuZZybuNNy", "fuZZybuNNy")]
    assert both[0] is not None and both[1] is not None
    assert both[0].changes()["MASTER_PORT"] == both[1].changes()["MASTER_PORT"]
    assert digest_of(facts_of(both[0].topology, both[0])) == digest_of(
        facts_of(both[1].topology, both[1]))


def test_a_job_of_several_nodes_needs_master_addr() -> None:
    with pytest.raises(TopologyError) as caught:
        derive(task(1, 0, 2, 2), LABELS)
    assert str(caught.value) == (
        "MASTER_ADDR='': expected the host of rank 0 (it also gives JAX's coordinator): Flux "
        "states no host list, so the host of rank 0 is unknown: set MASTER_ADDR to it (the "
        "same value for every process, e.g. flux run --env=MASTER_ADDR=<host of rank 0>), or "
        "run the launcher inside a job whose manager states the hosts (Slurm, PBS, LSF, Grid "
        "Engine)")


def test_one_node_is_complete() -> None:
    topology = topology_from(task(3, 3, 4, 1))
    assert ([n.host for n in topology.nodes], topology.node_rank, topology.processes.rank,
            topology.processes.local_world_size) == (["localhost"], 0, 3, 4)


def test_more_tasks_than_nodes_is_refused_with_the_fix() -> None:
    with pytest.raises(TopologyError) as caught:
        topology_from(task(5, 1, 8, 2))
    assert str(caught.value) == (
        "start one task per node: flux run -N <nodes> --tasks-per-node=1 derive-env -- "
        "torchrun --nproc-per-node=<GPUs> ..., or the ranks with an MPI launcher derive-env "
        "reads. Here derive-env runs in one of FLUX_JOB_SIZE='8' tasks on FLUX_JOB_NNODES=2 "
        "nodes, and Flux does not state in the environment how many of them run on this node")


@pytest.mark.parametrize(("env", "message"), [
    ({**task(0, 0, 2, 2), "PMI_RANK": "1"}, "PMI_RANK='1': expected the same value as "
     "FLUX_TASK_RANK='0': the Flux shell sets both for one task (src/shell/pmi/pmi.c); unset "
     "PMI_RANK or FLUX_TASK_RANK, whichever is stale"),
    ({**task(0, 0, 2, 2), "PMI_SIZE": "x"}, "PMI_SIZE='x': expected the same value as "
     "FLUX_JOB_SIZE='2': the Flux shell sets both for one task (src/shell/pmi/pmi.c); unset "
     "PMI_SIZE or FLUX_JOB_SIZE, whichever is stale"),
    (task(2, 0, 2, 2), "FLUX_TASK_RANK='2': expected a value below FLUX_JOB_SIZE='2': the "
     "Flux shell sets both for one task, so one was exported by hand or inherited"),
    (task(0, 0, 2, 3), "FLUX_JOB_NNODES='3': expected a value at most FLUX_JOB_SIZE='2': the "
     "Flux shell sets both for one task, so one was exported by hand or inherited"),
    (task(1, 1, 2, 2), "FLUX_TASK_LOCAL_ID='1': expected an index below 1: FLUX_JOB_SIZE=2 "
     "task(s) on FLUX_JOB_NNODES=2 node(s)"),
    ({**task(0, 0, 2, 2), "FLUX_JOB_NNODES": ""}, "FLUX_JOB_NNODES='': expected the Flux "
     "shell's value: it sets FLUX_JOB_NNODES and FLUX_TASK_LOCAL_ID with FLUX_TASK_RANK for "
     "every task (src/shell/shell.c, task.c); run derive-env in the command flux run starts"),
    (task(0, 0, 2, 2, "ƒ0"), "FLUX_JOB_ID='ƒ0': expected an F58 job id (ƒ or f, then base58 "
     "digits)"),
])
def test_bad_values_are_refused_exactly(env: dict[str, str], message: str) -> None:
    with pytest.raises(TopologyError) as caught:
        flux.read(env, BY_NAME["flux"])
    assert str(caught.value) == message


@settings(max_examples=60, deadline=None)
@given(nodes=st.integers(2, 24), job=st.integers(0, (1 << 64) - 1), ascii_id=st.booleans())
def test_every_node_of_a_job_derives_one_job(nodes: int, job: int, ascii_id: bool) -> None:
    """One task per node, MASTER_ADDR given to all: one master, one port, one digest."""
    digits = ""
    number = job
    while True:
        digits = flux._B58[number % 58] + digits
        number //= 58
        if not number:
            break
    derivations = [derive({**task(r, 0, nodes, nodes, ("f" if ascii_id else "ƒ") + digits),
                           "MASTER_ADDR": "node0"}, LABELS) for r in range(nodes)]
    assert all(d is not None for d in derivations)
    changes = [d.changes() for d in derivations]
    assert "MASTER_ADDR" not in changes[0]  # the user's, kept
    assert len({c["JAX_COORDINATOR_ADDRESS"] for c in changes}) == 1
    assert changes[0]["JAX_COORDINATOR_ADDRESS"].startswith("node0:")
    assert len({c["MASTER_PORT"] for c in changes}) == 1
    assert [c["NODE_RANK"] for c in changes] == [str(r) for r in range(nodes)]
    assert len({digest_of(facts_of(d.topology, d)) for d in derivations}) == 1


def test_a_node_count_beyond_the_bound_is_refused_before_the_list() -> None:
    """One task per node builds a per-node list: 10^8 nodes took minutes and gigabytes."""
    env = {**task(1, 0, 100_000_000, 100_000_000), "MASTER_ADDR": "n1"}
    with pytest.raises(TopologyError) as err:
        flux.read(env, BY_NAME["flux"])
    assert str(err.value) == (
        "FLUX_JOB_NNODES='100000000': expected at most 65536 nodes (the largest job a "
        "manager is known to name: Slurm's MAX_SLURM_NODES); the Flux shell sets it for every "
        "task "
        "(src/shell/shell.c): it was exported by hand or inherited")


@pytest.mark.parametrize("opted_in", [True, False])
def test_the_digest_line_shows_the_node_rank_the_json_exports(opted_in: bool) -> None:
    """A task of one task per node: the digest line's rank is its NODE_RANK (it was "-")."""
    import json

    from derive_env.digest import render_digest
    from derive_env.render import render

    env = {**task(1, 0, 2, 2, "f2Ab3"), "MASTER_ADDR": "n1"}
    derivation = derive(env, LABELS if opted_in else {})
    topology = topology_from(env) if derivation is None else derivation.topology
    line = render_digest(topology, derivation, "digest").split()
    assert line[1:] == ["1", "-"]
    if opted_in:
        assert json.loads(render(derivation, "json"))["NODE_RANK"] == "1"
    # the second task of a job of one node: node rank 0 in both
    one = task(1, 1, 2, 1, "f2Ab3")
    derivation = derive(one, LABELS)
    assert render_digest(derivation.topology, derivation, "digest").split()[1] == "0"
    assert json.loads(render(derivation, "json"))["NODE_RANK"] == "0"


TEXT = st.text(st.characters(codec="utf-8"), max_size=12) | st.sampled_from(
    ["0", "1", "2", "4", "-1", "ƒ1", "f2", "ƒuZZybuNNy", "0x10", ""])
NAMES = ["FLUX_JOB_ID", "FLUX_JOB_SIZE", "FLUX_JOB_NNODES", "FLUX_TASK_RANK",
         "FLUX_TASK_LOCAL_ID", "PMI_RANK", "PMI_SIZE"]


@settings(max_examples=300, deadline=None)
@given(values=st.fixed_dictionaries({name: TEXT for name in NAMES}))
def test_arbitrary_text_gives_a_report_or_a_topology_error(values: dict[str, str]) -> None:
    try:
        report = flux.read(values, BY_NAME["flux"])
    except TopologyError:
        return
    assert report.num_nodes is not None and report.num_nodes >= 1


@settings(max_examples=100, deadline=None)
@given(nodes=st.integers(2, 16), data=st.data())
def test_no_job_of_several_nodes_derives_one_node(nodes: int, data: st.DataObject) -> None:
    per = data.draw(st.integers(1, 4))
    rank = data.draw(st.integers(0, nodes * per - 1))
    env = task(rank, rank % per, nodes * per, nodes)
    try:
        derivation = derive(env, LABELS)
    except TopologyError as exc:
        assert exc.exit_code == 3
        return
    assert derivation is not None and derivation.topology.multi_node


def test_a_flux_task_of_an_instance_started_by_srun_is_read_as_flux() -> None:
    """``srun -N3 flux start ./script``: the initial program runs on broker 0 with the srun
    step's task-0 variables (a step of one task per node: the recorded ``ompi-in-salloc``
    daemon step, task 0 on gpu-a100-09), and ``flux run -N3`` copies that environment into
    every task (flux-run(1): the submitter's environment is the job's). The step is Flux's
    daemon step; Slurm's per-task values (``SLURM_NODEID=0``) are copies, never the node.
    Before: refused on tasks 1 and 2 ("a Slurm step (srun) and Flux both state this
    process's rank, and differently"); with the step only shadowed, NODE_RANK=0 on all."""
    from support.recorded import FIXTURES, load_fixture

    _, step0 = load_fixture(FIXTURES / "ompi-in-salloc" / "rank0.env")
    broker0 = {k: v for k, v in step0.items() if k.startswith(("SLURM", "SLURMD"))}
    values = []
    for rank in range(3):
        env = {**broker0, **task(rank, 0, 3, 3)}
        assert [s.name for s in seen_sources(env)] == ["flux", "slurm-step", "slurm-allocation"]
        derivation = derive(env, {PREFIX + "frameworks": "pytorch"})
        got = {v.name: v.value for v in derivation.variables}
        values.append((got["NODE_RANK"], got["MASTER_ADDR"], got["PET_NNODES"]))
        assert derivation.topology.layers[4] == (  # after the command's line
            "shadowed: slurm-step (a Slurm step (srun)): one task on each of its nodes around "
            "flux's ranks: Flux's daemon step, not the ranks")
    assert values == [(str(r), "gpu-a100-09", "3") for r in range(3)]


def test_flux_in_part_of_the_allocation_is_checked_against_slurms_nodes() -> None:
    """A Flux job of 2 nodes in the 3-node allocation: Flux states no host list, and the
    allocation's list is not its nodes: refused naming both, never a job of 3."""
    from support.recorded import FIXTURES, load_fixture

    _, step0 = load_fixture(FIXTURES / "ompi-in-salloc" / "rank0.env")
    env = {**{k: v for k, v in step0.items() if k.startswith("SLURM")}, **task(1, 0, 2, 2)}
    with pytest.raises(TopologyError) as info:
        derive(env, {PREFIX + "frameworks": "pytorch"})
    assert str(info.value).startswith(
        "Flux and a Slurm allocation (batch script or salloc shell) disagree on the number of "
        "nodes: FLUX_JOB_NNODES say 2, SLURM_JOB_NODELIST + SLURM_JOB_NUM_NODES say 3.")
