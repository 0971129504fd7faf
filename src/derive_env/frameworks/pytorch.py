"""PyTorch: ``MASTER_*``, ``NODE_RANK`` and torchrun's ``PET_*`` defaults.

Rules followed:

* torchrun (torch/distributed/run.py, argparse_util.py ``env`` action) reads
  ``PET_<OPTION>`` as the default of each option, so ``PET_NNODES``, ``PET_NODE_RANK``,
  ``PET_MASTER_ADDR``, ``PET_MASTER_PORT``, ``PET_NPROC_PER_NODE`` make a bare
  ``torchrun train.py`` join the static rendezvous at master_addr:master_port, whose rank 0
  is node rank 0.
* ``init_process_group("env://")`` (torch/distributed/rendezvous.py) reads ``MASTER_ADDR``,
  ``MASTER_PORT``, ``RANK``, ``WORLD_SIZE``; Lightning reads ``NODE_RANK``.
* Mode ``torchrun`` (default) sets no per-process rank at container level: torchrun,
  Lightning and launchers set ``RANK``/``LOCAL_RANK``/``WORLD_SIZE`` per process, and a
  container-level ``RANK``/``LOCAL_RANK`` makes Lightning and NePS take the launcher for an
  already-launched worker. Mode ``process-per-container`` adds them for scripts that call
  ``init_process_group("env://")`` once per container. In ``torchrun`` mode with more
  than one node, a user-set ``RANK``/``WORLD_SIZE``/``LOCAL_RANK``/``LOCAL_WORLD_SIZE`` is
  checked (not set) against one process per node (``Contribution.checks``).
* A process that is one worker of the job (``topology.per_process``: an MPI launcher's
  rank, however its ranks are placed; a worker torchrun started; any launcher's process
  when a node runs more than one, ``srun --ntasks-per-node=2``) gets ``RANK``,
  ``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE`` (the launcher's), ``NODE_RANK`` when
  its node is known, ``MASTER_ADDR`` (the host of rank 0) and ``MASTER_PORT``, and no
  ``PET_*`` (a torchrun started from such a worker would read them as its own job),
  whatever the mode. Under torchrun its own values are kept (preset) and nothing of
  torchrun's is added or checked (an elastic ``PET_NNODES=1:4`` stays as it is). A
  manager that configured torchrun's own rendezvous (``PET_RDZV_ENDPOINT`` among its
  ``topology.preset``: an elastic Kubeflow PyTorchJob) gets no ``PET_*`` added either. One
  process per node of ``srun --ntasks-per-node=1`` (which starts torchrun) is the node
  layer as above.
* Variables a launcher already set for its workers (torchrun's ``RANK``, ``MASTER_PORT``...:
  ``topology.preset``) are never rewritten: they are derived from the launcher's own values,
  so the merge keeps them unchanged.
"""

from __future__ import annotations

from derive_env.frameworks.context import (
    COUNT_RANGE,
    FOLLOWS,
    HOST,
    JOB,
    NODE,
    SHARED,
    Context,
    Contribution,
    DerivedVariable,
    node_rank_of,
    nodes_source,
    variable,
)
from derive_env.topology import ClusterTopology

var = variable("pytorch")
#: What each per-process variable is, for messages: with one process per node, and under a
#: launcher's process layer.
_WHAT = {
    "RANK": ("this node's rank, one process per node", "this process's rank"),
    "WORLD_SIZE": ("the number of nodes, one process per node",
                   "the number of processes of the job"),
    "LOCAL_RANK": ("the local rank of the one process per node", "this process's local rank"),
    "LOCAL_WORLD_SIZE": ("the number of processes per node, one",
                         "the number of processes on this node"),
}


