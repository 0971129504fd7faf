"""The torchrun source: a worker that torchrun (torchelastic) already started
(docs/sources/torchrun.md).

Table line ``torchrun``. torchrun's agent sets every worker's variables itself
(torch/distributed/elastic/agent/server/local_elastic_agent.py, ``_start_workers``): the
process layer (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``), the node
layer without a host list (``GROUP_RANK`` = node rank, ``GROUP_WORLD_SIZE`` = nodes), the
master (``MASTER_ADDR``, ``MASTER_PORT``: the agent's store when
``TORCHELASTIC_USE_AGENT_STORE=True``) and ``TORCHELASTIC_*``. They are reported as
``preset``: never rewritten (a restart or a re-rendezvous renumbers them; a derived value
for one of them is compared, never exported over it).

What torchrun guarantees, and so what is checked here (torch 2.13,
torch/distributed/elastic/agent/server/api.py, ``_assign_worker_ranks``): the agents, in
``GROUP_RANK`` order, hold consecutive blocks of global ranks, each of its own
``LOCAL_WORLD_SIZE`` >= 1 (``WorkerSpec`` refuses 0), and ``RANK`` = the block's base +
the worker's local rank. So ``RANK >= GROUP_RANK + LOCAL_RANK`` (each earlier agent holds at
least one rank) and ``RANK + (GROUP_WORLD_SIZE - GROUP_RANK - 1) < WORLD_SIZE`` (each later
agent too). ``--virtual-local-rank`` sets ``LOCAL_RANK=0`` for every worker
(``_set_local_rank_env``), so ``LOCAL_RANK`` is used in a bound only when it is not 0. With
``TORCH_ELASTIC_WORKER_IDENTICAL=1`` (inherited from the agent's environment) ranks are
``GROUP_RANK * LOCAL_WORLD_SIZE + local rank`` and ``WORLD_SIZE = GROUP_WORLD_SIZE *
LOCAL_WORLD_SIZE``. With one role (``ROLE_WORLD_SIZE == WORLD_SIZE``) ``ROLE_RANK == RANK``.
Agents may run different numbers of workers, so nothing else ties ``WORLD_SIZE`` to
``LOCAL_WORLD_SIZE``.

With the c10d rendezvous ``GROUP_RANK`` is torchrun's own order, not the outer manager's:
torch 2.13 sorts the participants by (host name or --local-addr, pid, local id) as strings
(torch/distributed/elastic/rendezvous/dynamic_rendezvous.py, _mark_rendezvous_complete;
recorded: ``node-10`` before ``node-9``), so rank 0 need not be on the rendezvous endpoint's
host (pytorch#137402). The report says ``renumbers``: an outer manager's host list in
another order is not an error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from derive_env.errors import TopologyError, describe
from derive_env.sources.report import PROCESS_FACTS, Processes, Report
from derive_env.sources.roles import checked_master
from derive_env.validation import variable_index, variable_int

if TYPE_CHECKING:
    from derive_env.sources import Source

#: Variables torchrun's agent sets for a worker (local_elastic_agent.py, _start_workers and
#: _set_local_rank_env; OMP_NUM_THREADS=1 by torch/distributed/run.py when a node runs more
#: than one worker, CUDA_VISIBLE_DEVICES copied or, with --virtual-local-rank, chosen);
#: besides these, every TORCHELASTIC_* (error file, timer file, signals).
WORKER_VARIABLES = (
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
    "ROLE_RANK", "ROLE_NAME", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING", "OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES",
)

#: Ends every message: a torchrun worker's variables are torchrun's, so a bad one was
#: changed after torchrun set it.
FIX = ("torchrun sets it for every worker (torch/distributed/elastic/agent/server/"
       "local_elastic_agent.py); something changed it after torchrun started this worker "
       "(a wrapper script, an env file, a value copied from another container): do not set "
       "torchrun's variables yourself")

_PROCESSES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE")


def _int(environ: Mapping[str, str], name: str, minimum: int) -> int:
    """``environ[name]`` as an integer >= ``minimum``; TopologyError naming it otherwise."""
    return variable_int(environ, name, minimum, f"; {FIX}")


#: torchrun's integers (variable, minimum), in the order they are read.
_INTEGERS = (("RANK", 0), ("LOCAL_RANK", 0), ("WORLD_SIZE", 1), ("LOCAL_WORLD_SIZE", 1),
             ("GROUP_RANK", 0), ("GROUP_WORLD_SIZE", 1))


def _check_ranks(environ: Mapping[str, str], got: Mapping[str, int]) -> None:
    """The guarantees of _assign_worker_ranks (module docstring) for the integers ``got``
    (by variable); TopologyError naming the variables that disagree."""
    for index, count in (("RANK", "WORLD_SIZE"), ("LOCAL_RANK", "LOCAL_WORLD_SIZE"),
                         ("GROUP_RANK", "GROUP_WORLD_SIZE")):  # torchrun numbers from 0
        variable_index(environ, index, count, FIX)
    rank, local_rank, world, local_world, group_rank, groups = (got[n] for n, _ in _INTEGERS)
    if local_world > world:
        raise TopologyError(describe(
            "LOCAL_WORLD_SIZE", environ["LOCAL_WORLD_SIZE"],
            f"at most WORLD_SIZE={environ['WORLD_SIZE']!r} (this node's workers are part of "
            f"the job's); {FIX}"))
    if groups > world:
        raise TopologyError(describe(
            "GROUP_WORLD_SIZE", environ["GROUP_WORLD_SIZE"],
            f"at most WORLD_SIZE={environ['WORLD_SIZE']!r} (every node runs at least one "
            f"worker); {FIX}"))
    before = group_rank + local_rank  # ranks that must come before this worker's
    after = groups - group_rank - 1 + (local_world - 1 - local_rank if local_rank else 0)
    if rank < before or rank + after >= world:
        raise TopologyError(describe(
            "RANK", environ["RANK"],
            f"a rank from {before} to {world - 1 - after}: with GROUP_RANK="
            f"{environ['GROUP_RANK']!r} of GROUP_WORLD_SIZE={environ['GROUP_WORLD_SIZE']!r}, "
            f"LOCAL_RANK={environ['LOCAL_RANK']!r} of LOCAL_WORLD_SIZE="
            f"{environ['LOCAL_WORLD_SIZE']!r} and WORLD_SIZE={environ['WORLD_SIZE']!r}, every "
            f"other node holding at least one rank (torch/distributed/elastic/agent/server/"
            f"api.py, _assign_worker_ranks); {FIX}"))
    if environ.get("TORCH_ELASTIC_WORKER_IDENTICAL") == "1":
        if world != groups * local_world:
            raise TopologyError(describe(
                "WORLD_SIZE", environ["WORLD_SIZE"],
                f"GROUP_WORLD_SIZE x LOCAL_WORLD_SIZE = {groups * local_world} under "
                f"TORCH_ELASTIC_WORKER_IDENTICAL=1 (api.py, _assign_worker_ranks); {FIX}"))
        if rank // local_world != group_rank or (local_rank and rank % local_world != local_rank):
            raise TopologyError(describe(
                "RANK", environ["RANK"],
                f"GROUP_RANK x LOCAL_WORLD_SIZE + LOCAL_RANK = "
                f"{group_rank * local_world + local_rank} under TORCH_ELASTIC_WORKER_"
                f"IDENTICAL=1 (api.py, _assign_worker_ranks); {FIX}"))


def _check_role(environ: Mapping[str, str], got: Mapping[str, int]) -> None:
    """ROLE_RANK / ROLE_WORLD_SIZE, when set, as _assign_worker_ranks numbers them."""
    rank, world, local_world = got["RANK"], got["WORLD_SIZE"], got["LOCAL_WORLD_SIZE"]
    if not (environ.get("ROLE_RANK") or environ.get("ROLE_WORLD_SIZE")):
        return
    for name in ("ROLE_RANK", "ROLE_WORLD_SIZE"):
        if not environ.get(name):
            other = "ROLE_WORLD_SIZE" if name == "ROLE_RANK" else "ROLE_RANK"
            raise TopologyError(describe(
                name, environ.get(name, ""),
                f"set with {other}={environ[other]!r} (torchrun sets both); {FIX}"))
    role_world = _int(environ, "ROLE_WORLD_SIZE", 1)
    role_rank = variable_index(environ, "ROLE_RANK", "ROLE_WORLD_SIZE", FIX)
    if not local_world <= role_world <= world:
        raise TopologyError(describe(
            "ROLE_WORLD_SIZE", environ["ROLE_WORLD_SIZE"],
            f"from LOCAL_WORLD_SIZE={environ['LOCAL_WORLD_SIZE']!r} to WORLD_SIZE="
            f"{environ['WORLD_SIZE']!r} (this node's workers share one role); {FIX}"))
    if role_world == world and role_rank != rank:
        raise TopologyError(describe(
            "ROLE_RANK", environ["ROLE_RANK"],
            f"RANK={environ['RANK']!r}: with one role (ROLE_WORLD_SIZE == WORLD_SIZE) torchrun "
            f"numbers roles as it numbers ranks (api.py, _assign_worker_ranks); {FIX}"))


def read(environ: Mapping[str, str], line: Source,
         files: Mapping[str, str | None] | None = None) -> Report:
    """What a torchrun worker's environment says.

    :returns: the process layer (``RANK`` ...), ``num_nodes`` = ``GROUP_WORLD_SIZE``,
        ``node_rank`` = ``GROUP_RANK``, ``master`` = ``MASTER_ADDR``, ``master_port`` =
        ``MASTER_PORT`` (a TCP port: the agent's store when
        ``TORCHELASTIC_USE_AGENT_STORE=True``, so the frameworks need other ports), ``job`` =
        ``("torchrun", TORCHELASTIC_RUN_ID, MASTER_PORT)`` (every worker of a rendezvous round
        shares both: the port is the store they all connect to, while two nodes may write
        the master's address differently; the static rendezvous' run id is always ``none``,
        the port tells two jobs apart), ``preset`` = every variable torchrun set
        for the worker, ``renumbers`` = True. No host list: torchrun has none.
    :raises TopologyError: a variable is not a number, a rank is out of range, or two of
        torchrun's variables contradict what torchrun guarantees (module docstring); the
        message names the variables, their values and the fix.
    """
    got = {name: _int(environ, name, minimum) for name, minimum in _INTEGERS}
    _check_ranks(environ, got)
    _check_role(environ, got)
    rank, local_rank, world, local_world, group_rank, groups = got.values()
    master, port, agent_store = _master(environ)
    run_id = environ["TORCHELASTIC_RUN_ID"]
    notes = [
        f"node {group_rank} of {groups} (GROUP_RANK, GROUP_WORLD_SIZE), worker {rank} of "
        f"{world} (RANK, WORLD_SIZE); torchrun's variables are kept as they are",
        "GROUP_RANK is torchrun's rendezvous order (--node-rank; with c10d the agents' host "
        "names sorted as strings, dynamic_rendezvous.py), not an outer manager's node order",
    ]
    if agent_store:
        notes.append(f"MASTER_PORT={port} is torchrun's agent store "
                     "(TORCHELASTIC_USE_AGENT_STORE=True): other frameworks get other ports")
    return Report(
        source=line.name,
        # accelerate launch runs torchrun's launch in-process (accelerate utils/launch.py,
        # prepare_multi_gpu_env): name what the user ran
        title=(f"accelerate launch ({line.title})" if environ.get("ACCELERATE_MIXED_PRECISION")
               else line.title),
        node_rank=group_rank,
        num_nodes=groups,
        processes=Processes(rank, local_rank, world, local_world),
        master=master,
        master_port=port,
        job=("torchrun", run_id, str(port)),
        session_id=run_id,
        preset=frozenset(
            [n for n in WORKER_VARIABLES if n in environ]
            + [n for n in environ if n.startswith("TORCHELASTIC_")]),
        renumbers=True,
        inputs={
            "node_rank": ("GROUP_RANK",),
            "num_nodes": ("GROUP_WORLD_SIZE",),
            "processes": _PROCESSES,
            **{fact: (name,) for fact, name in zip(PROCESS_FACTS, _PROCESSES, strict=True)},
            "master": ("MASTER_ADDR",),
            "master_port": ("MASTER_PORT",),
            "ports": ("TORCHELASTIC_RUN_ID", "MASTER_PORT"),
        },
        order="torchrun's rendezvous (GROUP_RANK)",
        notes=tuple(notes),
    )


def _master(environ: Mapping[str, str]) -> tuple[str, int, bool]:
    """``(MASTER_ADDR, MASTER_PORT, whether the port is the agent's store)``, checked."""
    master, port = checked_master(environ, "MASTER_ADDR", "MASTER_PORT", FIX)
    agent_store = environ.get("TORCHELASTIC_USE_AGENT_STORE", "")
    if agent_store not in ("", "True", "False"):
        raise TopologyError(describe(
            "TORCHELASTIC_USE_AGENT_STORE", agent_store,
            f"True or False (str() of a bool: local_elastic_agent.py); {FIX}"))
    return master, port, agent_store == "True"
