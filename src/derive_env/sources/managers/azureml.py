"""Azure Machine Learning: lines ``azureml-mpi``, ``azureml-pytorch``, docs/sources/clouds.md;
the runtime is closed, so each test fixture cites the doc or code it follows. MPI
distribution: Azure ML runs ``mpirun`` (the ``openmpi`` line reads the ranks); for more than
one node Azure Batch sets ``AZ_BATCH_MASTER_NODE=<ip>:<port>``, "the IP address and port of
the compute node on which the primary task of a multi-instance task runs", the port
"reserved for the Azure Batch service" ("Compute node environment variables"; host:port in
the Azure ML examples' ``set_environment_variables_for_nccl_backend``, microsoft/hi-ml
``health_azure/utils.py``); ``AZUREML_NODE_COUNT`` (read by the ParallelRunStep driver) and
``AZ_BATCH_HOST_LIST`` are cross-checked. PyTorch distribution ("Distributed GPU training
guide (SDK v2)"): :data:`TORCH_VARIABLES`, kept as set (``WORLD_SIZE`` global, as torch and
Azure's samples use it); per node ``LOCAL_WORLD_SIZE``, else ``WORLD_SIZE / AZUREML_NODE_COUNT``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from derive_env.errors import TopologyError, describe
from derive_env.hosts import check_hosts, host_problem, is_loopback
from derive_env.sources.lists import all_ipv4
from derive_env.sources.report import PROCESS_FACTS, Processes, Report
from derive_env.sources.roles import checked_master
from derive_env.validation import parse_port, variable_int

if TYPE_CHECKING:
    from derive_env.sources import Source

MASTER_NODE = "AZ_BATCH_MASTER_NODE"
NODE_COUNT = "AZUREML_NODE_COUNT"
HOST_LIST = "AZ_BATCH_HOST_LIST"
RUN_ID = "AZUREML_RUN_ID"
#: What the PyTorch distribution sets in each process (module docstring).
TORCH_VARIABLES = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "NODE_RANK", "RANK",
                   "LOCAL_RANK", "LOCAL_WORLD_SIZE")

_FIX_MPI = ("Azure ML (Azure Batch) sets it in every process of a multi-node MPI job; do not "
            "set it in the job's environment_variables")
_FIX_TORCH = ("Azure ML's PyTorch distribution sets it in every process it starts; something "
              "changed it after Azure ML started this process")


def _master_node(environ: Mapping[str, str]) -> tuple[str, int]:
    """``AZ_BATCH_MASTER_NODE`` as ``(host, port)``."""
    value = environ[MASTER_NODE]
    host, colon, port_text = value.strip().rpartition(":")
    try:
        port = parse_port(port_text if colon else "")
    except ValueError:
        raise TopologyError(describe(
            MASTER_NODE, value, f"<ip>:<port> (the primary task's node and port, e.g. "
            f"10.0.0.4:6000); {_FIX_MPI}")) from None
    problem = host_problem(host) or ("a loopback address" if is_loopback(host) else None)
    if problem:
        raise TopologyError(describe(MASTER_NODE, value, f"<ip>:<port> with the master node's "
                                     f"address: {host!r} is {problem}; {_FIX_MPI}"))
    return host, port


def _node_count(environ: Mapping[str, str], master: str,
                inputs: dict[str, tuple[str, ...]]) -> int | None:
    """The node count of ``AZUREML_NODE_COUNT`` and ``AZ_BATCH_HOST_LIST``, cross-checked."""
    count = None
    if environ.get(NODE_COUNT):
        count = variable_int(environ, NODE_COUNT, 1, f"; {_FIX_MPI}")
        inputs["num_nodes"] = (NODE_COUNT,)
    text = environ.get(HOST_LIST, "").strip()
    if not text:
        return count
    if all_ipv4(text, ","):  # Azure Batch's own form: nothing to strip or look up
        hosts, listed = text.split(","), master in text.split(",")
    else:
        hosts = [h.strip() for h in text.split(",")]
        bad = check_hosts(hosts)
        if bad is not None:
            raise TopologyError(describe(
                HOST_LIST, text, f"the nodes' IPs, comma-separated, each {bad[2]}: entry "
                f"{bad[0]} ({bad[1]!r}) is not; {_FIX_MPI}"))
        listed = master.lower() in (h.lower() for h in hosts)
    if not listed:
        raise TopologyError(describe(HOST_LIST, text, f"a list holding the master node "
                                     f"{master!r} ({MASTER_NODE}); {_FIX_MPI}"))
    if count is not None and count != len(hosts):
        raise TopologyError(describe(NODE_COUNT, environ[NODE_COUNT], f"{len(hosts)}, the "
                                     f"number of nodes in {HOST_LIST}; {_FIX_MPI}"))
    inputs["num_nodes"] = (*inputs.get("num_nodes", ()), HOST_LIST)
    return len(hosts)


def _read_mpi(environ: Mapping[str, str], line: Source) -> Report:
    """The MPI distribution's node facts (module docstring)."""
    master, port = _master_node(environ)
    inputs: dict[str, tuple[str, ...]] = {"master": (MASTER_NODE,)}
    count = _node_count(environ, master, inputs)
    if count == 1:
        raise TopologyError(describe(
            MASTER_NODE, environ[MASTER_NODE], f"no such variable in a job of one node "
            f"({inputs['num_nodes'][0]} says 1): Azure ML sets it for more than one node only"))
    run_id = environ.get(RUN_ID, "").strip()
    inputs["ports"] = (RUN_ID, MASTER_NODE) if run_id else (MASTER_NODE,)
    shown = f"{count} nodes" if count else "the node count unknown (no AZUREML_NODE_COUNT)"
    problem = (f"{line.title}: {MASTER_NODE} states the master ({master}), not this "
               "process's rank: run the command in the processes the job's mpirun starts "
               "(distribution type mpi: each has OMPI_COMM_WORLD_*), or use the PyTorch "
               "distribution, which sets the torch variables itself")
    return Report(
        problem=problem, source=line.name, title=line.title, num_nodes=count, master=master,
        session_id=run_id or None,
        job=(line.name, run_id, environ[MASTER_NODE].strip()), inputs=inputs,
        notes=(f"master = the host part of {MASTER_NODE} (the primary task's node); {shown}; "
               "the ranks are mpirun's (OMPI_COMM_WORLD_*)",
               f"port {port} of {MASTER_NODE} is Azure Batch's own (reserved for the service, "
               "not for NCCL or MPI): the frameworks' ports are derived"))


