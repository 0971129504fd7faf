"""JAX: the coordinator address, and the process count and id for user code.

Rules followed (jax/_src/distributed.py, ``jax.distributed.initialize``): JAX itself reads
``JAX_COORDINATOR_ADDRESS`` (``host:port``, IPv6 bracketed) when ``coordinator_address`` is
not passed; it does NOT read ``JAX_NUM_PROCESSES`` / ``JAX_PROCESS_ID`` (Kubeflow Trainer
sets them too), so user code passes them:

    jax.distributed.initialize(
        num_processes=int(os.environ["JAX_NUM_PROCESSES"]),
        process_id=int(os.environ["JAX_PROCESS_ID"]))

``JAX_LOCAL_DEVICE_IDS`` (read by ``initialize`` when ``local_device_ids`` is not passed,
jax/_src/distributed.py) holds ORDINALS within the devices the process sees: JAX hands them
to its GPU client as ``jax_cuda_visible_devices`` / ``jax_rocm_visible_devices``, which
index the list ``CUDA_VISIBLE_DEVICES`` already narrowed (jax-ml/jax#23452: ``6,7`` under
``CUDA_VISIBLE_DEVICES=4,5,6,7`` are invalid ordinals; the last two are ``2,3``). Without
it, JAX's Slurm and Open MPI detection binds ``[local process id]``
(jax/_src/clusters/cluster.py ``auto_detect_unset_distributed_params``): one GPU per node
for one process per node (#16788, #29669), an invalid ordinal for a task whose GPUs the
launcher narrowed (#28194). So it is set whenever the GPUs are known, by
:func:`device_ordinals`: ``m`` = the devices this process sees (the entries of
``CUDA_VISIBLE_DEVICES``, else ``HIP_VISIBLE_DEVICES``, ``ROCR_VISIBLE_DEVICES``; else the
source's GPU count of the node, ``SLURM_GPUS_ON_NODE``, Backend.AI's ``GPU_COUNT``):

* one process on the node: ``0..m-1``, all of them;
* several processes, each seeing fewer devices than the node's GPU count (Slurm's
  ``--gpus-per-task`` or ``--gpu-bind``: each task's ``CUDA_VISIBLE_DEVICES`` lists its own
  GPUs, while ``SLURM_GPUS_ON_NODE`` counts the step's on the node): already narrowed by
  the launcher, ``0..m-1``;
* several processes sharing the list: ``k = m // local world size`` each, ordinals
  ``local_rank*k .. (local_rank+1)*k - 1``; not set when ``m`` does not divide, with a
  warning naming both counts and the fix: JAX's Slurm and Open MPI detection
  (jax/_src/clusters/slurm_cluster.py ``SLURM_LOCALID``, ompi_cluster.py
  ``OMPI_COMM_WORLD_LOCAL_RANK``, read by cluster.py ``auto_detect_unset_distributed_params``)
  then binds ``[local rank]``: an invalid device for every local rank >= ``m`` (8 tasks
  sharing 4 GPUs: local ranks 4-7), GPUs left idle otherwise; without a detected cluster
  every process takes every visible GPU.

Never the values of ``CUDA_VISIBLE_DEVICES``. An entry that is not a device number (ASCII
digits) or UUID (``GPU-...``, ``MIG-...``), ``-1`` or ``²`` included, leaves it unset
with a note naming the variable and the entry (CUDA stops reading the list there); so does
a variable set blank (no device visible).

One JAX process per task: under a launcher that started processes (srun, mpirun,
torchrun: the topology's process layer) process id = rank and process count = world size;
otherwise one per container (node): process id = node rank, process count = nodes.
The coordinator runs in process 0, on the host of rank 0, at the ``jax-port`` label's port,
else the manager's port policy (Slurm: reserved or derived per job and step), else 1234
(the port used in JAX's multi-process documentation); never the master port a launcher's
store holds (torchrun's).
"""

from __future__ import annotations

from derive_env.errors import TopologyError, shorten
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
                f"job starts, or not stated ({topo.inputs_of('num_nodes')}: an elastic job, or "
                "a manager that does not say it); JAX needs it fixed. Give the job a fixed "
                "number of nodes (set the variable named), or drop jax from label "
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
    _local_devices(ctx, out)
    out.notes.append(
        "JAX reads only JAX_COORDINATOR_ADDRESS; pass the others: jax.distributed.initialize("
        "num_processes=int(os.environ['JAX_NUM_PROCESSES']), "
        "process_id=int(os.environ['JAX_PROCESS_ID']))"
    )
    return out


