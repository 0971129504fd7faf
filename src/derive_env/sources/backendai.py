"""Backend.AI: ``BACKENDAI_CLUSTER_*`` variables -> :class:`ClusterTopology`.

Rules (contract section 5; Backend.AI sets these per container in
``ai/backend/agent/docker/agent.py`` and computes ``LOCAL_RANK`` in the manager's
session scheduler):

* Canonical node order, identical in every container whatever order
  ``BACKENDAI_CLUSTER_HOSTS`` has: role ``main`` first, then the other roles in
  ``BACKENDAI_CLUSTER_REPLICAS`` order (sorted by role name when REPLICAS is absent), each
  role by NUMERIC index (``sub2`` before ``sub10``). Host names are ``{role}{index}``.
* Node rank = ``BACKENDAI_CLUSTER_LOCAL_RANK``, which must equal the own host's position
  in that order (else the containers would disagree); without it, the own position.
* Master = node rank 0, never "the first entry of HOSTS" (that list comes from a database
  query and is not ordered: ``sub1,main1`` happens).

Empty variables count as unset, as in torch's ``env://`` rendezvous.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from derive_env.errors import TopologyError, describe, shorten
from derive_env.topology import ClusterTopology, Node, host_problem
from derive_env.validation import first_error, parse_int, parse_port

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
MASTER_PORT = "BACKENDAI_DIST_MASTER_PORT"

_CLUSTER_PREFIX = "BACKENDAI_CLUSTER_"
_NAMES = (SIZE, HOSTS, HOST, ROLE, IDX, LOCAL_RANK, REPLICAS, SESSION_ID, GPU_COUNT, N_GPUS,
          MASTER_PORT)
#: ``{role}{index}``: the role never ends in a digit, the index is the trailing digits.
_ROLE_INDEX = re.compile(r"(?P<role>[A-Za-z](?:[A-Za-z0-9-]*[A-Za-z-])?)(?P<index>[0-9]+)\Z")
_ROLE = re.compile(r"[A-Za-z](?:[A-Za-z0-9-]*[A-Za-z-])?\Z")


def detect(environ: Mapping[str, str]) -> bool:
    """True when any variable this source reads is set (non-empty).

    GPU_COUNT / N_GPUS and BACKENDAI_DIST_MASTER_PORT count too: a container with them but
    no ``BACKENDAI_CLUSTER_*`` is a single-container session that still has them.
    """
    return any(environ.get(name) for name in _NAMES) or any(
        k.startswith(_CLUSTER_PREFIX) and v for k, v in environ.items()
    )


def _split_hosts(value: object) -> tuple[str, ...]:
    if not isinstance(value, str):
        raise ValueError("a comma-separated list of host names")
    entries = tuple(part.strip() for part in value.split(","))
    for position, entry in enumerate(entries, start=1):
        if not entry:
            raise ValueError(f"no empty entries (entry {position} is empty)")
        if len(entry) <= 63 and _ROLE_INDEX.match(entry):
            continue  # main1, sub12: a valid host name (one regex instead of host_problem)
        problem = host_problem(entry)
        if problem:
            raise ValueError(f"every entry to be {problem} ({shorten(entry, 80)!r} is not)")
    if len({entry.lower() for entry in entries}) != len(entries):
        seen: set[str] = set()
        for entry in entries:
            if entry.lower() in seen:
                raise ValueError(
                    f"no duplicate entries ({shorten(entry, 80)!r} appears more than once)"
                )
            seen.add(entry.lower())
    return entries


def _parse_replicas(value: object) -> tuple[tuple[str, int], ...]:
    expected = "comma-separated role:count pairs such as main:1,sub:3"
    if not isinstance(value, str):
        raise ValueError(expected)
    pairs: list[tuple[str, int]] = []
    for part in value.split(","):
        role, sep, count = part.strip().partition(":")
        role, count = role.strip(), count.strip()
        if not sep or not _ROLE.match(role):
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
    if not isinstance(value, str) or not _ROLE.match(value):
        raise ValueError("a role name such as main or sub")
    return value


def _int(minimum: int) -> BeforeValidator:
    return BeforeValidator(lambda v: parse_int(v, minimum=minimum))


class BackendAIVariables(BaseModel):
    """The Backend.AI variables of one container, each parsed on its own.

    Built with ``model_validate(environ)``; fields are keyed by the variable names, unset
    (or empty) variables are ``None``. Cross-variable rules live in :func:`topology`.
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    size: Annotated[int | None, _int(1)] = Field(None, alias=SIZE)
    hosts: Annotated[tuple[str, ...] | None, BeforeValidator(_split_hosts)] = Field(
        None, alias=HOSTS
    )
    host: Annotated[str | None, BeforeValidator(_parse_host)] = Field(None, alias=HOST)
    role: Annotated[str | None, BeforeValidator(_parse_role)] = Field(None, alias=ROLE)
    idx: Annotated[int | None, _int(1)] = Field(None, alias=IDX)
    local_rank: Annotated[int | None, _int(0)] = Field(None, alias=LOCAL_RANK)
    replicas: Annotated[tuple[tuple[str, int], ...] | None, BeforeValidator(_parse_replicas)] = (
        Field(None, alias=REPLICAS)
    )
    session_id: str | None = Field(None, alias=SESSION_ID)
    gpu_count: Annotated[int | None, _int(0)] = Field(None, alias=GPU_COUNT)
    n_gpus: Annotated[int | None, _int(0)] = Field(None, alias=N_GPUS)
    master_port: Annotated[int | None, BeforeValidator(parse_port)] = Field(
        None, alias=MASTER_PORT
    )


