"""Backend.AI: ``BACKENDAI_CLUSTER_*`` -> one container's node layer (docs/behaviour.md section
5, docs/backendai.md). From lablup/backend.ai: the launcher
(``src/ai/backend/manager/sokovan/scheduler/launcher/launcher.py``) sets SIZE, REPLICAS (sorted
by role), HOSTS and per container ROLE, IDX, LOCAL_RANK, HOST. Names are ``f"{role}{idx}"``,
roles up to 16 characters (``models/kernel/row.py``) that may end in digits: rebuilt from
REPLICAS, never split (``sokovan/scheduling_controller/preparers/resources/
expand_kernel_groups_rule.py``, which also numbers LOCAL_RANK in the request's group order: a
container cannot see it, so it is checked, never the node rank). HOSTS comes in any order
(``repositories/scheduler/db_source/db_source.py``): node rank = the own HOST's place in
backendai_order.py's canonical order, the master node 0. ``BACKENDAI_DIST_MASTER_PORT``: a
user's session variable (Backend.AI PR #10726). Empty variables count as unset (torch's
``env://``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from derive_env.errors import TopologyError, describe, listing, shorten
from derive_env.hosts import ROLE_INDEX, ROLE_NAME, check_hosts, host_problem, repeated_host
from derive_env.sources.report import Report
from derive_env.topology import Node
from derive_env.validation import first_error, parse_int, parse_per_node, parse_port

if TYPE_CHECKING:
    from derive_env.sources import Source

SIZE = "BACKENDAI_CLUSTER_SIZE"
HOSTS = "BACKENDAI_CLUSTER_HOSTS"
HOST = "BACKENDAI_CLUSTER_HOST"
ROLE = "BACKENDAI_CLUSTER_ROLE"
IDX = "BACKENDAI_CLUSTER_IDX"
LOCAL_RANK = "BACKENDAI_CLUSTER_LOCAL_RANK"
REPLICAS = "BACKENDAI_CLUSTER_REPLICAS"
SESSION_ID = "BACKENDAI_SESSION_ID"
GPU_COUNT = "GPU_COUNT"
N_GPUS = "N_GPUS"
#: Not a Backend.AI variable: a session variable a user may set (see the module docstring).
MASTER_PORT = "BACKENDAI_DIST_MASTER_PORT"
#: Backend.AI's default role (``DEFAULT_ROLE``), the one its default session starts with.
MAIN = "main"

_ROLE_EXPECTED = (
    "a role name such as main or sub (letters, digits and '-', with a letter, not starting "
    "with '-')"
)


def _split_hosts(value: object) -> tuple[str, ...]:
    if not isinstance(value, str):
        raise ValueError("a comma-separated list of host names")
    entries = tuple(map(str.strip, value.split(",")))
    bad = check_hosts(entries)
    if bad is not None:
        position, entry, problem = bad
        if not entry:
            raise ValueError(f"no empty entries (entry {position} is empty)")
        raise ValueError(f"every entry to be {problem} ({shorten(entry, 80)!r} is not)")
    twice = repeated_host(entries)
    if twice is not None:
        raise ValueError(f"no duplicate entries ({shorten(twice, 80)!r} appears more than once)")
    return entries


def _parse_replicas(value: object) -> tuple[tuple[str, int], ...]:
    expected = "comma-separated role:count pairs such as main:1,sub:3"
    if not isinstance(value, str):
        raise ValueError(expected)
    pairs: list[tuple[str, int]] = []
    for part in value.split(","):
        # rsplit, as Backend.AI's kernel runner parses it (src/ai/backend/kernel/intrinsic.py)
        role, sep, count = part.strip().rpartition(":")
        role, count = role.strip(), count.strip()
        if not sep or not ROLE_NAME.match(role):
            raise ValueError(expected)
        pairs.append((role, parse_int(count, minimum=0, what=expected)))
    roles = [role for role, _ in pairs]
    if len(set(roles)) != len(roles):
        raise ValueError(expected + ", each role once")
    return tuple(pairs)


def _parse_host(value: object) -> str:
    problem = host_problem(value) if isinstance(value, str) else "a host name"
    if problem:
        raise ValueError(problem)
    return str(value).strip()


def _parse_role(value: object) -> str:
    if not isinstance(value, str) or not ROLE_NAME.match(value):
        raise ValueError(_ROLE_EXPECTED)
    return value


#: A count variable: an integer >= 0, or >= 1 (:mod:`derive_env.validation`); a GPU count <= 1024.
_COUNT, _POSITIVE, _GPUS = (BeforeValidator(partial(f, minimum=m)) for f, m in (
    (parse_int, 0), (parse_int, 1), (parse_per_node, 0)))


class BackendAIVariables(BaseModel):
    """One container's Backend.AI variables, each parsed on its own (unset: ``None``)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    size: Annotated[int | None, _POSITIVE] = Field(None, alias=SIZE)
    hosts: Annotated[tuple[str, ...] | None, BeforeValidator(_split_hosts)] = Field(
        None, alias=HOSTS
    )
    host: Annotated[str | None, BeforeValidator(_parse_host)] = Field(None, alias=HOST)
    role: Annotated[str | None, BeforeValidator(_parse_role)] = Field(None, alias=ROLE)
    idx: Annotated[int | None, _POSITIVE] = Field(None, alias=IDX)
    local_rank: Annotated[int | None, _COUNT] = Field(None, alias=LOCAL_RANK)
    replicas: Annotated[tuple[tuple[str, int], ...] | None, BeforeValidator(_parse_replicas)] = (
        Field(None, alias=REPLICAS)
    )
    session_id: str | None = Field(None, alias=SESSION_ID)
    gpu_count: Annotated[int | None, _GPUS] = Field(None, alias=GPU_COUNT)
    n_gpus: Annotated[int | None, _GPUS] = Field(None, alias=N_GPUS)
    master_port: Annotated[int | None, BeforeValidator(parse_port)] = Field(None, alias=MASTER_PORT)


