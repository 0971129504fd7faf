"""docker/on-every-node.sh without a cluster: stand-ins of derive-env and ssh on PATH.

The stand-in ``ssh`` records its arguments and runs the remote command string with ``sh -c``
in ``/`` (as a remote shell starts in its home), with ``NODE`` set to the host; hosts in
FAKE_DOWN refuse the connection (status 255), hosts in FAKE_HANG never answer; with
FAKE_DROPBEAR set it plays dropbear's terminal session: the end of the client's input hangs
the remote command up (SIGHUP); the remote command's DERIVE_ENV_RUN_ID is the session's
(what the hook exported in each container) unless the command string sets it. The stand-in
``derive-env`` lists FAKE_HOSTS, prints a digest of the facts file of its node
(``facts.<NODE>``, else ``facts``) and the run id it sees, and those facts; it records the
run id of each call in ``run-id.calls``. So the probe, the digest comparison,
quoting, working directory, order, fail-fast and exit statuses are checked here in seconds,
under every POSIX shell the script must run in; tests/e2e/test_e2e_fanout.py and
test_e2e_backendai.py run the real script over Backend.AI's dropbear in real containers,
tests/e2e/test_e2e_openssh.py over OpenSSH's sshd in simulated ones.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "docker" / "on-every-node.sh"
#: POSIX shells to run it with (busybox's sh is what small images have, dash Debian's sh).
SHELLS = [s for s in ("sh", "dash", "busybox", "bash-posix")
          if shutil.which(s.split("-")[0])]
HOSTS = ("main1", "sub1", "sub2")
#: The run id the stand-in derive-env derives from the session (what the hook exported).
SESSION_RUN_ID = "5e5510115e55101d"
FACTS = "source: backendai\nnodes: main1,sub1,sub2\nmaster_addr: main1\nmaster_port: 29500\n"


def _sh(shell: str) -> list[str]:
    """argv prefix that runs a script with ``shell``."""
    return {"busybox": ["busybox", "sh"], "bash-posix": ["bash", "--posix"]}.get(shell, [shell])


FAKE_DERIVE_ENV = """#!/bin/sh
echo "${NODE-?} $*" >> "$LOG/derive-env.calls"
echo "${NODE-?} $3 ${DERIVE_ENV_RUN_ID-(unset)}" >> "$LOG/run-id.calls"
[ "$1 $2" = "--dry-run --format" ] || { echo "unexpected: $*" >&2; exit 9; }
[ -z "${FAKE_RC-}" ] || { echo "derive-env: error: fake" >&2; exit "$FAKE_RC"; }
case " ${FAKE_OTHER_RUN_ID-} " in *" $NODE "*) DERIVE_ENV_RUN_ID=0ther ;; esac
facts="$LOG/facts.$NODE"
# the run id fact: a set one, else the one derived from the session (the hook's), or with
# FAKE_NO_SESSION a fresh one at each start
run_id() {
    [ -n "${DERIVE_ENV_RUN_ID-}${FAKE_NO_SESSION-}" ] ||
        DERIVE_ENV_RUN_ID=$SESSION_RUN_ID
    [ -n "${DERIVE_ENV_RUN_ID-}" ] ||
        DERIVE_ENV_RUN_ID=$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')
    echo "var.DERIVE_ENV_RUN_ID: $DERIVE_ENV_RUN_ID"
}
[ -f "$facts" ] || facts="$LOG/facts"
case $3 in
    hosts) printf '%s\\n' ${FAKE_HOSTS-main1 sub1 sub2} ;;
    digest)
        case " ${FAKE_FAIL-} " in *" $NODE "*)
            echo "derive-env: error: label x on $NODE" >&2; exit 4 ;;
        esac
        echo "$({ cat "$facts"; run_id; } | cksum | cut -d' ' -f1) - $NODE" ;;
    digest-facts) cat "$facts"; run_id ;;
    *) echo "unexpected: $*" >&2; exit 9 ;;
esac
"""
# ssh [-tt] [-o X]... HOST COMMAND: log the call, run COMMAND as HOST's remote shell would.
FAKE_SSH = """#!/bin/sh
opts=; while [ "$#" -gt 2 ]; do opts="$opts $1"; shift; done
# a login's environment, not the client's: the run id the hook exported there
DERIVE_ENV_RUN_ID=$SESSION_RUN_ID; export DERIVE_ENV_RUN_ID
case $2 in
    *"--format digest-facts"*) kind=facts ;;
    *"--format digest"*) kind=digest ;;
    *) kind=run ;;
esac
echo "$kind$opts $1" >> "$LOG/ssh.calls"
case " ${FAKE_DOWN-} " in *" $1 "*)
    echo "ssh: connect to host $1 port 2200: Connection refused" >&2; exit 255 ;;