def _role_index(entry: str) -> tuple[str, int] | None:
    match = _ROLE_INDEX.match(entry)
    return (match["role"], int(match["index"])) if match else None


def _role_order(variables: BackendAIVariables, roles: set[str]) -> list[str]:
    """``main`` first, then REPLICAS order (or, without REPLICAS, role names sorted)."""
    listed = [r for r, _ in variables.replicas] if variables.replicas else sorted(roles)
    return sorted(listed, key=lambda r: r != "main")  # stable: keeps REPLICAS order after main


def _canonical_nodes(variables: BackendAIVariables, raw_hosts: str) -> tuple[Node, ...]:
    hosts = variables.hosts or ()
    parsed: list[tuple[str, str, int]] = []
    match = _ROLE_INDEX.match  # inlined: this loop runs once per node of the session
    for entry in hosts:
        found = match(entry)
        if found is None:
            raise TopologyError(describe(
                HOSTS, raw_hosts,
                "every entry in Backend.AI's {role}{index} form (main1, sub2) so that every "
                f"container computes the same node order; {entry!r} is not",
            ))
        index = int(found["index"])
        if index < 1:
            raise TopologyError(describe(
                HOSTS, raw_hosts,
                f"indices from 1 (Backend.AI numbers each role's hosts from 1); {entry!r} has "
                f"{index}",
            ))
        parsed.append((entry, found["role"], index))
    if len({(role, index) for _, role, index in parsed}) != len(parsed):
        seen: dict[tuple[str, int], str] = {}
        for entry, role, index in parsed:
            if (role, index) in seen:
                raise TopologyError(describe(
                    HOSTS, raw_hosts,
                    f"one host per role and index; {seen[(role, index)]!r} and {entry!r} are "
                    f"both {role} #{index}",
                ))
            seen[(role, index)] = entry
    roles = {role for _, role, _ in parsed}
    if variables.replicas is not None:
        counts = dict(variables.replicas)
        for role in sorted(roles - counts.keys()):
            raise TopologyError(describe(
                REPLICAS, ",".join(f"{r}:{c}" for r, c in variables.replicas),
                f"every role of {HOSTS} listed; role {role!r} is missing",
            ))
        per_role = Counter(role for _, role, _ in parsed)
        for role, count in variables.replicas:
            have = per_role[role]
            if have != count:
                raise TopologyError(describe(
                    REPLICAS, ",".join(f"{r}:{c}" for r, c in variables.replicas),
                    f"role counts matching {HOSTS}: REPLICAS says {count} {role!r} host(s), "
                    f"{HOSTS} ({raw_hosts}) has {have}",
                ))
    position = {role: i for i, role in enumerate(_role_order(variables, roles))}
    ordered = sorted([(position[role], index, entry, role) for entry, role, index in parsed])
    return tuple(Node(entry, role, index) for _, index, entry, role in ordered)


