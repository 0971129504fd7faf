"""docker/on-every-node.sh without a cluster: stand-ins of derive-env and ssh on PATH.

The stand-in ``ssh`` records its arguments and runs the remote command string with ``sh -c``
in ``/`` (as a remote shell starts in its home), so quoting, working directory,
order and exit statuses are checked here in a second; tests/e2e/test_e2e_backendai.py runs
the real script over real sshd in simulated containers, signals included.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "docker" / "on-every-node.sh"
#: POSIX shells to run it with (busybox's sh is what small images have).
SHELLS = [s for s in ("sh", "dash", "busybox") if shutil.which(s)]


def _sh(shell: str) -> list[str]:
    """argv prefix that runs a script with ``shell``."""
    return [shell, "sh"] if shell == "busybox" else [shell]


FAKE_DERIVE_ENV = """#!/bin/sh
[ "$*" = "--dry-run --format hosts" ] || { echo "unexpected: $*" >&2; exit 9; }
[ -z "${FAKE_RC-}" ] || { echo "derive-env: error: fake" >&2; exit "$FAKE_RC"; }
printf '%s\\n' ${FAKE_HOSTS-main1 sub1 sub2}
"""
# ssh [-tt] [-o X]... HOST COMMAND: log the call, run COMMAND as HOST's remote shell would.
FAKE_SSH = """#!/bin/sh
opts=; while [ "$#" -gt 2 ]; do opts="$opts $1"; shift; done
[ "$2" = true ] && { echo "probe$opts $1" >> "$LOG/ssh.calls"; exit 0; }
echo "run$opts $1" >> "$LOG/ssh.calls"
cd / && NODE="$1" exec sh -c "$2"
"""


def _bin(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, text in (("derive-env", FAKE_DERIVE_ENV), ("ssh", FAKE_SSH)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return bin_dir


def _run(tmp_path: Path, shell: str, *args: str, **fake: str
         ) -> subprocess.CompletedProcess[str]:
    env = {"PATH": f"{_bin(tmp_path)}:/usr/bin:/bin", "BACKENDAI_CLUSTER_HOST": "main1",
           "LOG": str(tmp_path), "NODE": "main1", **fake}
    return subprocess.run([*_sh(shell), str(SCRIPT), *args], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=30, check=False)


def test_is_executable_posix_sh() -> None:
    assert os.access(SCRIPT, os.X_OK)
    for shell in SHELLS:
        check = subprocess.run([*_sh(shell), "-n", str(SCRIPT)], capture_output=True, timeout=30)
        assert check.returncode == 0, (shell, check.stderr)


@pytest.mark.parametrize("shell", SHELLS)
def test_arguments_byte_for_byte_locally_and_remotely(tmp_path: Path, shell: str) -> None:
    arg = "it's  \"two\"\n$HOME `x` \\ *\n\n"
    proc = _run(tmp_path, shell, "--", "sh", "-c", 'printf %s "$1" > "out.$NODE"', "sh", arg)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert {h: (tmp_path / f"out.{h}").read_text() for h in ("main1", "sub1", "sub2")} == {
        "main1": arg, "sub1": arg, "sub2": arg}
    calls = sorted((tmp_path / "ssh.calls").read_text().splitlines())
    probe = "probe -o BatchMode=yes -o ConnectTimeout=5 -o LogLevel=ERROR"
    assert calls == [f"{probe} sub1", f"{probe} sub2",
                     "run -tt -o LogLevel=ERROR sub1", "run -tt -o LogLevel=ERROR sub2"]


@pytest.mark.parametrize("shell", SHELLS)
def test_remote_command_runs_in_the_same_directory(tmp_path: Path, shell: str) -> None:
    proc = _run(tmp_path, shell, "sh", "-c", 'pwd > "$LOG/pwd.$NODE"')
    assert proc.returncode == 0, proc.stderr
    assert {h: (tmp_path / f"pwd.{h}").read_text().strip() for h in ("main1", "sub1", "sub2")} \
        == {"main1": str(tmp_path), "sub1": str(tmp_path), "sub2": str(tmp_path)}


@pytest.mark.parametrize("shell", SHELLS)
def test_first_failure_in_canonical_order_and_every_failed_node_named(
    tmp_path: Path, shell: str
) -> None:
    proc = _run(tmp_path, shell, "sh", "-c",
                'case $NODE in main1) exit 0;; sub1) exit 4;; sub2) exit 3;; esac')
    assert proc.returncode == 4
    assert proc.stderr.splitlines() == [
        "on-every-node: sub1: exit status 4",
        "on-every-node: sub2: exit status 3",
    ]


@pytest.mark.parametrize("shell", SHELLS)
def test_no_command_is_a_usage_error(tmp_path: Path, shell: str) -> None:
    for args in ((), ("--",)):
        proc = _run(tmp_path, shell, *args)
        assert (proc.returncode, proc.stderr) == (
            2, "usage: on-every-node [--] COMMAND [ARG]...\n")


@pytest.mark.parametrize("shell", SHELLS)
def test_derive_env_failure_stops_before_any_node(tmp_path: Path, shell: str) -> None:
    proc = _run(tmp_path, shell, "touch", "ran", FAKE_RC="3")
    assert (proc.returncode, proc.stderr) == (3, "derive-env: error: fake\n")
    assert not (tmp_path / "ran").exists()
    proc = _run(tmp_path, shell, "touch", "ran", FAKE_HOSTS="")
    assert (proc.returncode, proc.stderr) == (
        1, "on-every-node: derive-env --dry-run --format hosts listed no host\n")
    assert not (tmp_path / "ran").exists()


@pytest.mark.parametrize("shell", SHELLS)
def test_single_container_session_runs_locally(tmp_path: Path, shell: str) -> None:
    """derive-env lists ``localhost`` for a single-container session: no SSH at all."""
    proc = _run(tmp_path, shell, "sh", "-c", 'echo "$NODE" > "$LOG/ran"', FAKE_HOSTS="localhost")
    assert (proc.returncode, proc.stderr) == (0, "")
    assert (tmp_path / "ran").read_text() == "main1\n"
    assert not (tmp_path / "ssh.calls").exists()


@pytest.mark.parametrize("shell", SHELLS)
def test_this_container_matched_case_insensitively(tmp_path: Path, shell: str) -> None:
    """BACKENDAI_CLUSTER_HOST ``Main1`` is the listed ``main1`` (derive-env matches HOST so):
    it runs locally, not over SSH to itself."""
    proc = _run(tmp_path, shell, "sh", "-c", 'echo "$NODE" > "$LOG/ran.$NODE"',
                BACKENDAI_CLUSTER_HOST="Main1", FAKE_HOSTS="main1 SUB1")
    assert (proc.returncode, proc.stderr) == (0, "")
    assert (tmp_path / "ran.main1").read_text() == "main1\n"
    assert (tmp_path / "ran.SUB1").read_text() == "SUB1\n"
    calls = (tmp_path / "ssh.calls").read_text().splitlines()
    assert [c.rsplit(" ", 1)[1] for c in calls] == ["SUB1", "SUB1"]


def _isolated_run(isolated: list[str], tmp_path: Path, shell: str, *, fallback: str
                  ) -> subprocess.CompletedProcess[str]:
    """Run the script with no derive-env on PATH and an /opt holding only ``fallback`` (when
    not empty) as /opt/derive-env/bin/derive-env (private mount namespace)."""
    bin_dir = _bin(tmp_path)
    real = bin_dir.parent / "derive-env-fake"
    (bin_dir / "derive-env").rename(real)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "BACKENDAI_CLUSTER_HOST": "main1",
           "LOG": str(tmp_path), "NODE": "main1", "FALLBACK": fallback and str(real)}
    return subprocess.run(
        [*isolated, *_sh(shell), str(SCRIPT), "sh", "-c", 'echo "$NODE" >> "$LOG/ran"'],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=30, check=False)


@pytest.mark.parametrize("shell", SHELLS)
def test_derive_env_from_opt_when_not_on_path(
        isolated: list[str], tmp_path: Path, shell: str) -> None:
    """The packaged install (/opt/derive-env/bin/derive-env), found as bootstrap.sh finds it."""
    proc = _isolated_run(isolated, tmp_path, shell, fallback="yes")
    assert proc.returncode not in (90, 91), proc.stderr  # the isolation itself failed
    assert (proc.returncode, proc.stderr) == (0, "")
    assert sorted((tmp_path / "ran").read_text().splitlines()) == ["main1", "sub1", "sub2"]


@pytest.mark.parametrize("shell", SHELLS)
def test_derive_env_not_installed_says_so(
        isolated: list[str], tmp_path: Path, shell: str) -> None:
    proc = _isolated_run(isolated, tmp_path, shell, fallback="")
    assert (proc.returncode, proc.stderr) == (
        127, "on-every-node: derive-env is not installed (not on PATH, no "
        "/opt/derive-env/bin/derive-env)\n")
    assert not (tmp_path / "ran").exists()


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize(("value", "shown"), [("x", "x"), ("1.5", "1.5"), ("-1", "-1"),
                                              ("9999999", "9999999"), ("3\x1b[2J", "3?[2J")])
def test_a_bad_ssh_wait_is_one_usage_error_before_any_node(tmp_path: Path, shell: str,
                                                           value: str, shown: str) -> None:
    """Issue 15, item 7: a non-numeric ON_EVERY_NODE_SSH_WAIT failed once per peer."""
    proc = _run(tmp_path, shell, "touch", "ran", ON_EVERY_NODE_SSH_WAIT=value)
    assert (proc.returncode, proc.stderr) == (
        2, f"on-every-node: ON_EVERY_NODE_SSH_WAIT='{shown}': expected a number of seconds "
        "(digits, at most 6)\n")
    assert not (tmp_path / "ran").exists()
    assert not (tmp_path / "ssh.calls").exists()