def device_ordinals(visible: int, node_gpus: int | None, local: int,
                    local_rank: int) -> tuple[list[int], str] | str:
    """The device ordinals JAX should use in one process (module docstring).

    :param visible: devices this process sees (>= 1).
    :param node_gpus: the node's GPU count as a source states it, ``None`` when none does.
    :param local: processes on this node (1: one per node); ``local_rank`` this one's.
    :returns: ``(ordinals, why)``; or, when there is no right value, the reason (text).
    """
    whole = list(range(visible))
    if local == 1:
        return whole, "the one process of this node: all of them"
    if node_gpus is not None and visible < node_gpus:
        return whole, (f"this process sees {visible} of the node's {node_gpus} GPU(s): "
                       "narrowed per task by the launcher, all of them")
    per, rest = divmod(visible, local)
    if per == 0 or rest:
        return f"{visible} GPU(s) do not divide among the {local} processes of this node"
    return whole[local_rank * per:(local_rank + 1) * per], (
        f"{per} of {visible} shared GPU(s) for local rank {local_rank} of {local}")


def _local_devices(ctx: Context, out: Contribution) -> None:
    """``JAX_LOCAL_DEVICE_IDS``: this process's devices as ordinals (module docstring)."""
    topo = ctx.topology
    layout = topo.processes if topo.per_process else None
    local, local_rank = (layout.local_world_size, layout.local_rank) if layout else (1, 0)
    visible_name = next((n for n in _VISIBLE if ctx.environ.get(n, "").strip()), None)
    if visible_name is not None:
        text = ctx.environ[visible_name]
        ids = [i.strip() for i in text.split(",") if i.strip()]
        bad = next((i for i in ids if not _is_device(i)), None if ids else "")
        if bad is not None:
            out.notes.append(
                f"JAX_LOCAL_DEVICE_IDS not set: {visible_name}={shorten(text, 80)!r} holds "
                f"{shorten(bad, 40)!r}, which is not a device number (ASCII digits) or UUID "
                "(GPU-..., MIG-...); CUDA stops reading the list there")
            return
        visible, src = len(ids), visible_name
    elif any(n in ctx.environ for n in _VISIBLE):  # set, and blank: CUDA sees no device
        blank = next(n for n in _VISIBLE if n in ctx.environ)
        out.notes.append(f"JAX_LOCAL_DEVICE_IDS not set: {blank} is set and blank: no device "
                         "is visible")
        return
    elif topo.gpus_per_node:
        visible, src = topo.gpus_per_node, topo.inputs_of("gpus")
    else:
        return  # no GPU known: JAX uses what it finds (CPU)
    got = device_ordinals(visible, topo.gpus_per_node, local, local_rank)
    if isinstance(got, str):
        out.warnings.append(_unshared(got, src, visible, local))
        return
    own, why = got
    gpus = f", node's GPUs from {topo.inputs_of('gpus')}" if topo.gpus_per_node else ""
    out.variables.append(var(
        "JAX_LOCAL_DEVICE_IDS", ",".join(map(str, own)),
        f"{src}: {visible} visible device(s){gpus}; ordinals within them, {why}",
        scope=NODE, what="this process's devices (ordinals within the visible ones)",
        node_decided=True))


def _unshared(why: str, src: str, visible: int, local: int) -> str:
    """The warning of ``visible`` devices that do not divide among ``local`` processes:
    what JAX then binds (module docstring) and the fix."""
    if visible < local:
        binds = (f"an invalid device for local ranks {visible}-{local - 1}"
                 if local - visible > 1 else f"an invalid device for local rank {visible}")
    else:
        binds = f"one GPU per process, {visible - local} of them idle"
    return (f"JAX_LOCAL_DEVICE_IDS not set: {why} ({src}): JAX's Slurm and Open MPI "
            f"detection then binds device [local rank] ({binds}), and without it every "
            f"process takes every visible GPU. Start a number of processes per node that "
            f"divides the {visible} GPU(s) (one per GPU: srun --ntasks-per-node={visible}, or "
            "--gpus-per-task=1), or pass local_device_ids to jax.distributed.initialize")


def _is_device(entry: str) -> bool:
    """An entry CUDA or ROCm reads as a device: ASCII digits, or a UUID (``GPU-``, ``MIG-``).

    ``str.isdigit()`` alone takes ``²`` and ``٣``, which ``int()`` refuses or reads as
    another device than CUDA does."""
    return entry.isascii() and (entry.isdigit() or entry[:4].upper() in ("GPU-", "MIG-"))