def topology(environ: Mapping[str, str]) -> ClusterTopology:
    """Build the topology of this container from its Backend.AI variables.

    :param environ: the container's environment (only the variables above are read).
    :returns: the validated topology; a single-container session when
        ``BACKENDAI_CLUSTER_SIZE`` is 1.
    :raises TopologyError: a variable is malformed, a required one is missing, or they
        contradict each other (HOSTS count vs SIZE, REPLICAS sums, the own host's position
        vs LOCAL_RANK, ROLE/IDX vs HOST, GPU_COUNT vs N_GPUS). The message names the
        variable and its value.
    """
    present = {name: environ[name] for name in _NAMES if environ.get(name)}
    try:
        v = BackendAIVariables.model_validate(present)
    except ValidationError as exc:
        raise TopologyError(first_error(exc)) from None

    cluster_given = sorted(
        k for k, value in environ.items() if k.startswith(_CLUSTER_PREFIX) and value
    )
    if v.size is None and cluster_given:
        raise TopologyError(describe(
            SIZE, environ.get(SIZE, ""),
            f"the number of containers of the session (an integer >= 1), since "
            f"{', '.join(cluster_given)} {'is' if len(cluster_given) == 1 else 'are'} set",
        ))
    gpus = _gpu_count(v, present)
    inputs: dict[str, tuple[str, ...]] = {}
    if gpus is not None:
        inputs["gpus"] = tuple(n for n in (GPU_COUNT, N_GPUS) if n in present)
    if v.master_port is not None:
        inputs["master_port"] = (MASTER_PORT,)

    if v.hosts is None and v.size is not None and v.size > 1:
        raise TopologyError(describe(
            HOSTS, "", f"the {v.size} host names of the session ({SIZE}={v.size})"
        ))
    if v.replicas is not None and sum(c for _, c in v.replicas) != v.size:
        raise TopologyError(describe(
            REPLICAS, present[REPLICAS],
            f"counts adding up to {SIZE}={v.size}; they add up to "
            f"{sum(c for _, c in v.replicas)}",
        ))
    raw_hosts = present.get(HOSTS, "")
    if v.hosts is not None:
        if len(v.hosts) != v.size:
            raise TopologyError(describe(
                HOSTS, raw_hosts,
                f"exactly {v.size} entries ({SIZE}={v.size}), got {len(v.hosts)}",
            ))
        if v.host is None and len(v.hosts) > 1:
            raise TopologyError(describe(
                HOST, "", f"this container's host name, one of {HOSTS} ({raw_hosts})"
            ))
        own = v.host or v.hosts[0]
        if own.lower() not in {h.lower() for h in v.hosts}:
            raise TopologyError(describe(HOST, own, f"one of {HOSTS} ({raw_hosts})"))
    else:
        own = v.host or "localhost"

    if v.hosts is None or len(v.hosts) == 1:
        # One container: no order to agree on, so any host name will do.
        role_index = _role_index(own)
        role, index = role_index if role_index and role_index[1] >= 1 else (None, None)
        nodes: tuple[Node, ...] = (Node(host=own, role=role, index=index),)
        position = 0
    else:
        nodes = _canonical_nodes(v, raw_hosts)
        position = [n.host.lower() for n in nodes].index(own.lower())
    me = nodes[position]
    if v.role is not None and me.role is not None and v.role != me.role:
        raise TopologyError(describe(
            ROLE, v.role, f"{me.role!r}, the role in {HOST}={own}"
        ))
    if v.idx is not None and me.index is not None and v.idx != me.index:
        raise TopologyError(describe(IDX, str(v.idx), f"{me.index}, the index in {HOST}={own}"))
    rank_inputs = f"position of {HOST}={own} in the canonical order"
    if v.local_rank is not None:
        if v.local_rank != position:
            shown = ", ".join(n.host for n in nodes[:8]) + (", ..." if len(nodes) > 8 else "")
            raise TopologyError(describe(
                LOCAL_RANK, present[LOCAL_RANK],
                f"{position}, the position of {HOST}={own} in the canonical node order "
                f"({shown}); the containers of this session would disagree on node ranks",
            ))
        rank_inputs = f"{LOCAL_RANK}, equal to the {rank_inputs}"
    if len(nodes) == 1:
        if cluster_given:  # the cluster manager stated it: one node
            inputs["nodes"] = (SIZE,) + ((HOSTS,) if v.hosts else ())
        return ClusterTopology(
            source="backendai", nodes=nodes, node_rank=0, gpus_per_node=gpus,
            master_port=v.master_port, session_id=v.session_id, inputs=inputs,
        )
    inputs["nodes"] = (HOSTS,) + ((REPLICAS,) if v.replicas else ())
    inputs["node_rank"] = (rank_inputs,)
    return ClusterTopology(
        source="backendai", nodes=nodes, node_rank=position, gpus_per_node=gpus,
        master_port=v.master_port, session_id=v.session_id, inputs=inputs,
    )


def _gpu_count(v: BackendAIVariables, present: Mapping[str, str]) -> int | None:
    if v.gpu_count is not None and v.n_gpus is not None and v.gpu_count != v.n_gpus:
        raise TopologyError(describe(
            N_GPUS, present[N_GPUS], f"the same count as {GPU_COUNT}={present[GPU_COUNT]}"
        ))
    return v.gpu_count if v.gpu_count is not None else v.n_gpus