def derive(ctx: Context) -> Contribution:
    """The PyTorch variables of this container (docs/behaviour.md section 6), or of this process
    when the launcher started several per node (module docstring).

    :raises TopologyError: no source states the host of rank 0 and ``MASTER_ADDR`` is not
        set (:func:`derive_env.frameworks.context.master_of`).
    """
    if ctx.topology.per_process:
        return _per_process(ctx)
    topo, policy, master = ctx.topology, ctx.policy, ctx.master
    nodes_src = nodes_source(topo)
    node_rank, rank_src = node_rank_of(topo)
    out = Contribution()
    out.variables += [
        *_master(ctx),
        var("NODE_RANK", node_rank, rank_src, scope=NODE, what=_NODE_RANK),
        *([var("PET_NNODES", topo.num_nodes, f"{nodes_src}: number of nodes", scope=JOB,
               compare=COUNT_RANGE, what="the number of nodes")]
          if topo.num_nodes is not None else []),
        var("PET_NODE_RANK", node_rank, rank_src, scope=NODE, what=_NODE_RANK),
        var("PET_MASTER_ADDR", master.addr, f"same as MASTER_ADDR: {master.addr_source}",
            scope=FOLLOWS, compare=HOST, leader="MASTER_ADDR"),
        var("PET_MASTER_PORT", master.port, f"same as MASTER_PORT: {master.port_source}",
            scope=FOLLOWS, leader="MASTER_PORT"),
    ]
    out.warnings += _user_nproc_problems(ctx.environ.get("PET_NPROC_PER_NODE", ""))
    if policy.nproc_per_node is not None:
        out.variables.append(var(
            "PET_NPROC_PER_NODE", policy.nproc_per_node, "label " + _alias("nproc_per_node"),
            scope=SHARED))
    elif topo.gpus_per_node:
        out.variables.append(var(
            "PET_NPROC_PER_NODE", topo.gpus_per_node,
            f"{topo.inputs_of('gpus')}: GPU count of this node", scope=SHARED,
            node_decided=True))
    elif not ctx.environ.get("PET_NPROC_PER_NODE"):
        out.notes.append(_no_nproc_note(topo))
    if "PET_RDZV_ENDPOINT" in topo.preset:
        # The manager configured torchrun's own rendezvous (an elastic Kubeflow PyTorchJob):
        # its PET_* are torchrun's authority; none is added beside them.
        out.variables = [v for v in out.variables
                         if not v.name.startswith("PET_") or ctx.environ.get(v.name)]
        out.notes.append("torchrun's own rendezvous (PET_RDZV_ENDPOINT, set by the manager): "
                         "no PET_* added, the manager's kept as they are")
    if policy.pytorch_mode == "process-per-container":
        mode = "label " + _alias("pytorch_mode")
        out.variables += _ranks(topo, {
            "RANK": (node_rank, f"{rank_src} ({mode}: one process per container)"),
            "WORLD_SIZE": (topo.num_nodes, f"{nodes_src}: number of nodes ({mode})"),
            "LOCAL_RANK": (0, f"{mode}: one process per container"),
            "LOCAL_WORLD_SIZE": (1, f"{mode}: one process per container")})
    elif topo.multi_node:
        # torchrun sets these per worker; a container-level value (set for the whole
        # session) is read by what runs without torchrun (Lightning, NePS, env://), so it
        # must describe the one layout a container-level value can: one process per node.
        why = ("torchrun mode: not set, torchrun sets it for each worker it starts; a value "
               "for the whole container can only describe one process on each node")
        out.checks += _ranks(topo, {"RANK": (node_rank, why), "WORLD_SIZE": (topo.num_nodes, why),
                                    "LOCAL_RANK": (0, why), "LOCAL_WORLD_SIZE": (1, why)})
    return out


_NODE_RANK = "this node's node rank"


def _master(ctx: Context) -> list[DerivedVariable]:
    """``MASTER_ADDR``/``MASTER_PORT``: the topology's own values, so that a user-set one
    shows as kept over them."""
    master = ctx.master
    return [
        var("MASTER_ADDR", master.derived_addr, master.derived_addr_source, scope=SHARED,
            compare=HOST),
        var("MASTER_PORT", master.derived_port, master.derived_port_source, scope=SHARED),
    ]


def _ranks(
    topo: ClusterTopology, values: dict[str, tuple[object, str]]
) -> list[DerivedVariable]:
    """The per-process variables (keys of :data:`_WHAT`) from name -> (value, provenance),
    in the order given. ``RANK`` identifies the process; the others are the same on every
    node of one process per node, and are checked with the job's sizes. With one worker per
    process, ``LOCAL_RANK`` identifies the process and ``LOCAL_WORLD_SIZE`` counts this
    node's: both are node-local (left out of the job digest)."""
    layer = int(topo.processes is not None)
    local = ("RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE") if topo.per_process else ("RANK",)
    return [
        var(name, value, provenance, scope=NODE if name in local else JOB,
            what=_WHAT[name][layer])
        for name, (value, provenance) in values.items()
    ]


