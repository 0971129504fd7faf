"""docker/bootstrap.sh as Backend.AI really runs it: SOURCED by its entrypoint (issue 6, item 3).

Backend.AI's ``/opt/kernel/entrypoint.sh`` (``#!/bin/sh``: dash on Ubuntu, busybox ash on
Alpine-based images) sources ``/opt/container/bootstrap.sh`` and then starts its kernel
runner. The stand-in below does the same in every POSIX shell the hook must work in
(``sh``, ``dash``, ``busybox sh``, ``bash --posix``): ``set`` before, ``. bootstrap.sh``,
``set`` after, then it execs a program that prints its environment (the kernel runner's
view). Each test runs in a private mount namespace with an empty tmpfs on ``/opt``, so the
hook's fallback ``/opt/derive-env/bin/derive-env`` is exactly what the test puts there, and
this machine's ``/opt`` is never touched. derive-env reads the test's labels file
(``DERIVE_ENV_LABELS_FILE``) and a Backend.AI environment built by ``make_backendai_env``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import backendai_job, console_script, not_opted_in_note, require

DOCKER = Path(__file__).resolve().parents[1] / "docker"
HOOK = DOCKER / "bootstrap.sh"
PREFIX = "ai.backend.distributed."
FW = PREFIX + "frameworks"
TIMEOUT = 60

SHELLS = {
    "sh": ["sh"],
    "dash": ["dash"],
    "busybox": ["busybox", "sh"],
    "bash-posix": ["bash", "--posix"],
}

#: The stand-in for Backend.AI's entrypoint: set before, source the hook, set after, then
#: "start the kernel runner" (a dump of its environment). $1 before, $2 hook, $3 after,
#: $4 python.
ENTRYPOINT = '''set > "$1"
. "$2"
set > "$3"
echo "entrypoint: hook returned" >&2
exec "$4" -c 'import json, os; print(json.dumps(dict(os.environ)))'
'''
#: Shell variables that change by themselves between two `set`s (bash keeps these).
VOLATILE = {"_", "LINENO", "PIPESTATUS", "BASH_LINENO", "BASH_SOURCE", "BASH_ARGC",
            "BASH_ARGV", "BASH_COMMAND", "RANDOM", "SECONDS", "SRANDOM", "EPOCHREALTIME",
            "EPOCHSECONDS", "BASHPID", "FUNCNAME", "OPTIND"}
_SET_NAME = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=", re.MULTILINE)
_SET_FUNCTION = re.compile(r"^([A-Za-z_][A-Za-z0-9_-]*) \(\) *$", re.MULTILINE)

HOSTS = ["sub2", "main1", "sub1"]  # as Backend.AI lists them: no order to rely on
EXPECTED_SUB2 = {
    "MASTER_ADDR": "main1",
    "MASTER_PORT": "29500",
    "NODE_RANK": "2",
    "PET_NNODES": "3",
    "PET_NODE_RANK": "2",
    "PET_MASTER_ADDR": "main1",
    "PET_MASTER_PORT": "29500",
    "TF_CONFIG": '{"cluster":{"worker":["main1:2222","sub1:2222","sub2:2222"]},'
                 '"task":{"type":"worker","index":2}}',
    # BLAKE2b of session sess-0123: the same in every container
    "DERIVE_ENV_RUN_ID": "4710a43c645d3cb2",
}


def names(set_output: str) -> set[str]:
    """Variable and function names in a shell's ``set`` output."""
    return ({*_SET_NAME.findall(set_output), *_SET_FUNCTION.findall(set_output)}
            - VOLATILE)


class Hook:
    """One run of the stand-in entrypoint: exit status, stderr, names added, environment."""

    def __init__(self, proc: subprocess.CompletedProcess[str], before: Path, after: Path,
                 baseline: dict[str, str]) -> None:
        self.status = proc.returncode
        self.stderr = proc.stderr
        self.continued = "entrypoint: hook returned" in proc.stderr
        self.before = before.read_text(errors="replace") if before.exists() else ""
        self.after = after.read_text(errors="replace") if after.exists() else ""
        environ = json.loads(proc.stdout) if proc.stdout.strip() else {}
        # Against the same entrypoint sourcing an empty hook (the shell adds PWD, SHLVL...).
        self.exported = {k: v for k, v in environ.items() if baseline.get(k) != v}

    @property
    def new_names(self) -> set[str]:
        return names(self.after) - names(self.before)

    @property
    def gone_names(self) -> set[str]:
        return names(self.before) - names(self.after)