def possible_local_ranks(own_index: int, other_counts: Sequence[int], size: int) -> list[int]:
    """Every LOCAL_RANK some order of the role groups gives a container, ascending: ``offset +
    own_index - 1`` (expand_kernel_groups_rule.py), the offset the sum of any subset of
    ``other_counts``, below ``size`` (a bit set of ``size`` bits, one shift per role)."""
    mask = (1 << size) - 1
    offsets = 1  # bit o set: offset o is the sum of some subset
    for count in other_counts:
        offsets |= (offsets << count) & mask
    base = own_index - 1
    return [o + base for o in range(size) if offsets >> o & 1 and o + base < size]


def _check_role_idx(variables: BackendAIVariables, me: Node, own: str, exact: bool) -> None:
    """ROLE and IDX describe the own HOST: its role and index when ``exact`` (rebuilt from
    REPLICAS), else ``HOST == ROLE + IDX`` is enough; TopologyError naming ROLE or IDX."""
    role, idx = variables.role, variables.idx
    if not exact and role is not None and idx is not None and (
        f"{role}{idx}".lower() == own.lower()
    ):
        return  # a role ending in digits (a100 + 1 = a1001) that the name alone cannot tell
    if role is not None and me.role is not None and role.lower() != me.role.lower():
        raise TopologyError(describe(ROLE, role, f"{me.role!r}, the role in {HOST}={own}"))
    if idx is not None and me.index is not None and idx != me.index:
        raise TopologyError(describe(IDX, str(idx), f"{me.index}, the index in {HOST}={own}"))


def _single_node(variables: BackendAIVariables, own: str) -> Node:
    """The one node of a single-container session: no order to agree on, any name will do."""
    if variables.replicas:
        for role, count in variables.replicas:
            if count and f"{role}1".lower() == own.lower():
                return Node(host=own, role=role, index=1)
    role, idx = variables.role, variables.idx
    if role is not None and idx is not None and f"{role}{idx}".lower() == own.lower():
        return Node(host=own, role=role, index=idx)
    found = re.match(ROLE_INDEX, own)
    if found and int(found["index"]) >= 1:
        return Node(host=own, role=found["role"], index=int(found["index"]))
    return Node(host=own)


def _validated(environ: Mapping[str, str],
               names: Sequence[str]) -> tuple[dict[str, str], BackendAIVariables]:
    """The set variables of ``names`` (the line's) and their model; TopologyError on the
    first malformed one, naming this container when it is its own (docs/behaviour.md section 7)."""
    present = {name: environ[name] for name in names if environ.get(name)}
    try:
        return present, BackendAIVariables.model_validate(present)
    except ValidationError as exc:
        message = first_error(exc)
        if message.partition("=")[0] in _PER_CONTAINER:
            message += _only_here(environ)
        raise TopologyError(message) from None


