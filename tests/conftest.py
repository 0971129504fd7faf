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
import shutil
import subprocess
from collections.abc import Callable

import pytest

from helpers import require
from support.backendai import canonical_order, make_backendai_env

#: The label set of an image that opted in for PyTorch, and nothing else.
OPT_IN: dict[str, str] = {"ai.backend.distributed.frameworks": "pytorch"}

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