def _per_process(ctx: Context) -> Contribution:
    """One worker per process: the launcher's process layer (module docstring)."""
    topo = ctx.topology
    layout = topo.processes
    assert layout is not None  # per_process
    src = topo.inputs_of
    out = Contribution()
    out.variables += [*_master(ctx), *_ranks(topo, {
        "RANK": (layout.rank, f"{src('rank')}: rank"),
        "LOCAL_RANK": (layout.local_rank, f"{src('local_rank')}: local rank"),
        "WORLD_SIZE": (layout.world_size, f"{src('world_size')}: world size"),
        "LOCAL_WORLD_SIZE": (layout.local_world_size,
                             f"{src('local_world_size')}: local world size")})]
    if topo.node_rank is not None:
        out.variables.append(var("NODE_RANK", topo.node_rank, topo.inputs_of("node_rank"),
                                 scope=NODE, what=_NODE_RANK))
    else:
        out.notes.append(
            "NODE_RANK not set: no source states which node this process is on (the "
            "launcher gives ranks; the node list does not say where each one runs)")
    out.notes.append(
        f"one worker per process ({layout.world_size} processes, {layout.local_world_size} "
        "on this node): no PET_*, each process is already a worker (a torchrun started "
        "inside would read them as its own job)")
    return out


def _alias(field: str) -> str:
    from derive_env.policy import ImagePolicy

    return str(ImagePolicy.model_fields[field].alias)


#: The words torchrun's --nproc-per-node takes besides a number (torch/distributed/run.py,
#: determine_local_world_size); a custom device backend's name (privateuse1) too.
_NPROC_WORDS = ("cpu", "gpu", "xpu", "auto")


#: The variable each source reads for this node's GPU count (its module's), named unset.
_GPU_VARIABLES = {"slurm-step": "SLURM_GPUS_ON_NODE", "slurm-allocation": "SLURM_GPUS_ON_NODE",
                  "backendai": "GPU_COUNT", "sagemaker": "SM_NUM_GPUS",
                  "skypilot": "SKYPILOT_NUM_GPUS_PER_NODE", "dstack": "DSTACK_GPUS_PER_NODE",
                  "determined": "DET_SLOT_IDS"}


def _no_nproc_note(topo: ClusterTopology) -> str:
    """Where torchrun's 1 process per node comes from when nothing states a count, and how
    to change it (torchrun's ``--nproc-per-node`` defaults to 1: torch/distributed/run.py)."""
    stated = topo.inputs_of("gpus")
    variable = stated if stated != "(none)" else _GPU_VARIABLES.get(topo.source)
    if variable is None:
        gpus = f"{topo.source} states none"
    else:
        gpus = f"{variable} is 0" if topo.gpus_per_node == 0 else f"{variable} unset"
    return ("PET_NPROC_PER_NODE not set, so torchrun starts 1 process per node: no "
            f"nproc-per-node label and no GPU count ({gpus}); to change: "
            f"DERIVE_ENV_NPROC_PER_NODE=N (or --label {_alias('nproc_per_node')}=N), or "
            "torchrun --nproc-per-node=N")


def _user_nproc_problems(value: str) -> list[str]:
    """A user-set ``PET_NPROC_PER_NODE`` checked as torchrun reads it: ``int(value)`` >= 1
    (Python's int(), as run.py calls it), one of :data:`_NPROC_WORDS`, else perhaps a custom
    device backend's name (``npu`` of torch_npu): a warning, since no list of those exists.

    :returns: warnings (an unknown word); none for an unset, empty or valid value.
    :raises TopologyError: a number below 1 (WorkerSpec refuses it,
        elastic/agent/server/api.py), or text no backend can be named (run.py raises
        ``Unsupported nproc_per_node value``): torchrun would fail on every node.
    """
    if not value:
        return []
    from derive_env.errors import TopologyError, describe, shorten

    expected = ("a number of processes per node >= 1, or cpu, gpu, xpu or auto, as torchrun "
                "reads --nproc-per-node (torch/distributed/run.py determine_local_world_size)")
    fix = ("; set it to one of those, or remove PET_NPROC_PER_NODE from the job's environment "
           "(derive-env derives it from the GPU count or the label "
           "ai.backend.distributed.nproc-per-node)")
    try:
        count: int | None = int(value)
    except ValueError:
        count = None
    if count is not None and count >= 1:
        return []
    if count is not None or not (value.isascii() and value.isidentifier()):
        raise TopologyError(describe("PET_NPROC_PER_NODE", value, expected + fix))
    if value in _NPROC_WORDS:
        return []
    return [f"PET_NPROC_PER_NODE={shorten(value)!r} is not a number nor one of "
            f"{', '.join(_NPROC_WORDS)}: kept, for torchrun to read as the name of a custom "
            "device backend (torch_npu's npu); torchrun stops with \"Unsupported "
            "nproc_per_node value\" if it is not one"]
