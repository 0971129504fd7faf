"""The Azure ML sources (sources/managers/azureml.py): its MPI distribution and its PyTorch one.

The Azure ML runtime is closed source and no emulator exists: the processes' variables are
TYPED (docs) from Microsoft's documents and from the code that reads them:

- MicrosoftDocs/azure-docs ``articles/batch/batch-compute-node-environment-variables.md``
  (0aa2b14): ``AZ_BATCH_MASTER_NODE`` = ``10.0.0.4:6000`` ("the IP address and port of the
  compute node on which the primary task of a multi-instance task runs"; "Don't use the port
  specified here for MPI or NCCL communication, it's reserved for the Azure Batch
  service"), ``AZ_BATCH_HOST_LIST`` = ``10.0.0.4,10.0.0.5``, ``AZ_BATCH_NODE_LIST`` =
  ``10.0.0.4;10.0.0.5``, on the primary and every subtask;
- microsoft/hi-ml ``hi-ml-azure/src/health_azure/utils.py``
  ``set_environment_variables_for_multi_node``: ``AZ_BATCH_MASTER_NODE`` (host:port) before
  ``AZ_BATCHAI_MPI_MASTER_NODE`` (a single node's), ``NODE_RANK = OMPI_COMM_WORLD_RANK`` with
  one process per node; the Azure ML examples' ``set_environment_variables_for_nccl_backend``
  (``AZ_BATCH_MASTER_NODE.split(':')[0]`` as ``MASTER_ADDR``, ``OMPI_COMM_WORLD_*`` as the
  ranks); the Azure ML ParallelRunStep driver (``job.py``, ``Job.start``) reads
  ``AZUREML_NODE_COUNT`` as the node count;
- Microsoft's "Distributed GPU training guide (SDK v2)" (learn.microsoft.com,
  ``how-to-train-distributed-gpu``), PyTorch: Azure ML sets ``MASTER_ADDR``, ``MASTER_PORT``,
  ``WORLD_SIZE``, ``NODE_RANK``, ``RANK``, ``LOCAL_RANK`` in each process it starts for
  ``distribution: {type: pytorch, process_count_per_instance: n}``.
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
from derive_env.sources.managers import azureml
from derive_env.sources.report import Processes, Report
from helpers import framework_changes
from support.jobs import AZUREML_RUN as RUN
from support.jobs import azureml_mpi as mpi
from support.jobs import azureml_pytorch as pytorch

FIX_MPI = ("Azure ML (Azure Batch) sets it in every process of a multi-node MPI job; do not "
           "set it in the job's environment_variables")
FIX_TORCH = ("Azure ML's PyTorch distribution sets it in every process it starts; something "
             "changed it after Azure ML started this process")
PT = {PREFIX + "frameworks": "pytorch"}


# batch-compute-node-environment-variables.md (AZ_BATCH_MASTER_NODE `10.0.0.4:6000`); hi-ml
# utils.py set_environment_variables_for_multi_node and the examples'
# set_environment_variables_for_nccl_backend (OMPI_COMM_WORLD_* as the ranks); ParallelRunStep
# job.py Job.start (AZUREML_NODE_COUNT).


# how-to-train-distributed-gpu (SDK v2), "PyTorch": the six torch variables per process.


def read(environ: dict[str, str], name: str) -> Report:
    return azureml.read(environ, BY_NAME[name])


# -- the MPI distribution ------------------------------------------------------------------


def test_the_mpi_master_is_the_host_part_never_batchs_port() -> None:
    report = read(mpi(5, 2, 4), "azureml-mpi")
    assert (report.master, report.master_port, report.num_nodes) == ("10.0.0.4", None, 2)
    assert (report.session_id, report.job) == (
        RUN, ("azureml-mpi", RUN, "10.0.0.4:6000"))
    assert report.notes[1] == (
        "port 6000 of AZ_BATCH_MASTER_NODE is Azure Batch's own (reserved for the service, "
        "not for NCCL or MPI): the frameworks' ports are derived")


def test_an_mpi_process_derives_the_ranks_mpirun_gave() -> None:
    derivation = derive(mpi(5, 2, 4), PT)
    changes = framework_changes(derivation)
    assert {k: changes[k] for k in ("MASTER_ADDR", "RANK", "LOCAL_RANK", "WORLD_SIZE",
                                    "LOCAL_WORLD_SIZE")} == {
        "MASTER_ADDR": "10.0.0.4", "RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "8",
        "LOCAL_WORLD_SIZE": "4"}
    assert changes["MASTER_PORT"] != "6000"
    assert derivation.topology.num_nodes == 2


def test_the_host_list_counts_the_nodes_and_holds_the_master() -> None:
    environ = {**mpi(1, 2, 1), "AZ_BATCH_HOST_LIST": "10.0.0.4,10.0.0.5",
               "AZ_BATCH_NODE_LIST": "10.0.0.4;10.0.0.5"}
    assert read(environ, "azureml-mpi").num_nodes == 2
    del environ["AZUREML_NODE_COUNT"]
    assert read(environ, "azureml-mpi").inputs["num_nodes"] == ("AZ_BATCH_HOST_LIST",)
    spaced = {**environ, "AZ_BATCH_HOST_LIST": " 10.0.0.5 , 10.0.0.4"}  # not Batch's form
    assert read(spaced, "azureml-mpi").num_nodes == 2


@pytest.mark.parametrize(("change", "message"), [
    ({"AZ_BATCH_MASTER_NODE": "10.0.0.4"},
     "AZ_BATCH_MASTER_NODE='10.0.0.4': expected <ip>:<port> (the primary task's node and "
     f"port, e.g. 10.0.0.4:6000); {FIX_MPI}"),
    ({"AZ_BATCH_MASTER_NODE": "127.0.0.1:6000"},
     "AZ_BATCH_MASTER_NODE='127.0.0.1:6000': expected <ip>:<port> with the master node's "
     f"address: '127.0.0.1' is a loopback address; {FIX_MPI}"),
    ({"AZ_BATCH_HOST_LIST": "10.0.0.5,10.0.0.6"},
     "AZ_BATCH_HOST_LIST='10.0.0.5,10.0.0.6': expected a list holding the master node "
     f"'10.0.0.4' (AZ_BATCH_MASTER_NODE); {FIX_MPI}"),
    ({"AZ_BATCH_HOST_LIST": "10.0.0.4,10.0.0.5,10.0.0.6"},
     "AZUREML_NODE_COUNT='2': expected 3, the number of nodes in AZ_BATCH_HOST_LIST; "
     f"{FIX_MPI}"),
    ({"AZ_BATCH_HOST_LIST": "10.0.0.4,node 5"},
     "AZ_BATCH_HOST_LIST='10.0.0.4,node 5': expected the nodes' IPs, comma-separated, each a "
     "host name (letters, digits, '-' and '.') or an IP address: entry 2 ('node 5') is not; "
     + FIX_MPI),
    ({"AZUREML_NODE_COUNT": "1"},
     "AZ_BATCH_MASTER_NODE='10.0.0.4:6000': expected no such variable in a job of one node "
     "(AZUREML_NODE_COUNT says 1): Azure ML sets it for more than one node only"),
], ids=["no-port", "loopback", "master-not-listed", "count", "bad-entry", "one-node"])
def test_bad_mpi_variables_name_the_variable_value_and_fix(change, message) -> None:
    with pytest.raises(TopologyError) as info:
        read({**mpi(1, 2, 1), **change}, "azureml-mpi")
    assert str(info.value) == message


def test_the_master_without_ranks_is_refused_with_the_fix() -> None:
    """A plain Azure Batch task (no mpirun): the master, not this process's rank."""
    environ = {"AZ_BATCH_MASTER_NODE": "10.0.0.4:6000", "AZUREML_NODE_COUNT": "2"}
    with pytest.raises(TopologyError) as info:
        derive(environ, PT)
    assert str(info.value) == (
        "an Azure ML MPI job (Azure Batch multi-instance): AZ_BATCH_MASTER_NODE states the "
        "master (10.0.0.4), not this process's rank: run the command in the processes the "
        "job's mpirun starts (distribution type mpi: each has OMPI_COMM_WORLD_*), or use the "
        "PyTorch distribution, which sets the torch variables itself")


