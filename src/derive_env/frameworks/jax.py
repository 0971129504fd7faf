"""JAX: the coordinator address, and the process count and id for user code.

Rules followed (jax/_src/distributed.py, ``jax.distributed.initialize``): JAX itself reads
``JAX_COORDINATOR_ADDRESS`` (``host:port``, IPv6 bracketed) when ``coordinator_address`` is
not passed; it does NOT read ``JAX_NUM_PROCESSES`` / ``JAX_PROCESS_ID`` (Kubeflow Trainer
sets them too), so user code passes them:

    jax.distributed.initialize(
        num_processes=int(os.environ["JAX_NUM_PROCESSES"]),
        process_id=int(os.environ["JAX_PROCESS_ID"]))

``JAX_LOCAL_DEVICE_IDS`` (read by ``initialize`` when ``local_device_ids`` is not passed;
JAX then restricts the process to those devices by setting ``CUDA_VISIBLE_DEVICES`` to them,
jax/_src/distributed.py): set when a launcher started several processes on a node that
share its GPUs, so that each task owns its slice: ``k = GPUs // local world size`` devices,
``[local_rank*k, (local_rank+1)*k)``, taken from the ids in ``CUDA_VISIBLE_DEVICES`` when
the node's visible devices are already narrowed (numbers only), else 0..GPUs-1. Not set when
the GPUs do not divide evenly, or are named by UUID (a note says why).

One JAX process per task: under a launcher that started processes (srun, mpirun,
torchrun: the topology's process layer) process id = rank and process count = world size;
otherwise one per container (node): process id = node rank, process count = nodes.
The coordinator runs in process 0, on the host of rank 0, at the ``jax-port`` label's port,
else the manager's port policy (Slurm: reserved or derived per job and step), else 1234
(the port used in JAX's multi-process documentation); never the master port a launcher's
store holds (torchrun's).
"""

from __future__ import annotations

from derive_env.errors import TopologyError
from derive_env.frameworks.context import (
    ADDRESS,
    JOB,
    NODE,
    SHARED,
    Context,
    Contribution,
    framework_port,
    node_rank_of,
    nodes_source,
    variable,
)
from derive_env.hosts import host_port

#: The GPUs a process sees (CUDA's and ROCm's variables), in the order they are named.
_VISIBLE = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")

var = variable("jax")


def derive(ctx: Context) -> Contribution:
    """The JAX variables of this container (or process: module docstring).

    :raises TopologyError: the host of rank 0 is unknown and ``MASTER_ADDR`` is not set;
        the port collides with a launcher's store (:func:`framework_port`).
    """
    topo, master = ctx.topology, ctx.master
    port, port_src = framework_port(ctx, "jax")
    layout = topo.processes
    if layout is not None:
        count = (layout.world_size,
                 f"{topo.inputs_of('world_size')}: world size, one JAX process per task")
        own = (layout.rank, f"{topo.inputs_of('rank')}: rank")
        what = ("the number of JAX processes, one per process",
                "this process's JAX process id (one per process)")
    else:
        nodes_src = nodes_source(topo)
        if topo.num_nodes is None:
            raise TopologyError(
                "JAX_NUM_PROCESSES cannot be set: the number of nodes is decided only when the "
                f"job starts ({topo.inputs_of('num_nodes')}: an elastic job); JAX needs it "
                "fixed. Give the job a fixed number of nodes, or drop jax from label "
                "ai.backend.distributed.frameworks")
        count = (topo.num_nodes, f"{nodes_src}: one process per node")
        own = node_rank_of(topo)
        what = ("the number of JAX processes, one per node",
                "this node's JAX process id (one process per node)")
    out = Contribution()
    out.variables += [
        var(
            "JAX_COORDINATOR_ADDRESS",
            host_port(master.addr, port),
            f"master address ({master.addr_source}) + port from {port_src}",
            scope=SHARED, compare=ADDRESS,
        ),
        var("JAX_NUM_PROCESSES", *count, scope=JOB, what=what[0]),
        var("JAX_PROCESS_ID", *own, scope=NODE, what=what[1]),
    ]
    if topo.per_process and layout is not None:
        _local_devices(ctx, out)
    out.notes.append(
        "JAX reads only JAX_COORDINATOR_ADDRESS; pass the others: jax.distributed.initialize("
        "num_processes=int(os.environ['JAX_NUM_PROCESSES']), "
        "process_id=int(os.environ['JAX_PROCESS_ID']))"
    )
    return out


def _local_devices(ctx: Context, out: Contribution) -> None:
    """``JAX_LOCAL_DEVICE_IDS``: this task's slice of the node's GPUs (module docstring)."""
    topo = ctx.topology
    layout = topo.processes
    assert layout is not None
    visible_name = next((n for n in _VISIBLE if ctx.environ.get(n, "").strip()), None)
    if visible_name is not None:
        ids = [i.strip() for i in ctx.environ[visible_name].split(",") if i.strip()]
        # ASCII digits only: str.isdigit() also takes '²' and '٣', which int() refuses or
        # reads as another device than CUDA does.
        if not all(i.isascii() and i.isdigit() for i in ids):
            out.notes.append(
                f"JAX_LOCAL_DEVICE_IDS not set: {visible_name} names devices by UUID; JAX "
                "takes numbers")
            return
        devices, src = [int(i) for i in ids], visible_name
    elif topo.gpus_per_node:
        devices, src = list(range(topo.gpus_per_node)), topo.inputs_of("gpus")
    else:
        return  # no GPU known: JAX uses what it finds (CPU)
    per = len(devices) // layout.local_world_size
    if per == 0 or len(devices) % layout.local_world_size:
        out.notes.append(
            f"JAX_LOCAL_DEVICE_IDS not set: {len(devices)} GPU(s) ({src}) do not divide among "
            f"the {layout.local_world_size} processes of this node")
        return
    own = devices[layout.local_rank * per:(layout.local_rank + 1) * per]
    out.variables.append(var(
        "JAX_LOCAL_DEVICE_IDS", ",".join(map(str, own)),
        f"{src}: {per} of {len(devices)} GPU(s) for local rank {layout.local_rank} of "
        f"{layout.local_world_size}", scope=NODE, what="this process's share of the node's GPUs"))