def _own_host(variables: BackendAIVariables, present: Mapping[str, str]) -> str:
    """This container's host name, after checking SIZE, HOSTS and REPLICAS against each
    other (docs/behaviour.md section 5, "Validation"); ``localhost`` without HOSTS and HOST."""
    size, hosts = variables.size, variables.hosts
    if hosts is None and size is not None and size > 1:
        raise TopologyError(describe(
            HOSTS, "", f"the {size} host names of the session ({SIZE}={size})"
        ))
    if variables.replicas is not None and sum(c for _, c in variables.replicas) != size:
        raise TopologyError(describe(
            REPLICAS, present[REPLICAS],
            f"counts adding up to {SIZE}={size}; they add up to "
            f"{sum(c for _, c in variables.replicas)}",
        ))
    if hosts is None:
        return variables.host or "localhost"
    raw_hosts = present[HOSTS]
    if len(hosts) != size:
        raise TopologyError(describe(
            HOSTS, raw_hosts, f"exactly {size} entries ({SIZE}={size}), got {len(hosts)}",
        ))
    if variables.host is None and len(hosts) > 1:
        raise TopologyError(describe(
            HOST, "", f"this container's host name, one of {HOSTS} ({raw_hosts})"
        ))
    own = variables.host or hosts[0]
    if own not in hosts and own.lower() not in {h.lower() for h in hosts}:
        raise TopologyError(describe(HOST, own, f"one of {HOSTS} ({raw_hosts})"))
    return own


def _ordered(
    variables: BackendAIVariables, present: Mapping[str, str], own: str,
) -> tuple[tuple[Node, ...], int, tuple[tuple[str, int], ...] | None, str | None]:
    """``(nodes in canonical order, this container's place, role counts, the order's rule)``;
    the counts ``None`` when HOSTS' names fit more than one numbering (no REPLICAS)."""
    hosts = variables.hosts
    if hosts is None or len(hosts) == 1:
        return (_single_node(variables, own),), 0, (), None
    from derive_env.sources.managers import backendai_order as canonical  # several nodes only

    if variables.replicas is not None:
        nodes = canonical.nodes_from_replicas(
            variables.replicas, hosts, present[HOSTS], present[REPLICAS])
        counts, order = variables.replicas, canonical.ORDER_FROM_REPLICAS
    else:
        nodes, known = canonical.nodes_from_host_names(hosts, present[HOSTS])
        counts = canonical.role_counts(nodes) if known else None
        order = canonical.ORDER_FROM_HOSTS
    hosts_in_order = [n.host for n in nodes]
    if own in hosts_in_order:  # as HOSTS spells it (C-speed scan), else case-folded
        return nodes, hosts_in_order.index(own), counts, order
    return nodes, [h.lower() for h in hosts_in_order].index(own.lower()), counts, order


def _local_rank(
    variables: BackendAIVariables, present: Mapping[str, str],
    ordered: tuple[tuple[Node, ...], int, tuple[tuple[str, int], ...] | None, str | None],
) -> tuple[str, ...]:
    """LOCAL_RANK, when set, checked against what Backend.AI can give this container; notes
    when it differs from the node rank (docs/behaviour.md section 5). TopologyError naming
    LOCAL_RANK when no order of the role groups gives it."""
    nodes, node_rank, counts, _ = ordered
    local_rank = variables.local_rank
    if local_rank is None or local_rank == node_rank:
        return ()
    me = nodes[node_rank]
    own_index, groups = me.index or 1, counts
    if len(nodes) == 1:
        own_index, groups = 1, ()
    size = variables.size or 1
    if groups is None:  # unknown: only the range 0..size-1 is checked
        possible = list(range(size))
        why = f"a position among the {size} containers of the session"
    else:
        others = [(r, c) for r, c in groups if r != me.role]
        possible = possible_local_ranks(own_index, [c for _, c in others], size)
        why = (f"Backend.AI gives its index - 1 plus the summed counts of the role groups the "
               f"session's request listed before its role, in any order (other groups: "
               f"{', '.join(f'{r}:{c}' for r, c in others) or 'none'})")
    if local_rank not in possible:
        raise TopologyError(describe(
            LOCAL_RANK, present[LOCAL_RANK],
            f"{'one of ' if len(possible) > 1 else ''}{listing(possible)} for container "
            f"{me.host} (role {me.role!r}, index {own_index}): {why}"))
    return (
        f"node rank {node_rank}: the position of {me.host} in the canonical order above",
        f"{LOCAL_RANK}={local_rank}: its position in the order the session's request listed "
        "the role groups, which a container cannot see (not used as the node rank)")