def test_a_single_node_mpi_job_is_open_mpis_alone() -> None:
    """One node: AZ_BATCHAI_MPI_MASTER_NODE, no AZ_BATCH_MASTER_NODE (hi-ml's single-node
    branch): Open MPI's ranks on one node."""
    environ = {k: v for k, v in mpi(1, 1, 2).items() if k != "AZ_BATCH_MASTER_NODE"}
    environ["AZ_BATCHAI_MPI_MASTER_NODE"] = "10.0.0.4"
    assert [s.name for s in seen_sources(environ)] == ["openmpi"]
    topology = topology_from(environ)
    assert (topology.num_nodes, topology.processes.world_size) == (1, 2)


# -- the PyTorch distribution: passed through ------------------------------------------------


def test_a_pytorch_process_is_passed_through_never_rewritten() -> None:
    environ = pytorch(5, 2, 4)
    report = read(environ, "azureml-pytorch")
    assert (report.processes, report.node_rank, report.num_nodes) == (
        Processes(5, 1, 8, 4), 1, 2)
    assert (report.master, report.master_port, report.job) == (
        "10.0.0.4", 6105, ("azureml-pytorch", RUN, "6105"))
    assert report.preset == frozenset(
        {"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "NODE_RANK", "RANK", "LOCAL_RANK"})
    derivation = derive(environ, PT)
    assert framework_changes(derivation) == {"LOCAL_WORLD_SIZE": "4"}


def test_azure_batchs_master_beside_the_pytorch_distribution_is_shadowed() -> None:
    """The inner source (Azure ML's own torch variables) wins; its port is kept."""
    environ = {**pytorch(1, 2, 1), "AZ_BATCH_MASTER_NODE": "10.0.0.4:6000"}
    derivation = derive(environ, PT)
    assert derivation.topology.source == "azureml-pytorch"
    assert "MASTER_PORT" not in derivation.changes()


def test_torchrun_started_by_the_user_inside_is_torchruns() -> None:
    """Per-node launch (the guide: torch.distributed.launch per node, started with
    --node-rank=$NODE_RANK): torchrun's workers keep AZUREML_RUN_ID; torchrun's variables
    are the process's (its source reads them), not a partial Azure ML set."""
    environ = {**pytorch(1, 2, 1), "TORCHELASTIC_RUN_ID": "none", "RANK": "4",
               "LOCAL_RANK": "0", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4",
               "GROUP_RANK": "1", "GROUP_WORLD_SIZE": "2", "MASTER_PORT": "29500"}
    assert [s.name for s in seen_sources(environ)] == ["torchrun"]
    assert derive(environ, PT).topology.source == "torchrun"


def test_local_world_size_when_set_wins() -> None:
    environ = {**pytorch(5, 2, 4), "LOCAL_WORLD_SIZE": "4"}
    del environ["AZUREML_NODE_COUNT"]
    assert read(environ, "azureml-pytorch").num_nodes == 2


@pytest.mark.parametrize(("change", "message"), [
    ({"AZUREML_NODE_COUNT": ""},
     "AZUREML_NODE_COUNT='': expected the instance count, dividing WORLD_SIZE=8: without it "
     "or LOCAL_WORLD_SIZE the processes per node are unknown. Set LOCAL_WORLD_SIZE to "
     "process_count_per_instance in the job's environment_variables, or run the command "
     "without derive-env (Azure ML set every torch variable itself)"),
    ({"NODE_RANK": "0"},
     "Azure ML PyTorch distribution: RANK=5, LOCAL_RANK=1, NODE_RANK=0, WORLD_SIZE=8, 4 "
     "processes per node (WORLD_SIZE / AZUREML_NODE_COUNT) disagree: Azure ML starts the same "
     "number of processes on each node, RANK = NODE_RANK x processes per node + LOCAL_RANK "
     f"(here 1); {FIX_TORCH}"),
    ({"MASTER_PORT": "0"}, f"MASTER_PORT='0': expected a port number 1-65535; {FIX_TORCH}"),
    ({"RANK": "x"}, f"RANK='x': expected an integer >= 0; {FIX_TORCH}"),
], ids=["no-count", "node-rank", "port", "rank"])
def test_bad_pytorch_variables_name_the_variable_value_and_fix(change, message) -> None:
    with pytest.raises(TopologyError) as info:
        read({**pytorch(5, 2, 4), **change}, "azureml-pytorch")
    assert str(info.value) == message


def test_a_partial_pytorch_set_is_refused() -> None:
    environ = {"AZUREML_RUN_ID": RUN, "RANK": "1", "WORLD_SIZE": "2"}
    with pytest.raises(TopologyError) as info:
        derive(environ, PT)
    assert str(info.value).startswith(
        "WORLD_SIZE='2': expected 1 or unset: an Azure ML PyTorch-distribution process "
        "states a job of more than one process, but only part of its variables are set "
        "(not set: LOCAL_RANK, NODE_RANK, MASTER_ADDR, MASTER_PORT)")


# -- properties ---------------------------------------------------------------------------


def _one_job(derivations) -> None:
    topologies = [d.topology for d in derivations]
    assert sorted(t.processes.rank for t in topologies) == list(range(len(topologies)))
    assert {t.master_addr for t in topologies} == {"10.0.0.4"}
    assert len({digest_of(facts_of(d.topology, d)) for d in derivations}) == 1
    ports = {tuple(v.value for v in d.variables if v.name.endswith("PORT")) for d in derivations}
    assert len(ports) == 1


@settings(max_examples=40, deadline=None)
@given(nodes=st.integers(2, 8), per_node=st.integers(1, 4),
       frameworks=st.sampled_from(["pytorch", "jax", "pytorch,jax"]))
def test_every_process_of_an_mpi_job_derives_one_job(nodes, per_node, frameworks) -> None:
    labels = {PREFIX + "frameworks": frameworks}
    _one_job([derive(mpi(r, nodes, per_node), labels) for r in range(nodes * per_node)])


@settings(max_examples=40, deadline=None)
@given(nodes=st.integers(2, 8), per_node=st.integers(1, 4))
def test_every_process_of_a_pytorch_job_derives_one_job(nodes, per_node) -> None:
    derivations = [derive(pytorch(r, nodes, per_node), PT) for r in range(nodes * per_node)]
    _one_job(derivations)
    assert sorted(d.topology.node_rank for d in derivations) == sorted(
        r // per_node for r in range(nodes * per_node))


TEXT = st.text(st.characters(codec="utf-8"), max_size=16) | st.sampled_from(
    ["0", "1", "2", "4", "-1", "01", "10.0.0.4:6000", "10.0.0.4", "[::1]:6000", "::1", "",
     "10.0.0.4,10.0.0.5"])
MPI_NAMES = ["AZ_BATCH_MASTER_NODE", "AZUREML_NODE_COUNT", "AZ_BATCH_HOST_LIST",
             "AZUREML_RUN_ID"]
TORCH_NAMES = ["AZUREML_RUN_ID", "AZUREML_NODE_COUNT", "MASTER_ADDR", "MASTER_PORT",
               "WORLD_SIZE", "RANK", "LOCAL_RANK", "NODE_RANK", "LOCAL_WORLD_SIZE"]


@settings(max_examples=300, deadline=None)
@given(values=st.fixed_dictionaries({n: TEXT for n in MPI_NAMES + TORCH_NAMES}),
       name=st.sampled_from(["azureml-mpi", "azureml-pytorch"]))
def test_arbitrary_text_gives_a_report_or_a_topology_error(values, name) -> None:
    try:
        report = read(values, name)
    except TopologyError:
        return
    assert report.master
    if report.processes is not None:
        layout = report.processes
        assert 0 <= layout.rank < layout.world_size
        assert 0 <= report.node_rank < report.num_nodes


@settings(max_examples=100, deadline=None)
@given(nodes=st.integers(2, 16), per_node=st.integers(1, 4), data=st.data(),
       kind=st.sampled_from(["mpi", "pytorch"]), count=st.booleans())
def test_no_job_of_more_than_one_node_derives_one_node(nodes, per_node, data, kind,
                                                       count) -> None:
    rank = data.draw(st.integers(0, nodes * per_node - 1))
    environ = mpi(rank, nodes, per_node, count=count) if kind == "mpi" else pytorch(
        rank, nodes, per_node)
    if not count:
        environ.pop("AZUREML_NODE_COUNT", None)
    try:
        derivation = derive(environ, {PREFIX + "frameworks": "pytorch,jax"})
    except TopologyError as exc:
        assert exc.exit_code == 3
        return
    assert derivation.topology.multi_node or derivation.topology.per_process
    assert derivation.topology.processes.world_size == nodes * per_node
