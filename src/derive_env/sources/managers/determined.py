"""A container of a Determined trial: line ``determined``, docs/sources/launchers.md; read
from determined-ai/determined@c1e9c6d. The rendezvous file (read in cli/) holds exactly
:data:`KEYS` (``harness/determined/_info.py`` ``RendezvousInfo``), written by the trial's
entrypoint (``master/static/srv/entrypoint.sh``: ``prep_container --rendezvous``) after the
startup hook. Its order (``harness/determined/exec/prep_container.py`` ``do_rendezvous``):
address ``r`` is rank ``r``'s for :data:`RANK_ORDERED`; the agents' lists rank 0 first, then
by resource id (``master/internal/task/rendezvous.go``), ranks by slot count in map order
(``resources_list.go``). Determined's launcher (``harness/determined/launch/
torch_distributed.py`` ``main``) gives torchrun ``--nnodes len(container_addrs)
--nproc_per_node len(DET_SLOT_IDS) --node_rank container_rank --master_addr
container_addrs[0] --master_port $C10D_PORT`` (``master/pkg/tasks/task_trial.go``): so does
this. A task other than a trial (``DET_TASK_TYPE``) is one container.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING

from derive_env.errors import TopologyError, describe, shorten
from derive_env.hosts import check_hosts, repeated_host
from derive_env.sources import DETERMINED_VARIABLE as PATH_VARIABLE
from derive_env.sources.lists import all_ipv4, json_value
from derive_env.sources.report import Report
from derive_env.topology import nodes_of
from derive_env.validation import PER_NODE, at_most, parse_port

if TYPE_CHECKING:
    from derive_env.sources import Source

#: The file's keys (``RendezvousInfo.__init__``).
KEYS = ("container_addrs", "container_rank", "container_slot_counts")
#: ``DET_RESOURCES_TYPE`` values whose rendezvous lists the addresses in rank order.
RANK_ORDERED = ("slurm-job", "k8s-job")
_FIX = ("Determined's trial entrypoint writes it (prep_container --rendezvous) before the "
        "experiment's entrypoint runs; run derive-env in the entrypoint (entrypoint: "
        "derive-env -- python3 train.py), not in startup-hook.sh, which runs before the "
        "rendezvous")


def rendezvous_path(environ: Mapping[str, str]) -> str:
    """``DERIVE_ENV_DETERMINED_RENDEZVOUS`` or ``/run/determined/info/rendezvous.json``."""
    from derive_env.sources import BY_NAME, file_path

    return file_path(BY_NAME["determined"].roles["hosts"][0], environ)


def files_needed(environ: Mapping[str, str], name: str) -> tuple[str, ...]:
    """The rendezvous file, for a trial only (another task type reads none)."""
    return () if _other_task(environ) else (rendezvous_path(environ),)


def _other_task(environ: Mapping[str, str]) -> bool:
    return environ.get("DET_TASK_TYPE", "TRIAL") not in ("", "TRIAL")


def _slot_ids(environ: Mapping[str, str]) -> int:
    """The number of ``DET_SLOT_IDS`` (the agent's ``[0,1]``: a JSON list of device ids)."""
    value = environ["DET_SLOT_IDS"]
    ids = json_value(value)
    if not isinstance(ids, list) or not all(type(i) is int and i >= 0 for i in ids):
        raise TopologyError(describe(
            "DET_SLOT_IDS", value, "a JSON list of this container's slot ids, such as [0,1] "
            "(Determined's agent sets it: agent/internal/containers/spec.go, containerEnv)"))
    return at_most("DET_SLOT_IDS", shorten(value), len(ids), PER_NODE)


def _document(text: str | None, path: str) -> dict[str, object]:
    """The rendezvous file as a dict of exactly :data:`KEYS`, checked."""
    if text is None:
        raise TopologyError(
            f"{path}: expected Determined's rendezvous file (container_addrs, container_rank, "
            "container_slot_counts), readable JSON: it cannot be read, so the trial's "
            f"containers are unknown (another path: {PATH_VARIABLE}); {_FIX}; for a trial "
            "of one container, choose --source none (or DERIVE_ENV_SOURCE=none)")
    document = json_value(text)
    if not isinstance(document, dict) or sorted(document) != sorted(KEYS):
        raise TopologyError(
            f"{path}: expected a JSON object of exactly {', '.join(KEYS)} (Determined's "
            f"RendezvousInfo, harness/determined/_info.py), got {text[:200]!r}; {_FIX}")
    return document


def _checked(document: dict[str, object], path: str) -> tuple[list[str], int, list[int]]:
    """``(container_addrs, container_rank, container_slot_counts)``, each checked."""
    addrs, rank, slots = (document[key] for key in KEYS)
    if not (isinstance(addrs, list) and addrs and set(map(type, addrs)) == {str}):
        raise TopologyError(f"{path}: expected container_addrs, a list of addresses, got "
                            f"{addrs!r}; {_FIX}")
    # IPv4 addresses (what Determined gathers), each octet checked once: benchmarks/iplists.py
    joined = "\n".join(addrs)
    plain = joined.count("\n") == len(addrs) - 1 and all_ipv4(joined)
    bad = None if plain else check_hosts(addrs)
    if bad is not None:
        raise TopologyError(f"{path}: expected an address per container in container_addrs: "
                            f"entry {bad[0]} ({bad[1]!r}): {bad[2]}; {_FIX}")
    twice = repeated_host(addrs)
    if twice is not None:
        raise TopologyError(f"{path}: expected distinct container_addrs: {twice!r} is listed "
                            f"twice; {_FIX}")
    if type(rank) is not int or not 0 <= rank < len(addrs):
        raise TopologyError(f"{path}: expected container_rank, an integer from 0 to "
                            f"{len(addrs) - 1} (one per container_addrs entry), got "
                            f"{json.dumps(rank)[:200]}; {_FIX}")
    if not (isinstance(slots, list) and len(slots) == len(addrs)
            and set(map(type, slots)) == {int} and (least := min(slots)) >= 0):
        raise TopologyError(f"{path}: expected container_slot_counts, one slot count per "
                            f"container_addrs entry ({len(addrs)}), got "
                            f"{json.dumps(slots)[:200]}; {_FIX}")
    if least == 0 and max(slots) > 0:  # min() once: 4,096 entries are scanned once
        # Shared by every container: each stops alike, none starts a job of another size.
        empty, full = slots.index(0), slots.index(max(slots))
        raise TopologyError(
            f"{path}: expected container_slot_counts all 0 (a trial without slots) or all at "
            f"least 1 (Determined splits slots_per_trial among the containers), got "
            f"{json.dumps(slots)[:200]}: entry {empty} ({addrs[empty]}) has 0 while entry "
            f"{full} ({addrs[full]}) has {slots[full]} (every container reads this file and "
            "stops alike): a file of another trial or written by hand? Determined writes it "
            "(prep_container --rendezvous)")
    return addrs, rank, slots


def _port(environ: Mapping[str, str]) -> int | None:
    """``C10D_PORT``, the port the master gave this allocation for torch's rendezvous."""
    value = environ.get("C10D_PORT", "")
    if not value:
        return None
    try:
        return parse_port(value)
    except ValueError as exc:
        raise TopologyError(describe(
            "C10D_PORT", value, f"{exc} (the master gives each trial's allocation one: "
                                "master/pkg/tasks/task_trial.go)")) from None


def read(environ: Mapping[str, str], line: Source,
         files: Mapping[str, str | None] | None = None) -> Report:
    """The launcher's facts (module docstring), the host list when in rank order.
    TopologyError: ``DET_SLOT_IDS`` malformed or not this container's slot count; the file
    unreadable, not :data:`KEYS`, a bad address or rank; a bad ``C10D_PORT``."""
    slot_ids = _slot_ids(environ)
    allocation = environ["DET_ALLOCATION_ID"]
    gpus = {"gpus": ("DET_SLOT_IDS",)} if slot_ids else {}
    if _other_task(environ):
        return Report(
            source=line.name, title=line.title, node_rank=0, num_nodes=1,
            gpus=slot_ids or None, session_id=allocation,
            inputs={"node_rank": ("DET_TASK_TYPE",), "num_nodes": ("DET_TASK_TYPE",), **gpus},
            notes=(f"DET_TASK_TYPE={environ['DET_TASK_TYPE']}: one container (only trials "
                   "rendezvous across containers: ClusterInfo.container_addrs, "
                   "harness/determined/_info.py)",))
    path = rendezvous_path(environ)
    addrs, rank, slots = _checked(_document((files or {}).get(path), path), path)
    if slots[rank] != slot_ids:
        raise TopologyError(describe(
            "DET_SLOT_IDS", environ["DET_SLOT_IDS"],
            f"{slots[rank]} slot id(s), this container's entry (container_rank {rank}) of "
            f"container_slot_counts {slots} in {path}: a file of another allocation?; {_FIX}"))
    port = _port(environ)
    kind = environ.get("DET_RESOURCES_TYPE", "")
    ordered = kind in RANK_ORDERED or len(addrs) <= 2
    inputs: dict[str, tuple[str, ...]] = {
        "node_rank": (path,), "num_nodes": (path,), "master": (path,),
        "ports": ("DET_ALLOCATION_ID", path), **gpus}
    notes = [f"container {rank} of {len(addrs)} (container_rank, container_addrs); master = "
             f"the first of container_addrs; torchrun gets what Determined's launcher gives it "
             f"(--nnodes {len(addrs)} --node_rank {rank}, launch/torch_distributed.py)"]
    if port is not None:
        inputs["master_port"] = ("C10D_PORT",)
    if ordered:
        inputs["nodes"] = (path,)
    else:
        notes.append(
            f"DET_RESOURCES_TYPE={kind or 'unset'}: the agents' rendezvous lists rank 0 first, "
            "then the others by resource id, not by rank (master/internal/task/rendezvous.go): "
            "no host list beyond the master")
    return Report(
        source=line.name, title=line.title, nodes=nodes_of(addrs) if ordered else (),
        node_rank=rank, num_nodes=len(addrs), master=None if ordered else addrs[0],
        master_port=port, gpus=slot_ids or None, session_id=allocation,
        job=("determined", allocation, addrs[0]), inputs=inputs,
        order="container_addrs (node rank r = container rank r)" if ordered else None,
        notes=tuple(notes))