@pytest.fixture(params=sorted(SHELLS))
def shell(request: pytest.FixtureRequest) -> list[str]:
    argv = SHELLS[request.param]
    require(shutil.which(argv[0]) is not None,
            f"{argv[0]} is not installed (the Makefile installs dash and busybox)")
    return argv


def source_hook(
    shell: list[str], isolated: list[str], tmp_path: Path, environ: dict[str, str],
    labels: dict[str, str], *, on_path: str | None = "real", fallback: str | None = None,
) -> Hook:
    """Source the hook in ``shell`` as Backend.AI's entrypoint does.

    :param on_path: ``real``: the derive-env console script on PATH; a path: that program
        as ``derive-env`` on PATH; ``None``: no derive-env on PATH.
    :param fallback: a program to place at /opt/derive-env/bin/derive-env.
    """
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    if on_path is not None:
        target = console_script() if on_path == "real" else on_path
        (bin_dir / "derive-env").symlink_to(target)
    labels_file = tmp_path / "labels.json"
    labels_file.write_text(json.dumps(labels))
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "DERIVE_ENV_LABELS_FILE": str(labels_file),
        "LANG": "C.UTF-8",
        **environ,
    }
    def entrypoint(hook: Path, tag: str = "") -> subprocess.CompletedProcess[str]:
        before, after = tmp_path / f"set-before{tag}", tmp_path / f"set-after{tag}"
        argv = [*isolated, *shell, "-c", ENTRYPOINT, "entrypoint", str(before), str(hook),
                str(after), sys.executable]
        proc = subprocess.run(argv, env={**env, "FALLBACK": fallback or ""}, cwd=tmp_path,
                              capture_output=True, text=True, timeout=TIMEOUT, check=False)
        assert proc.returncode not in (90, 91), proc.stderr  # the isolation itself failed
        return proc

    empty = tmp_path / "empty-hook.sh"
    empty.write_text("")
    baseline = json.loads(entrypoint(empty, "-baseline").stdout)
    return Hook(entrypoint(HOOK), tmp_path / "set-before", tmp_path / "set-after", baseline)


def test_hook_is_executable_posix_sh() -> None:
    assert os.access(HOOK, os.X_OK), "Backend.AI sources it only when it is executable"
    assert HOOK.read_text().startswith("#!/bin/sh\n")
    assert "set -e" not in HOOK.read_text().split("\n_derive_env", 1)[0].replace(
        '"set -e"', "")


def test_exports_with_exact_values_and_no_names_left(
    shell: list[str], isolated: list[str], tmp_path: Path, backendai_env
) -> None:
    hook = source_hook(shell, isolated, tmp_path, backendai_env(HOSTS, "sub2"),
                       {FW: "pytorch,tensorflow"})
    assert (hook.status, hook.continued) == (0, True), hook.stderr
    assert hook.stderr == "entrypoint: hook returned\n"
    assert hook.exported == EXPECTED_SUB2
    assert hook.new_names == set(EXPECTED_SUB2)  # no _derive_env_* variable, no function
    assert hook.gone_names == set()


def test_fallback_to_opt_derive_env_when_not_on_path(
    shell: list[str], isolated: list[str], tmp_path: Path, backendai_env
) -> None:
    """The packaged install: its own venv in /opt/derive-env, maybe no symlink on PATH."""
    hook = source_hook(shell, isolated, tmp_path, backendai_env(HOSTS, "sub2"),
                       {FW: "pytorch,tensorflow"}, on_path=None, fallback=console_script())
    assert (hook.status, hook.continued) == (0, True), hook.stderr
    assert hook.exported == EXPECTED_SUB2
    assert hook.new_names == set(EXPECTED_SUB2)


def test_not_installed_says_so_and_the_container_starts(
    shell: list[str], isolated: list[str], tmp_path: Path, backendai_env
) -> None:
    """Not on PATH, not in /opt/derive-env: a clear message, no exports, the entrypoint goes
    on (only an error derive-env reports under on-error=fail stops the container)."""
    hook = source_hook(shell, isolated, tmp_path, backendai_env(HOSTS, "sub2"),
                       {FW: "pytorch,tensorflow"}, on_path=None)
    assert (hook.status, hook.continued) == (0, True)
    assert hook.stderr == (
        "bootstrap.sh: derive-env is not installed (not on PATH, no "
        "/opt/derive-env/bin/derive-env): the session starts without the distributed "
        "training variables. See docs/integration.md (Backend.AI hook).\n"
        "entrypoint: hook returned\n"
    )
    assert hook.exported == {}
    assert hook.new_names == set()


