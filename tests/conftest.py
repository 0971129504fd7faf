"""Shared fixtures for the unit tests.

The helpers are exposed as fixtures (not imported by name from this file), so that they
work whatever conftest files other folders add and whatever pytest import mode is used.

* ``backendai_env(hosts_order, host, replicas=None, ..., group_order=None)``: the
  ``BACKENDAI_CLUSTER_*`` variables of one container, as Backend.AI sets them (HOSTS in the
  order given, LOCAL_RANK following the request's role group order).
* ``canonical_order(hosts, replicas=None)``: the node order of contract section 5,
  computed independently of the code under test (the oracle for the tests).
* ``opt_in``: a fresh copy of :data:`OPT_IN`, the minimal label set of an opted-in image.
* ``isolated``: the command prefix that runs a program with an empty ``/opt`` (private
  mount namespace; ``FALLBACK=PATH`` becomes ``/opt/derive-env/bin/derive-env``), for the
  tests of docker/bootstrap.sh and docker/on-every-node.sh.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterable, Mapping, Sequence

import pytest

from helpers import require

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


def _role_of(host: str, pairs: Sequence[tuple[str, int]]) -> tuple[str, int]:
    """The (role, index) whose ``f"{role}{index}"`` is ``host`` (case-insensitively), found
    from the REPLICAS pairs as Backend.AI builds the names (a role may end in digits)."""
    found = [(role, i) for role, count in pairs for i in range(1, count + 1)
             if f"{role}{i}".lower() == host.lower()]
    if len(found) != 1:
        raise ValueError(f"{host!r} is not exactly one host name of {pairs}")
    return found[0]


def canonical_order(hosts: Iterable[str], replicas: Replicas = None) -> list[str]:
    """Contract section 5: ``main`` first, then the roles in REPLICAS order, each role's
    hosts ``{role}1..{role}{count}`` (names as ``hosts`` spells them)."""
    hosts = list(hosts)
    pairs = _replica_pairs(hosts, replicas)
    roles = [role for role, _ in pairs]
    roles = ["main"] + [r for r in roles if r != "main"] if "main" in roles else roles

    def key(host: str) -> tuple[int, int]:
        role, index = _role_of(host, pairs)
        return roles.index(role), index

    return sorted(hosts, key=key)


def backendai_local_rank(host: str, pairs: Sequence[tuple[str, int]],
                         group_order: Sequence[str]) -> int:
    """``BACKENDAI_CLUSTER_LOCAL_RANK`` of ``host`` as Backend.AI computes it: the position
    over the role groups in the order the session's request listed them (``group_order``),
    then by index (expand_kernel_groups_rule.py)."""
    counts = dict(pairs)
    role, index = _role_of(host, pairs)
    return sum(counts[r] for r in group_order[:list(group_order).index(role)]) + index - 1


def make_backendai_env(
    hosts_order: Sequence[str] | str,
    host: str,
    replicas: Replicas = None,
    *,
    local_rank: bool = True,
    session_id: str = "sess-0123",
    group_order: Sequence[str] | None = None,
) -> dict[str, str]:
    """The Backend.AI variables of container ``host`` in a session of ``hosts_order``.

    :param hosts_order: every host of the session, in the order HOSTS lists them (a list or
        a comma string); Backend.AI does not guarantee any order.
    :param host: this container's host name (must be one of them).
    :param replicas: ``role:count`` pairs (string, mapping or pairs) in the order REPLICAS
        should list them; default: counted from the hosts, sorted by role name.
    :param local_rank: set ``BACKENDAI_CLUSTER_LOCAL_RANK``.
    :param group_order: the order in which the session's request listed the role groups
        (LOCAL_RANK follows it); default: main first, then REPLICAS order (the canonical
        position, as Backend.AI's default session gives).
    """
    hosts = hosts_order.split(",") if isinstance(hosts_order, str) else list(hosts_order)
    if host not in hosts:
        raise ValueError(f"{host!r} is not one of {hosts}")
    pairs = _replica_pairs(hosts, replicas)
    role, index = _role_of(host, pairs)
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
        if group_order is None:
            group_order = sorted((r for r, _ in pairs), key=lambda r: r != "main")
        env["BACKENDAI_CLUSTER_LOCAL_RANK"] = str(backendai_local_rank(host, pairs, group_order))
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


#: Mount an empty tmpfs on /opt (private mount namespace); FALLBACK, when set, becomes
#: /opt/derive-env/bin/derive-env. Then run the shell under test.
ISOLATE = '''mount -t tmpfs tmpfs /opt || exit 90
if [ -n "$FALLBACK" ]; then
    mkdir -p /opt/derive-env/bin && ln -s "$FALLBACK" /opt/derive-env/bin/derive-env || exit 91
fi
unset FALLBACK
exec "$@"
'''


@pytest.fixture(scope="module")
def isolated() -> list[str]:
    """The command prefix that runs a shell with an empty /opt (root, unshare)."""
    require(os.geteuid() == 0, "needs root: a private mount namespace with a tmpfs on /opt")
    unshare = shutil.which("unshare")
    require(unshare is not None, "unshare (util-linux) is not installed")
    prefix = [str(unshare), "--mount", "--propagation", "private", "sh", "-c", ISOLATE, "isolate"]
    probe = subprocess.run([*prefix, "true"], capture_output=True, timeout=60, check=False)
    require(probe.returncode == 0, f"cannot mount a tmpfs in a mount namespace: {probe.stderr!r}")
    return prefix
