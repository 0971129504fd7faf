"""Run one simulated Backend.AI session in which every container starts ``derive-env -- ...``.

Shared by the framework end-to-end tests (TensorFlow, JAX, Lightning). Each call of
:func:`run_session`:

1. makes a :class:`simcluster.SimulatedCluster` (one network namespace per container, unique
   prefix) and removes it afterwards, also on failure;
2. writes the image labels as a JSON file (the baked-in labels file of contract section 4) in
   a temporary folder, handed to every container through ``DERIVE_ENV_LABELS_FILE``;
3. gives each container the variables Backend.AI would set, with BACKENDAI_CLUSTER_HOSTS in an
   order that does NOT start with main1 (:func:`simcluster.scrambled_order`), plus ``PATH``
   with this virtualenv's ``bin`` first (so ``python`` after ``--`` is found by derive-env's
   own PATH lookup and is this interpreter's virtualenv);
4. starts ``<venv>/bin/derive-env -- <argv>`` in every container at once (N separate
   processes, so derive-env's exec path is what gets tested) and waits at most ``timeout``.

Standard library and pytest only. The virtualenv is the one of ``sys.executable`` (the test
runner's): /work/main/.venv under ``make test``, or any other with the same pins.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from helpers import require
from simcluster import (
    HostResult,
    SimulatedCluster,
    backendai_env,
    can_simulate,
    canonical_order,
    scrambled_order,
)

__all__ = [
    "HERE",
    "HOSTS",
    "LABEL",
    "HostResult",
    "describe_all",
    "json_lines",
    "json_report",
    "random_ports",
    "reports_of",
    "require",
    "require_frameworks",
    "run_session",
    "run_workers",
    "venv_bin",
]

#: The three containers of every framework session; canonical order main1, sub1, sub2.
HOSTS = ["main1", "sub1", "sub2"]
#: Prefix of every image label (contract section 4).
LABEL = "ai.backend.distributed."
#: Folder of this file.
HERE = Path(__file__).resolve().parent
#: The training programs the sessions run: the repository's examples/training/ (each imports
#: worker_report from its own folder).
EXAMPLES = HERE.parents[1] / "examples" / "training"

#: Variables that every framework container gets on top of the Backend.AI ones: no GPU, quiet
#: TensorFlow C++ logging, gloo on the container's own interface, unbuffered Python output
#: (so a killed worker still shows what it printed).
BASE_ENV: dict[str, str] = {
    "CUDA_VISIBLE_DEVICES": "",
    "TF_CPP_MIN_LOG_LEVEL": "2",
    "GLOO_SOCKET_IFNAME": "eth0",
    "PYTHONUNBUFFERED": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
}


def venv_bin() -> Path:
    """``bin`` folder of the test runner's virtualenv (NOT resolved: resolving the python
    symlink would leave the virtualenv)."""
    return Path(sys.executable).parent


def require_frameworks(*modules: str) -> None:
    """Skip/fail (see :func:`require`) unless the machine can simulate a cluster, derive-env
    is installed next to ``sys.executable`` and every module in ``modules`` is importable."""
    require(*can_simulate())
    exe = venv_bin() / "derive-env"
    require(exe.exists(), f"no derive-env next to {sys.executable} ({exe})")
    for module in modules:
        require(
            importlib.util.find_spec(module) is not None,
            f"{module} is not importable by {sys.executable}",
        )


def random_ports(n: int) -> list[int]:
    """``n`` distinct random TCP ports in 20000-59999 (a fresh set per run)."""
    return random.sample(range(20000, 60000), n)


def _unique_prefix() -> str:
    """Namespace prefix unique to this process and call."""
    return f"dfw{os.getpid() % 100000}x{random.randrange(1000)}"


def run_session(
    labels: Mapping[str, str],
    argv_for: Callable[[str], list[str]],
    timeout: float,
    *,
    extra_env: Mapping[str, str] | None = None,
    hosts: list[str] | None = None,
    cluster_options: Mapping[str, object] | None = None,
) -> tuple[dict[str, HostResult], list[str]]:
    """Run ``derive-env -- argv_for(host)`` in every container of a fresh simulated session.

    :param labels: image labels (full keys, e.g. ``ai.backend.distributed.frameworks``),
        written to a JSON labels file that every container reads via DERIVE_ENV_LABELS_FILE.
    :param argv_for: host -> the user's command (what follows ``--``).
    :param timeout: seconds for the whole session (every process), after which the rest is
        killed and marked ``timed_out``.
    :param extra_env: variables for every container on top of :data:`BASE_ENV`.
    :param hosts: container names (default :data:`HOSTS`).
    :param cluster_options: keyword arguments of :class:`simcluster.SimulatedCluster`
        (``interface="baimulti0"``, ``gwbridge=True`` ...).
    :returns: (host -> HostResult in canonical order, the BACKENDAI_CLUSTER_HOSTS order used).
    """
    hosts = list(hosts or HOSTS)
    order = scrambled_order(hosts)
    assert order[0] != canonical_order(hosts)[0], order
    exe = str(venv_bin() / "derive-env")
    path = os.pathsep.join([str(venv_bin()), os.environ.get("PATH", "/usr/bin:/bin")])
    proxy_free = {}
    if any("_proxy" in k.lower() for k in os.environ):
        # gRPC (TensorFlow) and JAX honour *_proxy; container-to-container traffic must not
        # go through the runner's proxy.
        proxy_free = {"no_proxy": "*", "NO_PROXY": "*", "no_grpc_proxy": "*"}
    with tempfile.TemporaryDirectory(prefix="derive-env-e2e-") as tmp:
        labels_file = Path(tmp) / "labels.json"
        labels_file.write_text(json.dumps(dict(labels)))
        labels_file.chmod(0o644)
        per_host = {}
        for host in canonical_order(hosts):
            env = {
                **BASE_ENV,
                **proxy_free,
                **(extra_env or {}),
                **backendai_env(order, host),
                "DERIVE_ENV_LABELS_FILE": str(labels_file),
                "PATH": path,
            }
            per_host[host] = ([exe, "--", *argv_for(host)], env)
        with SimulatedCluster(hosts, prefix=_unique_prefix(), **(cluster_options or {})) as cluster:
            results = cluster.run_all(per_host, timeout=timeout)
    return results, order


def run_workers(labels: Mapping[str, str], script: str, timeout: float, *args: str,
                extra_env: Mapping[str, str] | None = None) -> dict[str, dict[str, object]]:
    """``python examples/training/<script> ARGS`` under derive-env in every container of one
    :func:`run_session` (BACKENDAI_CLUSTER_HOSTS not starting with main1); host -> the
    worker's JSON report, every container having exited 0 (:func:`reports_of`)."""
    results, _ = run_session(labels, lambda _host: ["python", str(EXAMPLES / script), *args],
                             timeout, extra_env=extra_env)
    return reports_of(results)


def describe_all(results: Mapping[str, HostResult]) -> str:
    """Every container's status and output tail, for assertion messages."""
    return "\n".join(r.describe(tail=4000) for r in results.values())


def reports_of(results: Mapping[str, HostResult]) -> dict[str, dict[str, object]]:
    """host -> the worker's JSON report, after asserting that every container exited 0 on its
    own (else the test fails showing every container's output)."""
    bad = [h for h, r in results.items() if not r.ok]
    assert not bad, f"containers failed: {bad}\n{describe_all(results)}"
    return {h: json_report(r) for h, r in results.items()}


def json_report(result: HostResult) -> dict[str, object]:
    """The last line of ``result.stdout`` that is a JSON object (the worker's report).

    Fails the test (with every line of output) when there is none.
    """
    found = json_lines(result.stdout)
    if found:
        return found[-1]
    pytest.fail(f"no JSON report from {result.host}:\n{result.describe(tail=4000)}")


def json_lines(text: str) -> list[dict[str, object]]:
    """Every line of ``text`` that is a JSON object (the workers' reports), in order; other
    lines (logs, warnings) are skipped."""
    found = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                found.append(value)
    return found
