"""JAX: the coordinator address, and the process count and id for user code.

Rules followed (jax/_src/distributed.py, ``jax.distributed.initialize``): JAX itself reads
``JAX_COORDINATOR_ADDRESS`` (``host:port``, IPv6 bracketed) when ``coordinator_address`` is
not passed; it does NOT read ``JAX_NUM_PROCESSES`` / ``JAX_PROCESS_ID`` (Kubeflow Trainer
sets them too), so user code passes them:

    jax.distributed.initialize(
        num_processes=int(os.environ["JAX_NUM_PROCESSES"]),
        process_id=int(os.environ["JAX_PROCESS_ID"]))

One JAX process per container (node): process id = node rank, process count = nodes.
The coordinator runs in process 0, on the master (node rank 0) at the ``jax-port`` label's
port (default 1234, the port used in JAX's multi-process documentation).
"""

from __future__ import annotations

from derive_env.frameworks import Context, Contribution, variable
from derive_env.topology import host_port

var = variable("jax")


def derive(ctx: Context) -> Contribution:
    """The JAX variables of this container."""
    topo, policy, master = ctx.topology, ctx.policy, ctx.master
    nodes_src = topo.inputs_of("nodes") if topo.num_nodes > 1 else "single-container session"
    rank_src = topo.inputs_of("node_rank") if topo.num_nodes > 1 else "single-container session"
    port_src = policy.label_or_default("jax_port")
    if port_src == "default":
        port_src = f"default ({policy.jax_port})"
    out = Contribution()
    out.variables += [
        var(
            "JAX_COORDINATOR_ADDRESS",
            host_port(master.addr, policy.jax_port),
            f"master address ({master.addr_source}) + port from {port_src}",
        ),
        var("JAX_NUM_PROCESSES", topo.num_nodes, f"{nodes_src}: one process per node"),
        var("JAX_PROCESS_ID", topo.node_rank, rank_src),
    ]
    out.notes.append(
        "JAX reads only JAX_COORDINATOR_ADDRESS; pass the others: jax.distributed.initialize("
        "num_processes=int(os.environ['JAX_NUM_PROCESSES']), "
        "process_id=int(os.environ['JAX_PROCESS_ID']))"
    )
    return out