def _int(environ: Mapping[str, str], name: str, minimum: int) -> int:
    return variable_int(environ, name, minimum, f"; {_FIX_TORCH}")


def _local_world(environ: Mapping[str, str], world: int) -> tuple[int, int | None, str]:
    """``(processes per node, node count or None, the variables behind them)``."""
    count = _int(environ, NODE_COUNT, 1) if environ.get(NODE_COUNT) else None
    if environ.get("LOCAL_WORLD_SIZE"):
        return _int(environ, "LOCAL_WORLD_SIZE", 1), count, "LOCAL_WORLD_SIZE"
    if count is None or world % count:
        raise TopologyError(describe(
            NODE_COUNT, environ.get(NODE_COUNT, ""),
            f"the instance count, dividing WORLD_SIZE={world}: without it or "
            "LOCAL_WORLD_SIZE the processes per node are unknown. Set LOCAL_WORLD_SIZE to "
            "process_count_per_instance in the job's environment_variables, or run the "
            "command without derive-env (Azure ML set every torch variable itself)"))
    return world // count, count, f"WORLD_SIZE / {NODE_COUNT}"


def _read_pytorch(environ: Mapping[str, str], line: Source) -> Report:
    """The PyTorch distribution's per-process variables, passed through (module docstring)."""
    world, rank = _int(environ, "WORLD_SIZE", 1), _int(environ, "RANK", 0)
    local_rank, node_rank = _int(environ, "LOCAL_RANK", 0), _int(environ, "NODE_RANK", 0)
    local_world, count, behind = _local_world(environ, world)
    nodes = count if count is not None else world // local_world
    expected = node_rank * local_world + local_rank
    if (rank >= world or local_rank >= local_world or world % local_world
            or nodes * local_world != world or rank != expected):
        raise TopologyError(
            f"Azure ML PyTorch distribution: RANK={rank}, LOCAL_RANK={local_rank}, "
            f"NODE_RANK={node_rank}, WORLD_SIZE={world}, {local_world} processes per node "
            f"({behind}) disagree: Azure ML starts the same number of processes on each node, "
            f"RANK = NODE_RANK x processes per node + LOCAL_RANK (here {expected}); "
            f"{_FIX_TORCH}")
    master, port = checked_master(environ, "MASTER_ADDR", "MASTER_PORT", _FIX_TORCH)
    run_id = environ[RUN_ID].strip()
    return Report(
        source=line.name, title=line.title, node_rank=node_rank, num_nodes=nodes,
        processes=Processes(rank, local_rank, world, local_world), master=master,
        master_port=port, session_id=run_id, job=(line.name, run_id, str(port)),
        preset=frozenset(n for n in TORCH_VARIABLES if n in environ),
        inputs={"node_rank": ("NODE_RANK",),
                "num_nodes": (NODE_COUNT,) if count else ("WORLD_SIZE", behind),
                "processes": ("RANK", "LOCAL_RANK", "WORLD_SIZE", behind),
                **{fact: (fact.upper(),) for fact in PROCESS_FACTS},
                "local_world_size": (behind,), "master": ("MASTER_ADDR",),
                "master_port": ("MASTER_PORT",), "ports": (RUN_ID, "MASTER_PORT")},
        order="Azure ML's NODE_RANK",
        notes=(f"process {rank} of {world} on node {node_rank} of {nodes} (RANK, WORLD_SIZE, "
               "NODE_RANK): Azure ML's PyTorch distribution set them, they are kept as set",))


def read(environ: Mapping[str, str], line: Source,
         files: Mapping[str, str | None] | None = None) -> Report:
    """``azureml-mpi``: the master, the node count; ``azureml-pytorch``: every fact, as set.
    TopologyError: a malformed value, a count contradicting another, or ranks contradicting
    Azure ML's numbering."""
    if line.name == "azureml-mpi":
        return _read_mpi(environ, line)
    return _read_pytorch(environ, line)
