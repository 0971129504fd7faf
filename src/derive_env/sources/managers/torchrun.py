"""The torchrun source: a worker torchrun (torchelastic) started; its variables kept as set
(``preset``; docs/sources/torchrun.md). Rules, torch 2.13 (torch/distributed/elastic/):

- agent/server/local_elastic_agent.py ``_start_workers``: the process layer, ``GROUP_RANK``,
  ``GROUP_WORLD_SIZE`` (node rank, nodes), ``MASTER_*`` (the agent's store under
  ``TORCHELASTIC_USE_AGENT_STORE=True``), ``TORCHELASTIC_*``; no host list.
- agent/server/api.py ``_assign_worker_ranks``: agents in ``GROUP_RANK`` order hold blocks
  of ``LOCAL_WORLD_SIZE`` >= 1 ranks, so ``GROUP_RANK + LOCAL_RANK <= RANK < WORLD_SIZE -
  (GROUP_WORLD_SIZE - GROUP_RANK - 1)`` (``LOCAL_RANK`` 0 proves nothing: ``--virtual-local-
  rank``); ``TORCH_ELASTIC_WORKER_IDENTICAL=1``: ``RANK = GROUP_RANK * LOCAL_WORLD_SIZE +
  LOCAL_RANK``, ``WORLD_SIZE = GROUP_WORLD_SIZE * LOCAL_WORLD_SIZE``; one role: ``ROLE_RANK
  == RANK``.
- rendezvous/dynamic_rendezvous.py ``_mark_rendezvous_complete``: c10d sorts agents by host
  name as strings (``node-10`` first, pytorch#137402): ``renumbers``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from derive_env.errors import TopologyError, describe
from derive_env.sources.report import PROCESS_FACTS, Processes, Report
from derive_env.sources.roles import checked_master, numbers
from derive_env.validation import variable_index, variable_int

if TYPE_CHECKING:
    from derive_env.sources import Source

#: What torchrun's agent sets for a worker besides every TORCHELASTIC_* (_start_workers,
#: _set_local_rank_env; OMP_NUM_THREADS by torch/distributed/run.py with several workers).
WORKER_VARIABLES = (
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
    "ROLE_RANK", "ROLE_NAME", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING", "OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES",
)

#: Ends every message: a bad value was changed after torchrun set it.
FIX = ("torchrun sets it for every worker (torch/distributed/elastic/agent/server/"
       "local_elastic_agent.py); something changed it after torchrun started this worker "
       "(a wrapper script, an env file, a value copied from another container): do not set "
       "torchrun's variables yourself")

#: torchrun's integers by role (sources/roles.py), the process layer first.
_ROLES = {"rank": "RANK", "local_rank": "LOCAL_RANK", "world_size": "WORLD_SIZE",
          "local_world_size": "LOCAL_WORLD_SIZE", "node_rank": "GROUP_RANK",
          "num_nodes": "GROUP_WORLD_SIZE", "why": FIX}


def _check_ranks(environ: Mapping[str, str], got: Mapping[str, int]) -> None:
    """The integers ``got`` (by role) against _assign_worker_ranks (module docstring)."""
    rank, local_rank, world, local_world, group_rank, groups = (
        got[role] for role in (*PROCESS_FACTS, "node_rank", "num_nodes"))
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
    rank, world, local_world = got["rank"], got["world_size"], got["local_world_size"]
    if not (environ.get("ROLE_RANK") or environ.get("ROLE_WORLD_SIZE")):
        return
    for name, other in (("ROLE_RANK", "ROLE_WORLD_SIZE"), ("ROLE_WORLD_SIZE", "ROLE_RANK")):
        if not environ.get(name):
            raise TopologyError(describe(
                name, environ.get(name, ""),
                f"set with {other}={environ[other]!r} (torchrun sets both); {FIX}"))
    role_world = variable_int(environ, "ROLE_WORLD_SIZE", 1, f"; {FIX}")
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
    """The process layer, node rank and count (``GROUP_*``), the master, ``job`` =
    ``("torchrun", TORCHELASTIC_RUN_ID, MASTER_PORT)`` (the static run id is always ``none``:
    the store's port tells jobs apart), ``preset``, ``renumbers``; no host list.

    :raises TopologyError: what the module docstring's rules refuse, naming the variables.
    """
    # GROUP_WORLD_SIZE has no bound: no node list is built from it (no host list).
    got = numbers(environ, _ROLES, fix_ends=True, counted=False)
    _check_ranks(environ, got)
    _check_role(environ, got)
    rank, local_rank, world, local_world = (got[role] for role in PROCESS_FACTS)
    group_rank, groups = got["node_rank"], got["num_nodes"]
    master, port = checked_master(environ, "MASTER_ADDR", "MASTER_PORT", FIX)
    agent_store = environ.get("TORCHELASTIC_USE_AGENT_STORE", "")
    if agent_store not in ("", "True", "False"):
        raise TopologyError(describe(
            "TORCHELASTIC_USE_AGENT_STORE", agent_store,
            f"True or False (str() of a bool: local_elastic_agent.py); {FIX}"))
    run_id = environ["TORCHELASTIC_RUN_ID"]
    notes = [
        f"node {group_rank} of {groups} (GROUP_RANK, GROUP_WORLD_SIZE), worker {rank} of "
        f"{world} (RANK, WORLD_SIZE); torchrun's variables are kept as they are",
        "GROUP_RANK is torchrun's rendezvous order (--node-rank; with c10d the agents' host "
        "names sorted as strings, dynamic_rendezvous.py), not an outer manager's node order",
    ]
    if agent_store == "True":
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
            "processes": tuple(_ROLES[fact] for fact in PROCESS_FACTS),
            **{fact: (_ROLES[fact],) for fact in PROCESS_FACTS},
            "master": ("MASTER_ADDR",),
            "master_port": ("MASTER_PORT",),
            "ports": ("TORCHELASTIC_RUN_ID", "MASTER_PORT"),
        },
        order="torchrun's rendezvous (GROUP_RANK)",
        notes=tuple(notes),
    )

