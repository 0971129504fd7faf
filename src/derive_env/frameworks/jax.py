"""JAX: the coordinator address, and the process count and id for user code.

Rules followed (jax/_src/distributed.py, ``jax.distributed.initialize``): JAX itself reads
``JAX_COORDINATOR_ADDRESS`` (``host:port``, IPv6 bracketed) when ``coordinator_address`` is
not passed; it does NOT read ``JAX_NUM_PROCESSES`` / ``JAX_PROCESS_ID`` (Kubeflow Trainer
sets them too), so user code passes them:

    jax.distributed.initialize(
        num_processes=int(os.environ["JAX_NUM_PROCESSES"]),
        process_id=int(os.environ["JAX_PROCESS_ID"]))

One JAX process per task: under a launcher that started processes (srun, mpirun,
torchrun: the topology's process layer) process id = rank and process count = world size;
otherwise one per container (node): process id = node rank, process count = nodes.
The coordinator runs in process 0, on the host of rank 0, at the ``jax-port`` label's port,
else the manager's port policy (Slurm: reserved or derived per job and step), else 1234
(the port used in JAX's multi-process documentation); never the master port a launcher's
store holds (torchrun's).
"""

from __future__ import annotations

from derive_env.frameworks import (
    Context,
    Contribution,
    framework_port,
    node_rank_of,
    variable,
)
from derive_env.topology import host_port

var = variable("jax")


def derive(ctx: Context) -> Contribution:
    """The JAX variables of this container (or process: module docstring).

    :raises TopologyError: the host of rank 0 is unknown and ``MASTER_ADDR`` is not set;
        the port collides with a launcher's store (:func:`framework_port`).
    """
    topo, policy, master = ctx.topology, ctx.policy, ctx.master
    port, port_src = framework_port(ctx, "jax", "jax_port", f"default ({policy.jax_port})")
    layout = topo.processes
    if layout is not None:
        src = topo.inputs_of("processes")
        count = (layout.world_size, f"{src}: world size, one JAX process per task")
        own = (layout.rank, f"{src}: rank")
    else:
        nodes_src = topo.inputs_of("nodes") if topo.multi_node else "single-container session"
        count = (topo.num_nodes, f"{nodes_src}: one process per node")
        own = node_rank_of(topo)
    out = Contribution()
    out.variables += [
        var(
            "JAX_COORDINATOR_ADDRESS",
            host_port(master.addr, port),
            f"master address ({master.addr_source}) + port from {port_src}",
        ),
        var("JAX_NUM_PROCESSES", *count),
        var("JAX_PROCESS_ID", *own),
    ]
    out.notes.append(
        "JAX reads only JAX_COORDINATOR_ADDRESS; pass the others: jax.distributed.initialize("
        "num_processes=int(os.environ['JAX_NUM_PROCESSES']), "
        "process_id=int(os.environ['JAX_PROCESS_ID']))"
    )
    return out