esac
case " ${FAKE_HANG-} " in *" $1 "*) echo $$ >> "$LOG/hang.pids"; exec sleep 60 ;; esac
# hosts in FAKE_LATE refuse their first two probes (an sshd not up yet), then answer
case " ${FAKE_LATE-} " in *" $1 "*)
    if [ "$kind" = digest ] && [ ! -f "$LOG/late.$1.2" ]; then
        if [ -f "$LOG/late.$1.1" ]; then : >"$LOG/late.$1.2"; else : >"$LOG/late.$1.1"; fi
        echo "ssh: connect to host $1 port 2200: Connection refused" >&2; exit 255
    fi ;;
esac
if [ "$kind" = run ]; then
    # the remote shell in a terminal: the end of this ssh client hangs it up (SIGHUP)
    exec 3<&0
    cd / && NODE="$1" sh -c "$2" </dev/null &
    c=$!
    trap 'kill -HUP "$c" 2>/dev/null; wait "$c"; exit 143' TERM
    r=
    if [ -n "${FAKE_DROPBEAR-}" ]; then
        # dropbear: the end of the client's input closes the terminal, too
        # (read is a builtin: the reader is one process, stopped below)
        { while read -r _; do :; done; kill -HUP "$c"; } <&3 3<&- >/dev/null 2>&1 &
        r=$!
    fi
    exec 3<&-
    wait "$c"
    rc=$?
    [ -z "$r" ] || kill "$r" 2>/dev/null
    exit "$rc"