def test_error_under_on_error_fail_stops_the_entrypoint(
    shell: list[str], isolated: list[str], tmp_path: Path, backendai_env
) -> None:
    bad = {**backendai_env(HOSTS, "sub2"), "BACKENDAI_CLUSTER_SIZE": "4"}
    hook = source_hook(shell, isolated, tmp_path, bad, {FW: "pytorch"})
    assert hook.status == 3  # derive-env's exit code (bad cluster variables)
    assert not hook.continued  # the kernel runner never starts
    assert hook.after == ""
    lines = hook.stderr.splitlines()
    assert lines[0].startswith("derive-env: error: BACKENDAI_CLUSTER_")
    assert lines[-1] == (
        "bootstrap.sh: derive-env failed (exit 3); the container stops here. See the message "
        "above and docs/operator-guide.md (troubleshooting)."
    )


def test_error_under_on_error_warn_warns_and_goes_on(
    shell: list[str], isolated: list[str], tmp_path: Path, backendai_env
) -> None:
    bad = {**backendai_env(HOSTS, "sub2"), "BACKENDAI_CLUSTER_SIZE": "4"}
    hook = source_hook(shell, isolated, tmp_path, bad, {FW: "pytorch", PREFIX + "on-error": "warn"})
    assert (hook.status, hook.continued) == (0, True)
    lines = hook.stderr.splitlines()
    assert lines[0].startswith("derive-env: warning: BACKENDAI_CLUSTER_")
    assert lines[1:] == ["derive-env: warning: on-error=warn: nothing derived",
                         "entrypoint: hook returned"]
    assert hook.exported == {}
    assert hook.new_names == set()


def test_not_opted_in_does_nothing(
    shell: list[str], isolated: list[str], tmp_path: Path, backendai_env
) -> None:
    hook = source_hook(shell, isolated, tmp_path, backendai_env(HOSTS, "sub2"),
                       {"org.opencontainers.image.title": "plain"})
    assert (hook.status, hook.continued) == (0, True)
    # Inside a session of 3 nodes: one line says nothing was derived (contract section 11).
    assert hook.stderr == not_opted_in_note(backendai_job(3)) + "entrypoint: hook returned\n"
    assert hook.exported == {}
    assert hook.new_names == set()


HOSTILE = {
    "A_QUOTE": "it's",
    "A_SUBST": "$(touch pwned-subst)",
    "A_BACKTICK": "`touch pwned-backtick`",
    "A_NEWLINE": "line one\nline two; touch pwned-newline",
    "A_BREAKOUT": "'; touch pwned-breakout; echo '",
    "A_DOUBLE": '"$HOME" \\ * ?',
    "A_EMPTY": "",
}

#: A derive-env that prints the REAL shell renderer's output for hostile values.
HOSTILE_DERIVE_ENV = '''#!{python}
import sys
sys.path[:0] = {path!r}
from derive_env.frameworks.context import SHARED, DerivedVariable
from derive_env.pipeline import Derivation
from derive_env.policy import ImagePolicy
from derive_env.render import render
from derive_env.topology import single_node_topology
values = {values!r}
sys.stdout.write(render(Derivation(
    topology=single_node_topology(),
    policy=ImagePolicy.from_labels({{"ai.backend.distributed.frameworks": "pytorch"}}),
    variables=tuple(DerivedVariable(name=k, value=v, provenance="test", framework="t",
                                    scope=SHARED)
                    for k, v in values.items()),
), "shell"))
'''


def test_values_with_quotes_newlines_and_substitutions_never_execute(
    shell: list[str], isolated: list[str], tmp_path: Path
) -> None:
    fake = tmp_path / "hostile-derive-env"
    fake.write_text(HOSTILE_DERIVE_ENV.format(python=sys.executable, path=sys.path,
                                              values=HOSTILE))
    fake.chmod(0o755)
    hook = source_hook(shell, isolated, tmp_path, {}, {}, on_path=str(fake))
    assert (hook.status, hook.continued) == (0, True), hook.stderr
    assert hook.exported == HOSTILE
    assert hook.new_names == set(HOSTILE)  # A_EMPTY is exported too, empty
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("pwned")) == []


def test_works_under_the_entrypoints_set_e(
    isolated: list[str], tmp_path: Path, backendai_env
) -> None:
    """An entrypoint running with ``set -e`` still gets the hook's message and exit code."""
    require(shutil.which("dash") is not None, "dash is not installed")
    bad = {**backendai_env(HOSTS, "sub2"), "BACKENDAI_CLUSTER_SIZE": "4"}
    hook = source_hook(["dash", "-e"], isolated, tmp_path, bad, {FW: "pytorch"})
    assert hook.status == 3
    assert "bootstrap.sh: derive-env failed (exit 3); the container stops here." in hook.stderr