def read(environ: Mapping[str, str], line: Source,
         files: Mapping[str, str | None] | None = None) -> Report:
    """The node layer in canonical order when the session states its nodes, else
    ``GPU_COUNT`` and ``BACKENDAI_DIST_MASTER_PORT`` alone; no process layer.

    :raises TopologyError: a malformed or missing variable, or two that contradict each other
        (HOSTS vs SIZE, REPLICAS, names, ROLE/IDX vs HOST, LOCAL_RANK, GPU_COUNT vs N_GPUS,
        several containers on Kubernetes), naming the variable and its value.
    """
    present, variables = _validated(environ, line.detect)
    cluster_given = sorted(
        k for k, value in environ.items() if k.startswith(line.prefix) and value
    )
    if variables.size is None and cluster_given:
        raise TopologyError(describe(
            SIZE, environ.get(SIZE, ""),
            f"the number of containers of the session (an integer >= 1), since "
            f"{', '.join(cluster_given)} {'is' if len(cluster_given) == 1 else 'are'} set",
        ))
    gpus = _gpu_count(variables, present)
    own = _own_host(variables, present)
    ordered = _ordered(variables, present, own)
    nodes, position, _, order = ordered
    _check_role_idx(variables, nodes[position], own, exact=variables.replicas is not None)
    notes = _local_rank(variables, present, ordered)
    inputs: dict[str, tuple[str, ...]] = {}
    if gpus is not None:
        inputs["gpus"] = tuple(n for n in (GPU_COUNT, N_GPUS) if n in present)
    if variables.master_port is not None:
        inputs["master_port"] = (MASTER_PORT,)
    if len(nodes) > 1:
        if environ.get(KUBERNETES):
            hosts = [n.host for n in nodes]
            raise TopologyError(_ON_KUBERNETES.format(size=len(hosts), hosts=listing(hosts, 3)))
        inputs["nodes"] = (HOSTS,) + ((REPLICAS,) if variables.replicas else ())
        inputs["node_rank"] = (f"position of {HOST}={own} in the canonical order",)
    elif cluster_given:  # the cluster manager stated it: one node
        inputs["nodes"] = (SIZE,) + ((HOSTS,) if variables.hosts else ())
    stated = "nodes" in inputs
    return Report(
        source="backendai", title=line.title, nodes=nodes if stated else (),
        node_rank=position if stated else None, gpus=gpus, master_port=variables.master_port,
        session_id=variables.session_id, inputs=inputs, order=order, notes=notes,
    )


#: Set by the kubelet: Backend.AI's Kubernetes agent backend, no session network
#: (``apply_network`` does nothing, agent/kubernetes/agent.py).
KUBERNETES = "KUBERNETES_SERVICE_HOST"
_ON_KUBERNETES = (
    "BACKENDAI_CLUSTER_SIZE={size} with KUBERNETES_SERVICE_HOST set: a session of {size} "
    "containers on Backend.AI's Kubernetes agent backend, which gives its pods no session "
    "network, so no pod answers to the names {hosts} and the nodes cannot reach each "
    "other; run multi-container sessions on Backend.AI's Docker agents (docs/backendai.md, "
    "\"The Kubernetes agent backend\")")

#: Variables Backend.AI sets per container: a bad one stops this container alone.
_PER_CONTAINER = frozenset({HOST, ROLE, IDX, LOCAL_RANK, GPU_COUNT, N_GPUS})


def _only_here(environ: Mapping[str, str]) -> str:
    """The end of a message about a per-container value (docs/behaviour.md section 7)."""
    host = environ.get(HOST, "").strip()
    shown = f"container {shorten(host, 80)}" if host else "this container"
    return (f" (set for {shown} only: it stops alone while the other containers of the "
            "session may start and wait for it)")


def _gpu_count(variables: BackendAIVariables, present: Mapping[str, str]) -> int | None:
    """GPU_COUNT, else N_GPUS (Backend.AI sets both to one count); ``None`` without them."""
    gpu_count, n_gpus = variables.gpu_count, variables.n_gpus
    if gpu_count is not None and n_gpus is not None and gpu_count != n_gpus:
        raise TopologyError(describe(
            N_GPUS, present[N_GPUS], f"the same count as {GPU_COUNT}={present[GPU_COUNT]}"
        ) + _only_here(present))
    return gpu_count if gpu_count is not None else n_gpus
