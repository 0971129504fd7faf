"""Shared fixtures for the unit tests.

The helpers are exposed as fixtures (not imported by name from this file), so that they
work whatever conftest files other folders add and whatever pytest import mode is used.

* ``backendai_env(hosts_order, host, replicas=None, ...)``: the ``BACKENDAI_CLUSTER_*``
  variables of one container, as Backend.AI sets them (HOSTS in the order given).
* ``canonical_order(hosts, replicas=None)``: the node order of contract section 5,
  computed independently of the code under test (the oracle for the tests).
* ``opt_in``: a fresh copy of :data:`OPT_IN`, the minimal label set of an opted-in image.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence

import pytest

#: The label set of an image that opted in for PyTorch, and nothing else.
OPT_IN: dict[str, str] = {"ai.backend.distributed.frameworks": "pytorch"}

_ROLE_INDEX = re.compile(r"(?P<role>[A-Za-z](?:[A-Za-z0-9-]*[A-Za-z-])?)(?P<index>[0-9]+)\Z")

Replicas = str | Mapping[str, int] | Sequence[tuple[str, int]] | None


def split_host(host: str) -> tuple[str, int]:
    """``sub10`` -> ``("sub", 10)``."""
    match = _ROLE_INDEX.match(host)
    if match is None:
        raise ValueError(f"{host!r} is not in Backend.AI's {{role}}{{index}} form")
    return match["role"], int(match["index"])


def _replica_pairs(hosts: Sequence[str], replicas: Replicas) -> list[tuple[str, int]]:
    if replicas is None:
        counts: dict[str, int] = {}
        for host in hosts:
            role, _ = split_host(host)
            counts[role] = counts.get(role, 0) + 1
        return sorted(counts.items())  # Backend.AI sorts REPLICAS by role name
    if isinstance(replicas, str):
        pairs = []
        for part in replicas.split(","):
            role, _, count = part.partition(":")
            pairs.append((role.strip(), int(count)))
        return pairs
    if isinstance(replicas, Mapping):
        return list(replicas.items())
    return list(replicas)


def canonical_order(hosts: Iterable[str], replicas: Replicas = None) -> list[str]:
    """Contract section 5: ``main`` first, then the roles in REPLICAS order, numeric index."""
    hosts = list(hosts)
    roles = [role for role, _ in _replica_pairs(hosts, replicas)]
    roles = ["main"] + [r for r in roles if r != "main"] if "main" in roles else roles
    return sorted(hosts, key=lambda h: (roles.index(split_host(h)[0]), split_host(h)[1]))


def make_backendai_env(
    hosts_order: Sequence[str] | str,
    host: str,
    replicas: Replicas = None,
    *,
    local_rank: bool = True,
    session_id: str = "sess-0123",
) -> dict[str, str]:
    """The Backend.AI variables of container ``host`` in a session of ``hosts_order``.

    :param hosts_order: every host of the session, in the order HOSTS lists them (a list or
        a comma string); Backend.AI does not guarantee any order.
    :param host: this container's host name (must be one of them).
    :param replicas: ``role:count`` pairs (string, mapping or pairs) in the order REPLICAS
        should list them; default: counted from the hosts, sorted by role name.
    :param local_rank: set ``BACKENDAI_CLUSTER_LOCAL_RANK`` (the canonical position).
    """
    hosts = hosts_order.split(",") if isinstance(hosts_order, str) else list(hosts_order)
    if host not in hosts:
        raise ValueError(f"{host!r} is not one of {hosts}")
    pairs = _replica_pairs(hosts, replicas)
    role, index = split_host(host)
    env = {
        "BACKENDAI_CLUSTER_SIZE": str(len(hosts)),
        "BACKENDAI_CLUSTER_HOSTS": ",".join(hosts),
        "BACKENDAI_CLUSTER_HOST": host,
        "BACKENDAI_CLUSTER_ROLE": role,
        "BACKENDAI_CLUSTER_IDX": str(index),
        "BACKENDAI_CLUSTER_REPLICAS": ",".join(f"{r}:{c}" for r, c in pairs),
        "BACKENDAI_SESSION_ID": session_id,
    }
    if local_rank:
        env["BACKENDAI_CLUSTER_LOCAL_RANK"] = str(canonical_order(hosts, pairs).index(host))
    return env


@pytest.fixture(scope="session")
def backendai_env() -> Callable[..., dict[str, str]]:
    """The builder :func:`make_backendai_env` (session-scoped: usable under hypothesis)."""
    return make_backendai_env


@pytest.fixture(scope="session")
def canonical() -> Callable[..., list[str]]:
    """The oracle :func:`canonical_order`."""
    return canonical_order


@pytest.fixture
def opt_in() -> dict[str, str]:
    """A fresh copy of :data:`OPT_IN` (tests may add labels to it)."""
    return dict(OPT_IN)


@pytest.fixture
def fake_exec(monkeypatch: pytest.MonkeyPatch) -> None:
    """Replace the exec with one that raises :class:`helpers.Execed` (argv, env)."""
    from derive_env import launch
    from helpers import Execed

    def fake(argv, env, *, limits_checked=False):
        raise Execed(list(argv), dict(env))

    monkeypatch.setattr(launch, "exec_command", fake)
