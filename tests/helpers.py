"""Helpers shared by the command-line and exec-path tests (imported as ``helpers``)."""

from __future__ import annotations

import os
import shutil
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser from PyPI (test extra `tomli`), for the TOML output tests
    import tomli as tomllib

__all__ = ["Execed", "console_script", "tomllib"]


class Execed(Exception):
    """Raised by the fake exec (fixture ``fake_exec``): carries what would have been exec'd."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        super().__init__(repr(argv)[:300])  # a huge argv must not flood a failure report
        self.argv = argv
        self.env = env


def console_script() -> str:
    """The installed ``derive-env`` next to this Python (skip when there is none)."""
    candidate = Path(sys.executable).with_name("derive-env")
    found = str(candidate) if candidate.exists() else shutil.which("derive-env")
    if not found:
        pytest.skip("the derive-env console script is not installed next to this Python")
    return found


def require(ok: bool, reason: str) -> None:
    """Skip when ``ok`` is false; under ``CI=true`` FAIL instead (a silent skip in CI would
    report a framework or tool as proven when it was never run)."""
    if ok:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true but this test cannot run: {reason}")
    pytest.skip(reason)


def wait_for_handler(pid: int, signum: int, timeout: float = 5.0) -> None:
    """Until ``pid`` waits with its handler for ``signum`` installed, at most ``timeout`` s.

    SIGTERM: the bit in SigCgt of /proc/PID/status. SIGINT, which Python always catches:
    the resolver's thread exists (the handler follows it at once), then a moment more.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if signum == signal.SIGINT:
            if len(os.listdir(f"/proc/{pid}/task")) > 1:
                time.sleep(0.2)
                return
        else:
            status = Path(f"/proc/{pid}/status").read_text()
            caught = next(x for x in status.splitlines() if x.startswith("SigCgt:"))
            if int(caught.split()[1], 16) & (1 << (signum - 1)):
                return
        time.sleep(0.02)
    raise AssertionError(f"pid {pid} installed no handler for signal {signum} in {timeout} s")


def value_error(function: Callable[..., object], *args: object, **kwargs: object) -> str:
    """The text of the ValueError that ``function(*args, **kwargs)`` raises (fails if none):
    the pure parsers' messages complete a sentence "expected ..." and are asserted exactly."""
    with pytest.raises(ValueError) as caught:
        function(*args, **kwargs)
    return str(caught.value)


#: An srun step's task variables for `srun -N2 -n8`, task 3, as Slurm's env.c writes them
#: (sources.md 3.1); typed, not recorded (no Slurm cluster here; mpirun and mpiexec are
#: recorded in tests/e2e/test_e2e_launchers.py); shared by the merge and refusal tests.
SRUN_TASK_3 = {
    "SLURM_JOB_ID": "4242", "SLURM_JOBID": "4242", "SLURM_STEP_ID": "0", "SLURM_STEPID": "0",
    "SLURM_STEP_NODELIST": "node[1-2]", "SLURM_STEP_NUM_NODES": "2", "SLURM_STEP_NUM_TASKS": "8",
    "SLURM_STEP_TASKS_PER_NODE": "4(x2)", "SLURM_PROCID": "3", "SLURM_LOCALID": "3",
    "SLURM_NODEID": "0", "SLURM_NTASKS": "8", "SLURM_NNODES": "2", "SLURM_JOB_NUM_NODES": "2",
    "SLURM_JOB_NODELIST": "node[1-2]", "SLURMD_NODENAME": "node1",
}


def made(values: dict[str, str], kept: dict[str, str] | None = None):
    """A derivation holding arbitrary values (frameworks never derive such strings), for
    the renderers' tests: ``values`` derived, ``kept`` set by the user (derived: "other")."""
    from derive_env.frameworks.context import SHARED, DerivedVariable
    from derive_env.labels import PREFIX
    from derive_env.pipeline import Derivation
    from derive_env.policy import ImagePolicy
    from derive_env.topology import single_node_topology

    variables = [DerivedVariable(name=k, value=v, provenance=f"test source of {k}",
                                 framework="t", scope=SHARED)
                 for k, v in values.items()]
    for name, value in (kept or {}).items():
        variables.append(DerivedVariable(name=name, value=value, provenance="x", framework="t",
                                         scope=SHARED, kept=True, derived="other"))
    return Derivation(
        topology=single_node_topology(),
        policy=ImagePolicy.from_labels({PREFIX + "frameworks": "pytorch"}),
        variables=tuple(variables),
    )


def not_opted_in_note(job: str, image: bool = True) -> str:
    """The stderr line of an image that did not opt in inside a larger job (contract section
    11, cli._note_larger_job): ``job`` is what states it (``a Backend.AI session states ...``);
    ``image=False``: no labels file was read (bare metal), the job's options come first."""
    if not image:
        return (
            "derive-env: warning: nothing derived: the job did not opt in (no --frameworks, "
            f"no DERIVE_ENV_FRAMEWORKS, no labels file), but {job}, so every node runs the "
            "command as a job of its own. To opt in, run derive-env --frameworks pytorch (or "
            "tensorflow, jax), or export DERIVE_ENV_FRAMEWORKS=pytorch for the job\n")
    return (
        "derive-env: warning: nothing derived: the image did not opt in (label "
        f"ai.backend.distributed.frameworks is not set), but {job}, so every node runs the "
        "command as a job of its own. To opt in, set the label "
        "ai.backend.distributed.frameworks=pytorch (or tensorflow, jax) in the image, "
        "DERIVE_ENV_FRAMEWORKS=pytorch for the job, or derive-env --frameworks pytorch\n")


def backendai_job(size: int) -> str:
    """:func:`not_opted_in_note`'s ``job`` for a Backend.AI session of ``size`` nodes."""
    return ("a Backend.AI session states a job of more than one node "
            f"(BACKENDAI_CLUSTER_SIZE='{size}')")


def framework_changes(derivation) -> dict[str, str]:
    """``derivation.changes()`` without derive-env's own ``DERIVE_ENV_RUN_ID`` (checked by
    tests/test_merge.py and tests/properties/test_run_id_properties.py)."""
    return {k: v for k, v in derivation.changes().items() if k != "DERIVE_ENV_RUN_ID"}