fi
cd / && NODE="$1" exec sh -c "$2"
"""
PROBE = "-o BatchMode=yes -o ConnectTimeout=5 -o LogLevel=ERROR"
RUN = "-tt -o LogLevel=ERROR"


def _bin(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, text in (("derive-env", FAKE_DERIVE_ENV), ("ssh", FAKE_SSH)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    (tmp_path / "facts").write_text(FACTS)
    return bin_dir


def _env(tmp_path: Path, **fake: str) -> dict[str, str]:
    return {"PATH": f"{_bin(tmp_path)}:/usr/bin:/bin", "BACKENDAI_CLUSTER_HOST": "main1",
            "LOG": str(tmp_path), "NODE": "main1", "SESSION_RUN_ID": SESSION_RUN_ID, **fake}


def _run(tmp_path: Path, shell: str, *args: str, **fake: str
         ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*_sh(shell), str(SCRIPT), *args], env=_env(tmp_path, **fake),
                          cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          check=False)


def _calls(tmp_path: Path, name: str = "ssh.calls") -> list[str]:
    path = tmp_path / name
    return sorted(path.read_text().splitlines()) if path.exists() else []


def _started(stderr: str, nodes: int = 3) -> tuple[str, list[str]]:
    """The run id of on-every-node's start line (the first line of ``stderr``, asserted
    exactly but for the id) and the lines after it."""
    first, *rest = stderr.splitlines() or [""]
    match = re.fullmatch(r"on-every-node: run ([0-9a-f]{16}|\S+) \(DERIVE_ENV_RUN_ID\) on "
                         rf"{nodes} nodes?", first)
    assert match, stderr
    return match.group(1), rest


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_is_executable_posix_sh() -> None:
    assert os.access(SCRIPT, os.X_OK)
    assert {"sh", "dash", "busybox", "bash-posix"} <= set(SHELLS) or not os.environ.get("CI")
    for shell in SHELLS:
        check = subprocess.run([*_sh(shell), "-n", str(SCRIPT)], capture_output=True, timeout=30)
        assert check.returncode == 0, (shell, check.stderr)


@pytest.mark.parametrize("shell", SHELLS)
def test_arguments_byte_for_byte_locally_and_remotely(tmp_path: Path, shell: str) -> None:
    """After one digest probe per peer (all equal), the command runs on every node, its
    arguments intact, ON_EVERY_NODE=1 in its environment; nothing runs twice."""
    arg = "it's  \"two\"\n$HOME `x` \\ *\n\n"
    proc = _run(tmp_path, shell, "--", "sh", "-c",
                'printf %s "$1" > "out.$NODE"; echo "$ON_EVERY_NODE" > "$LOG/oen.$NODE"',
                "sh", arg)
    assert proc.returncode == 0, proc.stderr
    assert _started(proc.stderr)[1] == []
    assert {h: (tmp_path / f"out.{h}").read_text() for h in HOSTS} == dict.fromkeys(HOSTS, arg)
    assert {h: (tmp_path / f"oen.{h}").read_text() for h in HOSTS} == dict.fromkeys(HOSTS, "1\n")
    assert _calls(tmp_path) == [f"digest {PROBE} sub1", f"digest {PROBE} sub2",
                                f"run {RUN} sub1", f"run {RUN} sub2"]
    assert _calls(tmp_path, "derive-env.calls") == [
        "main1 --dry-run --format digest", "main1 --dry-run --format hosts",
        "sub1 --dry-run --format digest", "sub2 --dry-run --format digest"]


@pytest.mark.parametrize("shell", SHELLS)
def test_the_ssh_clients_input_stays_open_for_dropbear(tmp_path: Path, shell: str) -> None:
    """dropbear hangs the remote command up when the client's input ends: the input of
    every ssh client is open until the command ends, so each node's output and status
    arrive (with `< /dev/null` the remote commands got SIGHUP after the start: 129)."""
    proc = _run(tmp_path, shell, "sh", "-c", 'sleep 1; echo "done $NODE"; exit 0',
                FAKE_DROPBEAR="1")
    assert (proc.returncode, _started(proc.stderr)[1]) == (0, [])
    assert sorted(proc.stdout.splitlines()) == ["done main1", "done sub1", "done sub2"]


# the command records the run id it sees on its node
SEE_RUN_ID = ["sh", "-c", 'echo "$DERIVE_ENV_RUN_ID" > "$LOG/id.$NODE"']


def _seen(tmp_path: Path) -> dict[str, str]:
    return {h: (tmp_path / f"id.{h}").read_text().strip() for h in HOSTS}


@pytest.mark.parametrize("shell", SHELLS)
def test_each_invocation_has_a_fresh_run_id_every_node_shares(
        tmp_path: Path, shell: str) -> None:
    """The hook exported the session's id in every container; each invocation replaces it
    by a fresh one, the same on every node and in every node's digest probe, printed in
    the start line; a second invocation gets another."""
    ids = []
    for _ in range(2):
        for log in tmp_path.glob("*.calls"):
            log.unlink()
        proc = _run(tmp_path, shell, *SEE_RUN_ID, DERIVE_ENV_RUN_ID=SESSION_RUN_ID)
        assert proc.returncode == 0, proc.stderr
        run_id, rest = _started(proc.stderr)
        assert re.fullmatch("[0-9a-f]{16}", run_id), proc.stderr
        assert rest == [], proc.stderr
        assert _seen(tmp_path) == dict.fromkeys(HOSTS, run_id)
        # the one derivation without it (is the set one the hook's?), then every digest
        assert _calls(tmp_path, "run-id.calls") == [
            "main1 digest " + run_id, "main1 digest-facts (unset)", "main1 hosts " + run_id,
            "sub1 digest " + run_id, "sub2 digest " + run_id]
        ids.append(run_id)
    assert ids[0] != ids[1]
    assert SESSION_RUN_ID not in ids


@pytest.mark.parametrize("shell", SHELLS)
def test_a_run_id_without_any_set_is_fresh_too(tmp_path: Path, shell: str) -> None:
    proc = _run(tmp_path, shell, *SEE_RUN_ID)
    assert proc.returncode == 0, proc.stderr
    run_id = _started(proc.stderr)[0]
    assert re.fullmatch("[0-9a-f]{16}", run_id)
    assert _seen(tmp_path) == dict.fromkeys(HOSTS, run_id)
    assert "main1 digest-facts (unset)" not in _calls(tmp_path, "run-id.calls")


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize(("fake", "kept"), [
    ({"ON_EVERY_NODE_RUN_ID": "sweep-7.b"}, "sweep-7.b"),
    # ON_EVERY_NODE_RUN_ID wins, even when it is the session's (the hook's) id
    ({"ON_EVERY_NODE_RUN_ID": SESSION_RUN_ID, "DERIVE_ENV_RUN_ID": "x"}, SESSION_RUN_ID),
    # a DERIVE_ENV_RUN_ID other than the one derived from the session: the user's own
    ({"DERIVE_ENV_RUN_ID": "resume-run-3"}, "resume-run-3")],
    ids=["on-every-node", "on-every-node-wins", "derive-env"])
def test_a_run_id_you_chose_is_kept_on_every_node(
        tmp_path: Path, shell: str, fake: dict[str, str], kept: str) -> None:
    proc = _run(tmp_path, shell, *SEE_RUN_ID, **fake)
    assert (proc.returncode, _started(proc.stderr)) == (0, (kept, [])), proc.stderr
    assert _seen(tmp_path) == dict.fromkeys(HOSTS, kept)
    assert [c for c in _calls(tmp_path, "run-id.calls") if " digest " in c] == [
        f"{h} digest {kept}" for h in HOSTS]


@pytest.mark.parametrize("shell", SHELLS)
def test_a_set_run_id_is_replaced_where_derive_env_draws_a_fresh_one(
        tmp_path: Path, shell: str) -> None:
    """No session id: derive-env draws a fresh id at each start, so the hook's (random)
    one cannot be told from yours: replaced, not reused by every run."""
    proc = _run(tmp_path, shell, *SEE_RUN_ID, DERIVE_ENV_RUN_ID="0123456789abcdef",
                FAKE_NO_SESSION="1")
    assert proc.returncode == 0, proc.stderr
    run_id = _started(proc.stderr)[0]
    assert re.fullmatch("[0-9a-f]{16}", run_id)
    assert run_id != "0123456789abcdef"
    assert _seen(tmp_path) == dict.fromkeys(HOSTS, run_id)


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize(("name", "value", "shown"), [
    ("ON_EVERY_NODE_RUN_ID", "a b", "a b"), ("ON_EVERY_NODE_RUN_ID", "-x", "-x"),
    ("ON_EVERY_NODE_RUN_ID", "x" * 65, "x" * 65), ("DERIVE_ENV_RUN_ID", "r/\x1b", "r/?")])
def test_a_bad_run_id_is_one_usage_error_before_anything_starts(
        tmp_path: Path, shell: str, name: str, value: str, shown: str) -> None:
    proc = _run(tmp_path, shell, "touch", "ran", **{name: value})
    assert (proc.returncode, proc.stderr) == (
        2, f"on-every-node: {name}='{shown}': expected a run id of 1 to 64 characters: "
        "letters, digits, '.', '_' or '-', the first a letter or digit\n")
    assert not (tmp_path / "ran").exists()
    assert not (tmp_path / "ssh.calls").exists()


def test_a_peer_seeing_another_run_id_does_not_start(tmp_path: Path) -> None:
    """The digest covers the run id: a peer whose derive-env sees another one (here: the
    stand-in on sub2 replaces it) differs from this node in that fact; nothing starts."""
    proc = _run(tmp_path, "sh", "touch", "ran", ON_EVERY_NODE_RUN_ID="run1",
                FAKE_OTHER_RUN_ID="sub2")
    assert proc.returncode == 3, proc.stderr
    assert proc.stderr.splitlines()[1:] == [
        "on-every-node: sub2 differs from main1 (this node) in:",
        "on-every-node:     main1: var.DERIVE_ENV_RUN_ID: run1",
        "on-every-node:     sub2: var.DERIVE_ENV_RUN_ID: 0ther"]
    assert not (tmp_path / "ran").exists()


def test_the_dropbear_stand_in_hangs_up_on_the_end_of_input(tmp_path: Path) -> None:
    """The stand-in bites: a client whose input is /dev/null loses the command (SIGHUP)."""
    proc = subprocess.run([str(_bin(tmp_path) / "ssh"), "-tt", "sub1",
                           'sleep 1; echo "done $NODE"'], stdin=subprocess.DEVNULL,
                          env=_env(tmp_path, FAKE_DROPBEAR="1"), capture_output=True,
                          text=True, timeout=30, check=False)
    assert (proc.returncode, proc.stdout) == (128 + signal.SIGHUP, "")


@pytest.mark.parametrize("shell", SHELLS)
def test_remote_command_runs_in_the_same_directory(tmp_path: Path, shell: str) -> None:
    proc = _run(tmp_path, shell, "sh", "-c", 'pwd > "$LOG/pwd.$NODE"')
    assert proc.returncode == 0, proc.stderr
    assert {h: (tmp_path / f"pwd.{h}").read_text().strip() for h in HOSTS} == dict.fromkeys(
        HOSTS, str(tmp_path))


@pytest.mark.parametrize("shell", SHELLS)
def test_keep_going_first_failure_in_canonical_order_and_every_failed_node_named(
    tmp_path: Path, shell: str
) -> None:
    proc = _run(tmp_path, shell, "--keep-going", "sh", "-c",
                'case $NODE in main1) exit 0;; sub1) sleep 1; exit 4;; sub2) exit 3;; esac')
    assert proc.returncode == 4
    assert _started(proc.stderr)[1] == [
        "on-every-node: sub1: exit status 4",
        "on-every-node: sub2: exit status 3",
    ]


@pytest.mark.parametrize("shell", SHELLS)
def test_first_failure_stops_every_other_node(tmp_path: Path, shell: str) -> None:
    """sub2 exits 7 while main1 and sub1 sleep: both are stopped at once (SIGTERM), the
    status is 7 and sub2 is named; the stopped nodes are named as stopped."""
    start = time.monotonic()
    proc = _run(tmp_path, shell, "sh", "-c",
                'echo $$ > "$LOG/pid.$NODE"; [ "$NODE" = sub2 ] && { sleep 1; exit 7; }; '
                "exec sleep 30")
    elapsed = time.monotonic() - start
    assert proc.returncode == 7, proc.stderr
    assert elapsed < 10, elapsed
    assert _started(proc.stderr)[1] == [
        "on-every-node: sub2: exit status 7; stopping the command on every other node "
        "(SIGTERM, SIGKILL after 10s)",
        "on-every-node: main1: exit status 143 (stopped)",
        "on-every-node: sub1: exit status 143 (stopped)",
    ]
    pids = {h: int((tmp_path / f"pid.{h}").read_text()) for h in ("main1", "sub1")}
    assert {h: _alive(p) for h, p in pids.items()} == {"main1": False, "sub1": False}


@pytest.mark.parametrize("shell", SHELLS)
def test_a_command_that_ignores_sigterm_gets_sigkill_after_the_grace(
        tmp_path: Path, shell: str) -> None:
    start = time.monotonic()
    proc = _run(tmp_path, shell, "sh", "-c",
                # sub1 fails only once the others ignore SIGTERM (a loaded machine may
                # otherwise deliver it before their trap is set)
                'echo $$ > "$LOG/pid.$NODE"; if [ "$NODE" = sub1 ]; then '
                'while [ ! -e "$LOG/ready.main1" ] || [ ! -e "$LOG/ready.sub2" ]; do sleep 0.1; '
                'done; exit 1; fi; trap "" TERM; : > "$LOG/ready.$NODE"; '
                "exec sleep 30", ON_EVERY_NODE_GRACE="1")  # sleep ignores SIGTERM too
    elapsed = time.monotonic() - start
    assert proc.returncode == 1, proc.stderr
    assert 1 <= elapsed < 8, elapsed
    assert _started(proc.stderr)[1] == [
        "on-every-node: sub1: exit status 1; stopping the command on every other node "
        "(SIGTERM, SIGKILL after 1s)",
        "on-every-node: main1: exit status 137 (stopped)",
        # over SSH the stop is the terminal's hangup (SIGHUP), which sub2 does not ignore
        "on-every-node: sub2: exit status 143 (stopped)",
    ]
    pids = [int((tmp_path / f"pid.{h}").read_text()) for h in ("main1", "sub2")]
    assert [p for p in pids if _alive(p)] == []


@pytest.mark.parametrize("shell", SHELLS)
def test_usage_errors(tmp_path: Path, shell: str) -> None:
    usage = "usage: on-every-node [--keep-going] [--] COMMAND [ARG]...\n"
    for args in ((), ("--",), ("--keep-going",), ("--keep-going", "--")):
        proc = _run(tmp_path, shell, *args)
        assert (proc.returncode, proc.stderr) == (2, usage), args
    proc = _run(tmp_path, shell, "--keepgoing", "true")
    assert (proc.returncode, proc.stderr) == (2, "on-every-node: unknown option --keepgoing\n"
                                              + usage)
    proc = _run(tmp_path, shell, "--help")
    assert (proc.returncode, proc.stdout) == (0, usage)
    assert _calls(tmp_path, "derive-env.calls") == []


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize(("name", "value", "least"), [
    ("ON_EVERY_NODE_SSH_WAIT", "5s", 1), ("ON_EVERY_NODE_SSH_WAIT", "0", 1),
    ("ON_EVERY_NODE_SSH_WAIT", "-3", 1), ("ON_EVERY_NODE_SSH_WAIT", "1.5", 1),
    ("ON_EVERY_NODE_SSH_WAIT", "12345678901", 1), ("ON_EVERY_NODE_GRACE", "ten", 0)])
def test_a_bad_bound_is_one_error_before_anything_starts(
        tmp_path: Path, shell: str, name: str, value: str, least: int) -> None:
    proc = _run(tmp_path, shell, "touch", "ran", **{name: value})
    assert (proc.returncode, proc.stderr) == (
        2, f"on-every-node: {name}='{value}': expected a whole number of seconds, "
        f"{least} or more (at most 9 digits)\n")
    assert _calls(tmp_path, "derive-env.calls") == []
    assert not (tmp_path / "ran").exists()


@pytest.mark.parametrize("shell", SHELLS)
def test_bounds_with_leading_zeros_or_empty_are_accepted(tmp_path: Path, shell: str) -> None:
    proc = _run(tmp_path, shell, "true", ON_EVERY_NODE_SSH_WAIT="010", ON_EVERY_NODE_GRACE="")
    assert (proc.returncode, _started(proc.stderr)[1]) == (0, [])


@pytest.mark.parametrize("shell", SHELLS)
def test_a_peer_whose_ssh_never_answers_starts_nothing_within_the_bound(
        tmp_path: Path, shell: str) -> None:
    """sub2 refuses every connection: tried (about once a second) until the 2 s bound, then
    the script names it and exits 255; no node ran the command."""
    start = time.monotonic()
    proc = _run(tmp_path, shell, "touch", "ran", FAKE_DOWN="sub2", ON_EVERY_NODE_SSH_WAIT="2")
    elapsed = time.monotonic() - start
    assert proc.returncode == 255
    assert proc.stderr.splitlines() == [
        WAITING.format(2),
        "on-every-node: sub2: SSH did not answer within 2s (ssh: connect to host sub2 port "
        "2200: Connection refused)",
        "on-every-node: nothing was started (ON_EVERY_NODE_SSH_WAIT=2)",
    ]
    # the bound in whole seconds of `date +%s` (up to 1 s less), plus the local digest run
    assert 1 <= elapsed < 10, elapsed
    assert not (tmp_path / "ran").exists()
    calls = _calls(tmp_path)
    probe = "digest -o BatchMode=yes -o ConnectTimeout=2 -o LogLevel=ERROR"
    # retried within the bound: how often depends on the machine's load, so at least once
    assert calls.count(f"{probe} sub2") >= 1, calls
    assert [c for c in calls if not c.endswith("sub2")] == [f"{probe} sub1"]


#: The line once a peer's first probe failed (the wait for its sshd began).
WAITING = ("on-every-node: waiting up to {}s for every node's SSH (ON_EVERY_NODE_SSH_WAIT)")


def _late(line: str, host: str) -> int:
    """The seconds of ``HOST: SSH answered after Ns`` (the rest asserted exactly)."""
    match = re.fullmatch(rf"on-every-node: {host}: SSH answered after (\d+)s", line)
    assert match, line
    return int(match.group(1))


@pytest.mark.parametrize("shell", SHELLS)
def test_a_late_peer_gets_a_waiting_line_and_one_when_it_answers(
        tmp_path: Path, shell: str) -> None:
    """sub2's sshd refuses two probes (about 2 s): one line when the wait begins, one when
    sub2 answers, then the start as usual; sub1, which answered at once, prints nothing."""
    proc = _run(tmp_path, shell, "touch", "ran", FAKE_LATE="sub2")
    assert proc.returncode == 0, proc.stderr
    waiting, answered, *rest = proc.stderr.splitlines()
    assert waiting == WAITING.format(30)
    assert 1 <= _late(answered, "sub2") <= 30
    assert _started("\n".join(rest))[1] == []
    assert (tmp_path / "ran").exists()
    probe = f"digest {PROBE} sub2"
    assert [c for c in _calls(tmp_path) if c.startswith("digest")] == [
        f"digest {PROBE} sub1", probe, probe, probe]


@pytest.mark.parametrize("shell", SHELLS)
def test_two_late_peers_one_waiting_line_and_one_line_each(tmp_path: Path, shell: str) -> None:
    proc = _run(tmp_path, shell, "touch", "ran", FAKE_LATE="sub1 sub2")
    assert proc.returncode == 0, proc.stderr
    waiting, first, second, *rest = proc.stderr.splitlines()
    assert waiting == WAITING.format(30)
    hosts = sorted((first.split()[1], second.split()[1]))
    assert hosts == ["sub1:", "sub2:"]
    for line in (first, second):
        assert 1 <= _late(line, line.split()[1][:-1]) <= 30
    assert _started("\n".join(rest))[1] == []


@pytest.mark.parametrize("shell", SHELLS)
def test_an_attempt_still_hanging_at_the_bound_is_stopped(tmp_path: Path, shell: str) -> None:
    start = time.monotonic()
    proc = _run(tmp_path, shell, "touch", "ran", FAKE_HANG="sub1 sub2",
                ON_EVERY_NODE_SSH_WAIT="1")
    elapsed = time.monotonic() - start
    assert proc.returncode == 255
    assert proc.stderr.splitlines() == [
        "on-every-node: sub1: SSH did not answer within 1s",
        "on-every-node: sub2: SSH did not answer within 1s",
        "on-every-node: nothing was started (ON_EVERY_NODE_SSH_WAIT=1)",
    ]
    assert elapsed < 5, elapsed
    assert not (tmp_path / "ran").exists()
    pids = [int(p) for p in (tmp_path / "hang.pids").read_text().split()]
    assert len(pids) == 2
    assert [p for p in pids if _alive(p)] == []


@pytest.mark.parametrize("shell", SHELLS)
def test_a_node_with_other_facts_is_named_with_the_facts_and_nothing_starts(
        tmp_path: Path, shell: str) -> None:
    _bin(tmp_path)
    (tmp_path / "facts.sub1").write_text(FACTS.replace("29500", "29501"))
    proc = _run(tmp_path, shell, "touch", "ran")
    assert proc.returncode == 3
    assert proc.stderr.splitlines() == [
        "on-every-node: the nodes do not agree on the job (derive-env --dry-run --format "
        "digest); nothing was started",
        "on-every-node: sub1 differs from main1 (this node) in:",
        "on-every-node:     main1: master_port: 29500",
        "on-every-node:     sub1: master_port: 29501",
    ]
    assert not (tmp_path / "ran").exists()
    assert _calls(tmp_path) == [f"digest {PROBE} sub1", f"digest {PROBE} sub2",
                                f"facts {PROBE} sub1"]


@pytest.mark.parametrize("shell", SHELLS)
def test_facts_only_one_node_has_and_two_differing_nodes(tmp_path: Path, shell: str) -> None:
    _bin(tmp_path)
    (tmp_path / "facts.sub1").write_text(FACTS + "world_size: 6\n")
    (tmp_path / "facts.sub2").write_text(FACTS.replace("main1,sub1,sub2", "main1,sub2,sub1"))
    proc = _run(tmp_path, shell, "touch", "ran")
    assert proc.returncode == 3
    assert proc.stderr.splitlines()[1:] == [
        "on-every-node: sub1 differs from main1 (this node) in:",
        "on-every-node:     main1: world_size: (absent)",
        "on-every-node:     sub1: world_size: 6",
        "on-every-node: sub2 differs from main1 (this node) in:",
        "on-every-node:     main1: nodes: main1,sub1,sub2",
        "on-every-node:     sub2: nodes: main1,sub2,sub1",
    ]


@pytest.mark.parametrize("shell", SHELLS)
def test_derive_env_failing_on_a_peer_is_named_with_its_message(
        tmp_path: Path, shell: str) -> None:
    proc = _run(tmp_path, shell, "touch", "ran", FAKE_FAIL="sub2")
    assert proc.returncode == 4
    assert proc.stderr.splitlines() == [
        "on-every-node: sub2: derive-env --dry-run --format digest failed there "
        "(exit status 4):",
        "on-every-node: sub2: derive-env: error: label x on sub2",
        "on-every-node: nothing was started",
    ]
    assert not (tmp_path / "ran").exists()
    proc = _run(tmp_path, shell, "touch", "ran", FAKE_FAIL="main1")
    assert proc.returncode == 4
    assert proc.stderr.splitlines() == [
        "derive-env: error: label x on main1",
        "on-every-node: main1 (this node): derive-env --dry-run --format digest failed "
        "(exit status 4)",
    ]
    assert not (tmp_path / "ran").exists()


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize(("sig", "status"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)],
                         ids=["SIGTERM", "SIGINT"])
def test_a_signal_stops_every_node(tmp_path: Path, shell: str, sig: signal.Signals,
                                   status: int) -> None:
    proc = subprocess.Popen(
        [*_sh(shell), str(SCRIPT), "sh", "-c", 'echo $$ > "$LOG/pid.$NODE"; exec sleep 30'],
        env=_env(tmp_path), cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 20
    while not all((tmp_path / f"pid.{h}").exists() for h in HOSTS):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(0.2)  # the pid files are written before the exec
    pids = [int((tmp_path / f"pid.{h}").read_text()) for h in HOSTS]
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=20)
    assert (proc.returncode, _started(err)[1]) == (status, [])
    assert [p for p in pids if _alive(p)] == []


@pytest.mark.parametrize("shell", SHELLS)
def test_a_signal_during_the_probe_starts_nothing(tmp_path: Path, shell: str) -> None:
    proc = subprocess.Popen([*_sh(shell), str(SCRIPT), "touch", "ran"],
                            env=_env(tmp_path, FAKE_HANG="sub1"), cwd=tmp_path,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 20
    while not (tmp_path / "hang.pids").exists():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    start = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=20)
    assert (proc.returncode, err) == (143, "")
    assert time.monotonic() - start < 5
    assert not (tmp_path / "ran").exists()
    assert [p for p in map(int, (tmp_path / "hang.pids").read_text().split()) if _alive(p)] == []


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
    """derive-env lists ``localhost`` for a single-container session: no SSH, no digest."""
    proc = _run(tmp_path, shell, "sh", "-c", 'echo "$NODE $ON_EVERY_NODE" > "$LOG/ran"',
                FAKE_HOSTS="localhost")
    assert (proc.returncode, _started(proc.stderr, nodes=1)[1]) == (0, [])
    assert (tmp_path / "ran").read_text() == "main1 1\n"
    assert not (tmp_path / "ssh.calls").exists()
    assert _calls(tmp_path, "derive-env.calls") == ["main1 --dry-run --format hosts"]


@pytest.mark.parametrize("shell", SHELLS)
def test_this_container_matched_case_insensitively(tmp_path: Path, shell: str) -> None:
    """BACKENDAI_CLUSTER_HOST ``Main1`` is the listed ``main1`` (derive-env matches HOST so):
    it runs locally, not over SSH to itself."""
    proc = _run(tmp_path, shell, "sh", "-c", 'echo "$NODE" > "$LOG/ran.$NODE"',
                BACKENDAI_CLUSTER_HOST="Main1", FAKE_HOSTS="main1 SUB1")
    assert (proc.returncode, _started(proc.stderr, nodes=2)[1]) == (0, [])
    assert (tmp_path / "ran.main1").read_text() == "main1\n"
    assert (tmp_path / "ran.SUB1").read_text() == "SUB1\n"
    assert [c.rsplit(" ", 1)[1] for c in _calls(tmp_path)] == ["SUB1", "SUB1"]


def _isolated_run(isolated: list[str], tmp_path: Path, shell: str, *, fallback: str
                  ) -> subprocess.CompletedProcess[str]:
    """Run the script with no derive-env on PATH and an /opt holding only ``fallback`` (when
    not empty) as /opt/derive-env/bin/derive-env (private mount namespace)."""
    bin_dir = _bin(tmp_path)
    real = bin_dir.parent / "derive-env-fake"
    (bin_dir / "derive-env").rename(real)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "BACKENDAI_CLUSTER_HOST": "main1",
           "LOG": str(tmp_path), "NODE": "main1", "FALLBACK": fallback and str(real),
           "SESSION_RUN_ID": SESSION_RUN_ID}
    return subprocess.run(
        [*isolated, *_sh(shell), str(SCRIPT), "sh", "-c", 'echo "$NODE" >> "$LOG/ran"'],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=30, check=False)


@pytest.mark.parametrize("shell", SHELLS)
def test_derive_env_from_opt_when_not_on_path(
        isolated: list[str], tmp_path: Path, shell: str) -> None:
    """The packaged install (/opt/derive-env/bin/derive-env), found as bootstrap.sh finds it,
    here and (for the digest) on the peers."""
    proc = _isolated_run(isolated, tmp_path, shell, fallback="yes")
    assert proc.returncode not in (90, 91), proc.stderr  # the isolation itself failed
    assert (proc.returncode, _started(proc.stderr)[1]) == (0, [])
    assert sorted((tmp_path / "ran").read_text().splitlines()) == ["main1", "sub1", "sub2"]
    assert _calls(tmp_path, "derive-env.calls") == [
        "main1 --dry-run --format digest", "main1 --dry-run --format hosts",
        "sub1 --dry-run --format digest", "sub2 --dry-run --format digest"]


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
                                              ("9999999999", "9999999999"),
                                              ("3\x1b[2J", "3?[2J")])
def test_a_bad_ssh_wait_is_one_usage_error_before_any_node(tmp_path: Path, shell: str,
                                                           value: str, shown: str) -> None:
    """Issue 15, item 7: a non-numeric ON_EVERY_NODE_SSH_WAIT failed once per peer."""
    proc = _run(tmp_path, shell, "touch", "ran", ON_EVERY_NODE_SSH_WAIT=value)
    assert (proc.returncode, proc.stderr) == (
        2, f"on-every-node: ON_EVERY_NODE_SSH_WAIT='{shown}': expected a whole number of "
        "seconds, 1 or more (at most 9 digits)\n")
    assert not (tmp_path / "ran").exists()
    assert not (tmp_path / "ssh.calls").exists()


@pytest.mark.parametrize("shell", SHELLS)
def test_a_bound_of_130000_zeros_is_refused_at_once(tmp_path: Path, shell: str) -> None:
    """Found by the adversarial trial: stripping the zeros one by one took 14 s in dash."""
    value = "0" * 130000 + "5"
    start = time.monotonic()
    proc = _run(tmp_path, shell, "touch", "ran", ON_EVERY_NODE_GRACE=value)
    assert time.monotonic() - start < 5
    assert (proc.returncode, proc.stderr) == (
        2, f"on-every-node: ON_EVERY_NODE_GRACE='{value}': expected a whole number of seconds, "
        "0 or more (at most 9 digits)\n")
    assert not (tmp_path / "ran").exists()
