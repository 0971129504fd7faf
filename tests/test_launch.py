"""The exec path (contract section 3): same PID, signals, exit codes, argv, limits.

Each real exec runs in a subprocess (``python -m derive_env`` or the console script) with an
environment built from scratch and DERIVE_ENV_LABELS_FILE pointing at a file of the test.
In-process tests replace ``os.execve`` with a fake, so nothing can replace the runner.
Every wait is bounded.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from derive_env import launch
from derive_env.errors import CommandNotExecutable, CommandNotFound, EnvironmentTooLarge
from derive_env.launch import (
    ARG_MAX_MARGIN,
    FAN_OUT,
    MAX_ARG_STRLEN,
    check_limits,
    find_command,
    main1_hint,
)
from helpers import console_script

FW = "ai.backend.distributed.frameworks"
LABELS_VAR = "DERIVE_ENV_LABELS_FILE"
PY = sys.executable
TIMEOUT = 60

# --------------------------------------------------------------------------- helpers



def write_labels(path: Path, labels: dict[str, str]) -> Path:
    path.write_text(json.dumps(labels), encoding="utf-8")
    return path


Flavour = Callable[[Path], tuple[list[str], dict[str, str]]]


def _module_fast(tmp: Path) -> tuple[list[str], dict[str, str]]:
    """python -m derive_env -- CMD: not opted in, no click."""
    labels = write_labels(tmp / "labels-none.json", {})
    return [PY, "-m", "derive_env", "--"], {"PATH": os.environ["PATH"], LABELS_VAR: str(labels)}


def _script_fast_opted_in(tmp: Path) -> tuple[list[str], dict[str, str]]:
    """derive-env CMD: opted in by the labels file, single container, no click."""
    labels = write_labels(tmp / "labels-pytorch.json", {FW: "pytorch"})
    return [console_script()], {"PATH": os.environ["PATH"], LABELS_VAR: str(labels)}


def _script_click_opted_in(tmp: Path) -> tuple[list[str], dict[str, str]]:
    """derive-env --label ... -- CMD: opted in by --label in a 2-node session, via click."""
    labels = write_labels(tmp / "labels-none.json", {})
    env = {
        "PATH": os.environ["PATH"], LABELS_VAR: str(labels),
        "BACKENDAI_CLUSTER_SIZE": "2", "BACKENDAI_CLUSTER_HOSTS": "sub1,main1",
        "BACKENDAI_CLUSTER_HOST": "sub1", "BACKENDAI_CLUSTER_LOCAL_RANK": "1",
    }
    return [console_script(), "--label", f"{FW}=pytorch,tensorflow", "--"], env


def _module_click(tmp: Path) -> tuple[list[str], dict[str, str]]:
    """python -m derive_env --labels-file EMPTY -- CMD: not opted in, via click."""
    labels = write_labels(tmp / "labels-none.json", {})
    return (
        [PY, "-m", "derive_env", "--labels-file", str(labels), "--"],
        {"PATH": os.environ["PATH"], LABELS_VAR: str(labels)},
    )


FLAVOURS: dict[str, Flavour] = {
    "module-fast": _module_fast,
    "script-fast-opted-in": _script_fast_opted_in,
    "script-click-opted-in": _script_click_opted_in,
    "module-click": _module_click,
}
OPTED_IN = {"script-fast-opted-in", "script-click-opted-in"}


def _clean_signals() -> None:
    """preexec_fn: start the shim with every signal at its default and nothing blocked.

    Then any ignored or blocked signal seen after the exec was left by the shim itself,
    not inherited from whatever started the test run (a background job ignores SIGINT).
    """
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    for signum in signal.valid_signals():
        if signum in (signal.SIGKILL, signal.SIGSTOP):
            continue
        with contextlib.suppress(OSError, ValueError):
            signal.signal(signum, signal.SIG_DFL)


def run(
    argv: Sequence[str | bytes], env: dict[str, str], **kwargs: object
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        list(argv), env=env, capture_output=True, timeout=TIMEOUT, check=False,
        preexec_fn=_clean_signals, **kwargs,  # type: ignore[arg-type]
    )


def read_until(proc: subprocess.Popen[bytes], token: bytes, timeout: float) -> bytes:
    """Read proc.stdout until ``token`` appears; fail after ``timeout`` seconds."""
    assert proc.stdout is not None
    data = b""
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        while token not in data:
            left = deadline - time.monotonic()
            if left <= 0:
                pytest.fail(f"no {token!r} within {timeout} s; got {data!r}")
            if selector.select(left):
                chunk = os.read(proc.stdout.fileno(), 4096)
                if not chunk:
                    pytest.fail(f"stdout closed before {token!r}; got {data!r}")
                data += chunk
    return data


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Kill our own child if a test left it running."""
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=TIMEOUT)


def err_text(result: subprocess.CompletedProcess[bytes]) -> str:
    return result.stderr.decode("utf-8", "backslashreplace")


@pytest.fixture(params=list(FLAVOURS))
def flavour(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[list[str], dict[str, str]]:
    return FLAVOURS[request.param](tmp_path)


# --------------------------------------------------------------------------- exit status


@pytest.mark.parametrize("code", [0, 1, 2, 7, 126, 127, 255])
def test_exit_status_is_passed_through(
    flavour: tuple[list[str], dict[str, str]], code: int
) -> None:
    prefix, env = flavour
    result = run([*prefix, "sh", "-c", f"exit {code}"], env)
    assert result.returncode == code
    assert result.stderr == b""


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM])
def test_child_killing_itself_is_seen_by_the_parent(
    flavour: tuple[list[str], dict[str, str]], signum: signal.Signals
) -> None:
    # Same process: the parent sees the signal itself, not an exit status from a wrapper.
    prefix, env = flavour
    code = f"import os, signal; os.kill(os.getpid(), {int(signum)}); signal.pause()"
    result = run([*prefix, PY, "-c", code], env)
    assert result.returncode == -signum


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM])
def test_shell_killing_itself(flavour: tuple[list[str], dict[str, str]], signum: int) -> None:
    prefix, env = flavour
    result = run([*prefix, "sh", "-c", f"kill -{int(signum)} $$; sleep 5"], env)
    assert result.returncode == -signum


# --------------------------------------------------------------------------- same process


PRINT_PID = "import os; print(os.getpid(), os.getppid(), flush=True)"


def test_same_pid(flavour: tuple[list[str], dict[str, str]]) -> None:
    prefix, env = flavour
    proc = subprocess.Popen(
        [*prefix, PY, "-c", PRINT_PID], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        preexec_fn=_clean_signals,
    )
    try:
        out, err = proc.communicate(timeout=TIMEOUT)
    finally:
        stop(proc)
    assert proc.returncode == 0, err
    pid, ppid = (int(x) for x in out.split())
    assert pid == proc.pid
    assert ppid == os.getpid()


def test_same_pid_shell(flavour: tuple[list[str], dict[str, str]]) -> None:
    prefix, env = flavour
    proc = subprocess.Popen([*prefix, "sh", "-c", "echo $$"], env=env, stdout=subprocess.PIPE,
                            preexec_fn=_clean_signals)
    try:
        out, _ = proc.communicate(timeout=TIMEOUT)
    finally:
        stop(proc)
    assert int(out) == proc.pid


def _status_fields(status: bytes) -> dict[str, str]:
    fields = {}
    for line in status.decode().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return fields


def _baseline_signals() -> tuple[int, int]:
    """SigIgn and SigBlk of ``cat`` started exactly like the shim, without the shim.

    Python cannot reset everything: glibc reserves the real-time signals 32 and 33, so a
    test runner that inherited them ignored passes that on. The shim must add nothing.
    """
    result = run(["cat", "/proc/self/status"], {"PATH": os.environ["PATH"]})
    fields = _status_fields(result.stdout)
    return int(fields["SigIgn"], 16), int(fields["SigBlk"], 16)


#: Bits of SIGPIPE and SIGXFSZ in /proc/PID/status masks (signal n is bit n - 1).
_PYTHON_IGNORED = (1 << (signal.SIGPIPE - 1)) | (1 << (signal.SIGXFSZ - 1))


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc")
def test_nothing_ignored_or_blocked_after_exec(flavour: tuple[list[str], dict[str, str]]) -> None:
    # cat itself changes no disposition: what it shows is what the shim left. CPython ignores
    # SIGPIPE and SIGXFSZ at start-up; an ignored signal survives exec unless reset.
    prefix, env = flavour
    cat = shutil.which("cat", path=env["PATH"]) or "/bin/cat"
    result = run([*prefix, cat, "/proc/self/status"], env)
    assert result.returncode == 0, err_text(result)
    fields = _status_fields(result.stdout)
    ignored, blocked = _baseline_signals()
    assert ignored & _PYTHON_IGNORED == 0  # the control itself
    assert int(fields["SigIgn"], 16) == ignored, fields["SigIgn"]
    assert int(fields["SigBlk"], 16) == blocked == 0, fields["SigBlk"]
    assert int(fields["SigPnd"], 16) == 0


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc")
def test_nothing_ignored_after_exec_on_warn_path(tmp_path: Path) -> None:
    labels = write_labels(tmp_path / "labels.json",
                          {FW: "pytorch", "ai.backend.distributed.on-error": "warn"})
    env = {"PATH": os.environ["PATH"], LABELS_VAR: str(labels),
           "BACKENDAI_CLUSTER_SIZE": "3", "BACKENDAI_CLUSTER_HOSTS": "main1"}
    result = run([console_script(), "cat", "/proc/self/status"], env)
    assert result.returncode == 0
    fields = _status_fields(result.stdout)
    assert (int(fields["SigIgn"], 16), int(fields["SigBlk"], 16)) == _baseline_signals()


def test_sigpipe_has_its_default_action(flavour: tuple[list[str], dict[str, str]]) -> None:
    # `derive-env -- yes | head -1`: yes must die of SIGPIPE, not print "Broken pipe".
    prefix, env = flavour
    yes = shutil.which("yes", path=env["PATH"])
    if yes is None:
        pytest.skip("no `yes` on PATH")
    proc = subprocess.Popen([*prefix, yes], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, preexec_fn=_clean_signals)
    try:
        read_until(proc, b"y\n", TIMEOUT)
        assert proc.stdout is not None
        proc.stdout.close()
        proc.wait(timeout=TIMEOUT)
        assert proc.stderr is not None
        err = proc.stderr.read()
    finally:
        stop(proc)
    assert proc.returncode == -signal.SIGPIPE, err
    assert b"Broken pipe" not in err


TRAP = 'trap "echo got-term; exit 42" TERM; echo ready; while :; do sleep 0.1; done'


def test_sigterm_reaches_the_command(flavour: tuple[list[str], dict[str, str]]) -> None:
    prefix, env = flavour
    proc = subprocess.Popen(
        [*prefix, "sh", "-c", TRAP], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        preexec_fn=_clean_signals, start_new_session=True,
    )
    try:
        read_until(proc, b"ready\n", TIMEOUT)
        proc.send_signal(signal.SIGTERM)
        read_until(proc, b"got-term\n", 20)
        assert proc.wait(timeout=20) == 42
    finally:
        stop(proc)


# --------------------------------------------------------------------------- argv


ARGS: list[str | bytes] = [
    "plain", "with space", "", "  lead and trail  ", "--dry-run", "--", "--label", "x=y",
    "-h", "--help", "--version", "quote'\"$`\\!*?[a]~", "tab\there", "new\nline", "ünïcödé 字",
    b"\xff\xfe\x80raw-bytes", b"latin1-caf\xe9", "",
]
PRINT_ARGV = "import os, sys; print(' '.join(os.fsencode(a).hex() for a in sys.argv[1:]))"


def _hexes(args: Sequence[str | bytes]) -> str:
    return " ".join(os.fsencode(a).hex() for a in args)


def test_argv_byte_for_byte(flavour: tuple[list[str], dict[str, str]]) -> None:
    prefix, env = flavour
    result = run([*prefix, PY, "-c", PRINT_ARGV, *ARGS], env)
    assert result.returncode == 0, err_text(result)
    assert result.stdout.decode().rstrip("\n") == _hexes(ARGS)


def test_argv_without_double_dash_fast_path(tmp_path: Path) -> None:
    prefix, env = _module_fast(tmp_path)
    assert prefix[-1] == "--"
    result = run([*prefix[:-1], PY, "-c", PRINT_ARGV, *ARGS], env)
    assert result.returncode == 0, err_text(result)
    assert result.stdout.decode().rstrip("\n") == _hexes(ARGS)


def test_argv0_is_kept(tmp_path: Path) -> None:
    prefix, env = _script_fast_opted_in(tmp_path)
    result = run([*prefix, "sh", "-c", 'echo "$0|$1|$2"', "zero", "", "two"], env)
    assert result.stdout == b"zero||two\n"


# --------------------------------------------------------------------------- environment

# Read /proc/self/environ, not os.environ: the child is Python too, and its own locale
# coercion would add LC_CTYPE to os.environ.
PRINT_ENV = [
    PY, "-c",
    "import json, os; data = open('/proc/self/environ', 'rb').read();"
    "print(json.dumps(dict(os.fsdecode(e).partition('=')[::2] for e in data.split(b'\\0') if e)))",
]


def test_opted_in_command_gets_derived_and_input_variables(tmp_path: Path) -> None:
    prefix, env = _script_click_opted_in(tmp_path)
    env = {**env, "USER_VALUE": "with 'quotes' and $dollar", "MASTER_PORT": "1234"}
    result = run([*prefix, *PRINT_ENV], env)
    assert result.returncode == 0, err_text(result)
    got = json.loads(result.stdout)
    assert got["USER_VALUE"] == "with 'quotes' and $dollar"
    assert got["MASTER_ADDR"] == got["PET_MASTER_ADDR"] == "main1"
    assert got["MASTER_PORT"] == got["PET_MASTER_PORT"] == "1234"
    assert got["NODE_RANK"] == got["PET_NODE_RANK"] == "1"
    assert got["PET_NNODES"] == "2"
    assert json.loads(got["TF_CONFIG"]) == {
        "cluster": {"worker": ["main1:2222", "sub1:2222"]}, "task": {"type": "worker", "index": 1},
    }
    # nothing else was added (the environment is the input plus the derived variables; no
    # LC_CTYPE=C.UTF-8 from CPython's locale coercion either)
    derived = {"MASTER_ADDR", "NODE_RANK", "PET_NNODES", "PET_NODE_RANK", "PET_MASTER_ADDR",
               "PET_MASTER_PORT", "TF_CONFIG", "DERIVE_ENV_RUN_ID"}
    assert set(got) - set(env) == derived


def test_not_opted_in_command_gets_the_environment_unchanged(tmp_path: Path) -> None:
    prefix, env = _module_fast(tmp_path)
    env = {**env, "BACKENDAI_CLUSTER_SIZE": "2", "BACKENDAI_CLUSTER_HOSTS": "main1,sub1",
           "BACKENDAI_CLUSTER_HOST": "sub1", "ODD": "a\tb c"}
    result = run([*prefix, *PRINT_ENV], env)
    # Under the C locale (no LANG, as in many images) CPython coerces the locale and puts
    # LC_CTYPE=C.UTF-8 into os.environ; the command must not inherit that.
    assert json.loads(result.stdout) == env


# --------------------------------------------------------------------------- lookup errors


def test_command_not_found_is_127_naming_the_command(flavour: tuple[list[str], dict[str, str]],
                                                     tmp_path: Path) -> None:
    prefix, env = flavour
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    env = {**env, "PATH": f"{tmp_path / 'a'}:{tmp_path / 'b'}:/usr/bin:/bin"}
    result = run([*prefix, "no-such-command-zz9", "arg"], env)
    err = err_text(result)
    assert result.returncode == 127
    assert result.stdout == b""
    assert "Traceback" not in err
    assert err.startswith("derive-env: error: no-such-command-zz9: command not found")
    assert "/bin/no-such-command-zz9" not in err  # not the last PATH candidate
    assert err.endswith("derive-env: note: the command was not run (exit 127)\n")


def test_empty_command_name_is_127(flavour: tuple[list[str], dict[str, str]]) -> None:
    prefix, env = flavour
    result = run([*prefix, "", "arg"], env)
    err = err_text(result)
    assert result.returncode == 127
    assert "command not found" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("name", ["./no-such-file", "/nonexistent/dir/cmd"])
def test_command_path_not_found_is_127(tmp_path: Path, name: str) -> None:
    prefix, env = _script_fast_opted_in(tmp_path)
    result = run([*prefix, name], env, cwd=tmp_path)
    assert result.returncode == 127
    assert err_text(result) == (
        f"derive-env: error: {name}: command not found (no such file)\n"
        "derive-env: note: the command was not run (exit 127)\n"
    )


def test_file_without_execute_bit_on_path_is_126(
    flavour: tuple[list[str], dict[str, str]], tmp_path: Path
) -> None:
    prefix, env = flavour
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "mycmd"
    script.write_text("#!/bin/sh\necho ran\n")
    script.chmod(0o644)
    env = {**env, "PATH": f"{bin_dir}:/usr/bin:/bin"}
    result = run([*prefix, "mycmd"], env)
    err = err_text(result)
    assert result.returncode == 126, err
    assert result.stdout == b""
    assert "Traceback" not in err
    assert err.startswith(
        f"derive-env: error: mycmd: permission denied ({script} is not executable)"
    )


def test_file_without_execute_bit_given_as_path_is_126(tmp_path: Path) -> None:
    prefix, env = _module_fast(tmp_path)
    script = tmp_path / "mycmd"
    script.write_text("#!/bin/sh\necho ran\n")
    script.chmod(0o644)
    result = run([*prefix, str(script)], env)
    assert result.returncode == 126
    assert err_text(result).startswith(
        f"derive-env: error: {script}: permission denied (not executable): chmod +x {script}\n"
    )


def test_a_python_script_without_execute_bit_says_how_to_run_it(tmp_path: Path) -> None:
    """The fix in the message, with the exit code a shell gives (126)."""
    prefix, env = _module_fast(tmp_path)
    script = tmp_path / "x.py"
    script.write_text("print(1)\n")
    script.chmod(0o644)
    result = run([*prefix, str(script)], env)
    assert result.returncode == 126
    assert err_text(result).startswith(
        f"derive-env: error: {script}: permission denied (not executable): chmod +x {script}, "
        f"or run it as: python {script}\n")


def test_directory_given_as_path_is_126(flavour: tuple[list[str], dict[str, str]],
                                        tmp_path: Path) -> None:
    prefix, env = flavour
    result = run([*prefix, str(tmp_path)], env)
    assert result.returncode == 126
    assert err_text(result) == (
        f"derive-env: error: {tmp_path}: is a directory\n"
        "derive-env: note: the command was not run (exit 126)\n"
    )


def test_binary_of_wrong_format_is_126(tmp_path: Path) -> None:
    prefix, env = _script_fast_opted_in(tmp_path)
    garbage = tmp_path / "garbage"
    garbage.write_bytes(b"\x7fELF\x02\x01\x01" + b"\x00" * 32)
    garbage.chmod(0o755)
    result = run([*prefix, str(garbage)], env)
    assert result.returncode == 126
    # A binary: no hint to add a #! line.
    assert err_text(result) == (
        f"derive-env: error: {garbage}: Exec format error ({garbage})\n"
        "derive-env: note: the command was not run (exit 126)\n"
    )


def test_script_without_shebang_is_126_with_a_hint(tmp_path: Path) -> None:
    prefix, env = _module_fast(tmp_path)
    script = tmp_path / "no-shebang.sh"
    script.write_text("echo hi\n")
    script.chmod(0o755)
    result = run([*prefix, str(script)], env)
    assert result.returncode == 126
    assert err_text(result) == (
        f"derive-env: error: {script}: Exec format error (no #! line? run it as: sh SCRIPT) "
        f"({script})\n"
        "derive-env: note: the command was not run (exit 126)\n"
    )


@pytest.mark.parametrize("kind", ["file-without-x", "directory"])
def test_interpreter_not_executable_is_126_naming_it(tmp_path: Path, kind: str) -> None:
    prefix, env = _script_fast_opted_in(tmp_path)
    if kind == "directory":
        interpreter = tmp_path / "interp-dir"
        interpreter.mkdir()
    else:
        interpreter = tmp_path / "interp"
        interpreter.write_text("#!/bin/sh\necho interpreted\n")
        interpreter.chmod(0o644)  # no x bit for anyone: EACCES even for root
    script = tmp_path / "script"
    script.write_text(f"#!{interpreter}\necho hi\n")
    script.chmod(0o755)
    result = run([*prefix, str(script)], env)
    assert result.returncode == 126
    assert err_text(result) == (
        f"derive-env: error: {script}: bad interpreter '{interpreter}' in its #! line, not "
        f"executable ({script})\n"
        "derive-env: note: the command was not run (exit 126)\n"
    )


@pytest.mark.parametrize(
    "shebang", ["#!/nonexistent/interpreter", "#!/usr/bin/nopython -u", "#! /usr/bin/nopython"]
)
def test_missing_interpreter_is_127_like_shells(tmp_path: Path, shebang: str) -> None:
    prefix, env = _script_fast_opted_in(tmp_path)
    script = tmp_path / "bad-interpreter"
    script.write_text(f"{shebang}\necho hi\n")
    script.chmod(0o755)
    interpreter = shebang[2:].split()[0]
    result = run([*prefix, str(script)], env)
    assert result.returncode == 127
    assert err_text(result) == (
        f"derive-env: error: {script}: bad interpreter '{interpreter}' in its #! "
        f"line, not found ({script})\n"
        "derive-env: note: the command was not run (exit 127)\n"
    )


def test_crlf_shebang_is_127_with_a_hint(tmp_path: Path) -> None:
    prefix, env = _module_fast(tmp_path)
    script = tmp_path / "dos-script"
    script.write_bytes(b"#!/bin/sh\r\necho hi\r\n")
    script.chmod(0o755)
    result = run([*prefix, str(script)], env)
    assert result.returncode == 127
    assert err_text(result).startswith(
        f"derive-env: error: {script}: bad interpreter '/bin/sh' in its #! line, not found (the "
        f"line ends in \\r: CRLF line endings) ({script})\n"
    )


def test_path_lookup_skips_non_executable_and_directories_like_a_shell(tmp_path: Path) -> None:
    prefix, env = _script_click_opted_in(tmp_path)
    first, second, third = (tmp_path / d for d in ("first", "second", "third"))
    for d in (first, second, third):
        d.mkdir()
    (first / "mycmd").write_text("#!/bin/sh\necho first\n")  # not executable
    (second / "mycmd").mkdir()  # a directory
    (third / "mycmd").write_text("#!/bin/sh\necho third\n")
    (third / "mycmd").chmod(0o755)
    env = {**env, "PATH": f"{first}:{second}:{third}:/usr/bin:/bin"}
    result = run([*prefix, "mycmd"], env)
    assert (result.returncode, result.stdout) == (0, b"third\n"), err_text(result)


def test_path_lookup_uses_the_exec_environments_path(tmp_path: Path) -> None:
    # The shim's own PATH has a "wrong" mycmd; the environment being exec'd (from --env-file)
    # has the right one. The lookup must use the latter.
    right, wrong = tmp_path / "right", tmp_path / "wrong"
    for d, word in ((right, "right"), (wrong, "wrong")):
        d.mkdir()
        (d / "mycmd").write_text(f"#!/bin/sh\necho {word} \"$PATH\"\n")
        (d / "mycmd").chmod(0o755)
    labels = write_labels(tmp_path / "labels.json", {FW: "pytorch"})
    env_file = tmp_path / "in.env"
    env_file.write_text(f"{LABELS_VAR}={labels}\nPATH={right}:/usr/bin:/bin\n")
    env = {"PATH": f"{wrong}:{os.environ['PATH']}", LABELS_VAR: str(labels)}
    result = run([console_script(), "--env-file", str(env_file), "--", "mycmd"], env)
    assert result.returncode == 0, err_text(result)
    assert result.stdout == f"right {right}:/usr/bin:/bin\n".encode()


def test_path_lookup_does_not_use_the_shims_path(tmp_path: Path) -> None:
    only_here = tmp_path / "only-here"
    only_here.mkdir()
    (only_here / "mycmd").write_text("#!/bin/sh\necho found\n")
    (only_here / "mycmd").chmod(0o755)
    labels = write_labels(tmp_path / "labels.json", {})
    env_file = tmp_path / "in.env"
    env_file.write_text(f"{LABELS_VAR}={labels}\nPATH=/usr/bin:/bin\n")
    env = {"PATH": f"{only_here}:{os.environ['PATH']}", LABELS_VAR: str(labels)}
    result = run([console_script(), "--env-file", str(env_file), "--", "mycmd"], env)
    assert result.returncode == 127
    assert err_text(result).startswith(
        "derive-env: error: mycmd: command not found in PATH=/usr/bin:/bin\n"
    )


def test_an_env_file_without_path_says_the_default_path_was_searched(tmp_path: Path) -> None:
    """The file is the whole environment: without PATH the command is looked up in the
    default PATH, and the message says so (a user read PATH=/bin:/usr/bin as a mistake)."""
    labels = write_labels(tmp_path / "labels.json", {})
    env_file = tmp_path / "in.env"
    env_file.write_text(f"{LABELS_VAR}={labels}\n")
    env = {"PATH": os.environ["PATH"], LABELS_VAR: str(labels)}
    result = run([console_script(), "--env-file", str(env_file), "--", "no-such-cmd"], env)
    assert result.returncode == 127
    assert err_text(result).startswith(
        f"derive-env: error: no-such-cmd: command not found in PATH={os.defpath} (the default "
        "PATH: the command's environment, with --env-file the file's, sets none)\n")


def test_path_from_process_environment_without_env_file(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "mycmd").write_text("#!/bin/sh\necho found\n")
    (bin_dir / "mycmd").chmod(0o755)
    prefix, env = _module_fast(tmp_path)
    result = run([*prefix, "mycmd"], {**env, "PATH": f"{bin_dir}:/usr/bin:/bin"})
    assert (result.returncode, result.stdout) == (0, b"found\n")


# --------------------------------------------------------------------------- find_command


def _executable(path: Path) -> Path:
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


def test_find_command_in_path(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    _executable(b / "tool")
    assert find_command("tool", f"{a}:{b}") == str(b / "tool")


def test_find_command_first_match_wins(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    _executable(a / "tool")
    _executable(b / "tool")
    assert find_command("tool", f"{a}:{b}") == str(a / "tool")


def test_find_command_empty_entry_is_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _executable(tmp_path / "tool")
    monkeypatch.chdir(tmp_path)
    assert find_command("tool", f"{tmp_path / 'none'}::") == os.path.join(".", "tool")


def test_find_command_unset_path_uses_defpath() -> None:
    sh = find_command("sh", None)
    assert os.path.dirname(sh) in os.defpath.split(os.pathsep)


def test_find_command_unset_path_names_the_default(tmp_path: Path) -> None:
    """An environment without PATH (an --env-file that sets none) is searched in
    os.defpath, and the message says that PATH is the default, not the environment's."""
    with pytest.raises(CommandNotFound) as info:
        find_command("no-such-tool-here", None)
    assert str(info.value) == (
        f"no-such-tool-here: command not found in PATH={os.defpath} (the default PATH: the "
        "command's environment, with --env-file the file's, sets none)")


def test_find_command_with_slash_is_used_as_is(tmp_path: Path) -> None:
    tool = _executable(tmp_path / "tool")
    assert find_command(str(tool), "") == str(tool)


def test_find_command_not_found_message(tmp_path: Path) -> None:
    with pytest.raises(CommandNotFound) as info:
        find_command("tool", f"{tmp_path}:/nonexistent")
    assert str(info.value) == f"tool: command not found in PATH={tmp_path}:/nonexistent"
    assert info.value.exit_code == 127


def test_find_command_not_executable_message(tmp_path: Path) -> None:
    (tmp_path / "tool").write_text("x")
    (tmp_path / "tool").chmod(0o644)
    with pytest.raises(CommandNotExecutable) as info:
        find_command("tool", str(tmp_path))
    assert str(info.value) == (f"tool: permission denied ({tmp_path / 'tool'} is not "
                               f"executable): chmod +x {tmp_path / 'tool'}")
    assert info.value.exit_code == 126


# --------------------------------------------------------------------------- exec_command (fake)


class Execve(Exception):
    pass


@pytest.fixture
def restore_signals() -> None:
    saved = {s: signal.getsignal(s) for s in (signal.SIGPIPE, signal.SIGXFSZ)}
    yield
    for s, handler in saved.items():
        signal.signal(s, handler)


def test_exec_command_resets_signals_flushes_and_passes_argv_env(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, restore_signals: None
) -> None:
    tool = _executable(tmp_path / "tool")
    seen: dict[str, object] = {}

    def fake_execve(path, argv, env):
        seen.update(path=path, argv=argv, env=env,
                    pipe=signal.getsignal(signal.SIGPIPE), xfsz=signal.getsignal(signal.SIGXFSZ))
        raise Execve

    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    monkeypatch.setattr(os, "execve", fake_execve)
    with pytest.raises(Execve):
        launch.exec_command(["tool", "", "a b"], {"PATH": str(tmp_path), "X": "1"})
    assert seen == {
        "path": str(tool), "argv": ["tool", "", "a b"], "env": {"PATH": str(tmp_path), "X": "1"},
        "pipe": signal.SIG_DFL, "xfsz": signal.SIG_DFL,
    }


@pytest.mark.parametrize(
    ("err", "exc_type", "message"),
    [
        (errno.E2BIG, EnvironmentTooLarge,
         "tool: the kernel refused the environment and arguments as too large (E2BIG)"),
        (errno.ENOENT, CommandNotFound,
         "tool: bad interpreter '/bin/sh' in its #! line, not found ({path})"),
        (errno.EACCES, CommandNotExecutable,
         "tool: bad interpreter '/bin/sh' in its #! line, not executable ({path})"),
        # The file has a #! line: no hint to add one.
        (errno.ENOEXEC, CommandNotExecutable, "tool: Exec format error ({path})"),
        (errno.ETXTBSY, CommandNotExecutable, "tool: Text file busy ({path})"),
    ],
)
def test_exec_command_maps_execve_errors(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, restore_signals: None,
    err: int, exc_type: type[Exception], message: str,
) -> None:
    tool = _executable(tmp_path / "tool")

    def fake_execve(path, argv, env):
        raise OSError(err, os.strerror(err))

    monkeypatch.setattr(os, "execve", fake_execve)
    with pytest.raises(exc_type) as info:
        launch.exec_command(["tool"], {"PATH": str(tmp_path)})
    assert str(info.value) == message.format(path=tool)


@pytest.mark.parametrize(
    ("content", "err", "exc_type", "message"),
    [
        # no #! line: the kernel's own words, a hint only for a script-like file (ENOEXEC)
        (b"echo hi\n", errno.ENOEXEC, CommandNotExecutable,
         "tool: Exec format error (no #! line? run it as: sh SCRIPT) ({path})"),
        (b"\x7fELF\x02\x01\x01", errno.ENOEXEC, CommandNotExecutable,
         "tool: Exec format error ({path})"),
        (b"", errno.ENOEXEC, CommandNotExecutable, "tool: Exec format error ({path})"),
        (b"echo hi\n", errno.EACCES, CommandNotExecutable, "tool: Permission denied ({path})"),
        # ENOENT for an existing binary: its loader is missing
        (b"\x7fELF\x02\x01\x01", errno.ENOENT, CommandNotFound,
         "tool: No such file or directory ({path})"),
        # with a #! line
        (b"#!/usr/bin/nopython\n", errno.ENOENT, CommandNotFound,
         "tool: bad interpreter '/usr/bin/nopython' in its #! line, not found ({path})"),
        (b"#!/opt/interp -x\r\n", errno.EACCES, CommandNotExecutable,
         "tool: bad interpreter '/opt/interp' in its #! line, not executable (the line ends in "
         "\\r: CRLF line endings) ({path})"),
        (b"#!\n", errno.ENOENT, CommandNotFound,
         "tool: bad interpreter '' in its #! line, not found ({path})"),
    ],
)
def test_exec_command_explains_by_file_content(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, restore_signals: None,
    content: bytes, err: int, exc_type: type[Exception], message: str,
) -> None:
    tool = tmp_path / "tool"
    tool.write_bytes(content)
    tool.chmod(0o755)

    def fake_execve(path, argv, env):
        raise OSError(err, os.strerror(err))

    monkeypatch.setattr(os, "execve", fake_execve)
    with pytest.raises(exc_type) as info:
        launch.exec_command(["tool"], {"PATH": str(tmp_path)})
    assert str(info.value) == message.format(path=tool)


def test_exec_command_checks_limits_before_lookup(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(os, "execve", lambda *a: pytest.fail("exec reached"))
    with pytest.raises(EnvironmentTooLarge):
        launch.exec_command(["no-such-tool"], {"PATH": str(tmp_path), "BIG": "x" * MAX_ARG_STRLEN})


# --------------------------------------------------------------------------- check_limits


BIG_ARG_MAX = 1 << 30


def test_per_string_limit_names_the_variable() -> None:
    env = {"PATH": "/bin", "BIG_VAR": "x" * 131072, "SMALL": "y"}
    with pytest.raises(EnvironmentTooLarge) as info:
        check_limits(["cmd"], env, BIG_ARG_MAX)
    size = len("BIG_VAR") + 1 + 131072 + 1
    assert str(info.value) == (
        f"environment variable BIG_VAR is {size} bytes as NAME=value; the kernel refuses any "
        "single string over 131072 bytes (128 KiB) at exec. Largest variables: "
        f"BIG_VAR ({size} bytes), PATH (10 bytes), SMALL (8 bytes)"
    )
    assert info.value.exit_code == 5


def test_per_string_limit_boundary_matches_the_kernel() -> None:
    # The kernel accepts a string of exactly MAX_ARG_STRLEN bytes, NUL included.
    value = "x" * (MAX_ARG_STRLEN - len("V=") - 1)
    check_limits(["cmd"], {"V": value}, BIG_ARG_MAX)
    with pytest.raises(EnvironmentTooLarge):
        check_limits(["cmd"], {"V": value + "x"}, BIG_ARG_MAX)


def test_per_string_limit_boundary_agrees_with_real_exec(tmp_path: Path) -> None:
    true = shutil.which("true") or "/bin/true"
    value = "x" * (MAX_ARG_STRLEN - len("V=") - 1)
    assert subprocess.run([true], env={"V": value}, timeout=TIMEOUT, check=False).returncode == 0
    with pytest.raises(OSError) as info:
        subprocess.run([true], env={"V": value + "x"}, timeout=TIMEOUT, check=False)
    assert info.value.errno == errno.E2BIG


def test_per_string_limit_counts_bytes_not_characters() -> None:
    value = "é" * 65535  # 131070 bytes in UTF-8, 65535 characters
    with pytest.raises(EnvironmentTooLarge, match=r"environment variable V is 131073 bytes"):
        check_limits([], {"V": value}, BIG_ARG_MAX)


def test_per_string_limit_on_an_argument() -> None:
    with pytest.raises(EnvironmentTooLarge) as info:
        check_limits(["cmd", "a" * MAX_ARG_STRLEN], {}, BIG_ARG_MAX)
    assert str(info.value) == (
        f"a command argument is {MAX_ARG_STRLEN + 1} bytes; the kernel refuses any single "
        f"string over {MAX_ARG_STRLEN} bytes (128 KiB) at exec"
    )


def test_arg_max_boundary() -> None:
    argv = ["echo", "hi"]
    env = {"A": "x" * 100, "B": "y"}
    # As the kernel counts (fs/exec.c): the path echo\0 = 5, the strings A=x..x\0 = 103,
    # B=y\0 = 4, echo\0 = 5, hi\0 = 3, and a pointer to each string of argv and env: 8 * 4.
    total = 5 + 103 + 4 + 5 + 3 + 8 * 4
    check_limits(argv, env, total)  # no spare kept: derive-env added nothing
    with pytest.raises(EnvironmentTooLarge) as info:
        check_limits(argv, env, total - 1)
    assert str(info.value) == (
        f"environment and command line take {total} bytes; the kernel's ARG_MAX is {total - 1} "
        "bytes. Largest variables: A (103 bytes), B (4 bytes)"
    )


def test_arg_max_spare_only_for_what_derive_env_adds() -> None:
    argv = ["/bin/true"]
    given = {"A": "x" * 100}
    env = {**given, "MASTER_PORT": "29500"}  # derive-env's: 18 bytes and a pointer
    added = len("MASTER_PORT=29500") + 1 + 8
    total = 10 + 10 + 8 + 103 + 8 + added
    check_limits(argv, env, total + ARG_MAX_MARGIN, given)
    check_limits(argv, env, total + ARG_MAX_MARGIN - 1)  # all given: the kernel takes it
    with pytest.raises(EnvironmentTooLarge) as info:
        check_limits(argv, env, total + ARG_MAX_MARGIN - 1, given)
    assert str(info.value) == (
        f"environment and command line take {total} bytes; the kernel's ARG_MAX is "
        f"{total + ARG_MAX_MARGIN - 1} bytes. derive-env's changes add {added} of them, and it "
        "adds variables only with 4096 bytes spare, left for what your command adds for its "
        "own processes (torchrun: RANK, LOCAL_RANK, ...). Largest variables: A (103 bytes), "
        "MASTER_PORT (18 bytes)"
    )
    with pytest.raises(EnvironmentTooLarge) as info:
        check_limits(argv, env, total - 1, given)
    assert str(info.value) == (
        f"environment and command line take {total} bytes; the kernel's ARG_MAX is {total - 1} "
        f"bytes (derive-env's changes add {added} of them). Largest variables: A (103 bytes), "
        "MASTER_PORT (18 bytes)"
    )
    # A shorter value (a change, nothing new) leaves the spare to the environment.
    check_limits(argv, {"A": "x" * 99}, total - added - 1, given)


def kernel_count(argv: Sequence[str], env: dict[str, str]) -> int:
    """What the kernel counts against ARG_MAX when it execs ``argv[0]`` (a path) with ``argv``
    and ``env`` (fs/exec.c, bprm_stack_limits and do_execveat_common): the path, each string
    with its NUL, a pointer for each (argv at least one)."""
    strings = [argv[0], *argv, *(f"{k}={v}" for k, v in env.items())]
    return sum(len(os.fsencode(s)) + 1 for s in strings) + 8 * (max(len(argv), 1) + len(env))


def command_of_size(command: list[str], env: dict[str, str], total: int) -> list[str]:
    """``command`` and filler arguments for which :func:`kernel_count` is exactly ``total``."""
    rest = total - kernel_count(command, env)
    count = rest // 131_000 + 1  # arguments of at most 131000 bytes, each costing 9 more
    sizes = [(rest - 9 * count) // count] * count
    sizes[-1] += rest - 9 * count - sum(sizes)
    argv = [*command, *("a" * size for size in sizes)]
    assert kernel_count(argv, env) == total
    return argv


TRUE = next((p for p in ("/bin/true", "/usr/bin/true") if os.access(p, os.X_OK)), None)


@pytest.mark.skipif(TRUE is None, reason="no /bin/true")
def test_arg_max_boundary_agrees_with_real_exec() -> None:
    """At ARG_MAX exactly the kernel execs and derive-env lets it; one byte more, neither."""
    arg_max = os.sysconf("SC_ARG_MAX")
    if arg_max > 6 << 20:
        pytest.skip(f"ARG_MAX is {arg_max} bytes here (the kernel caps it at 6 MiB)")
    env = {"PATH": "/usr/bin:/bin", "A": "x" * 1000}
    argv = command_of_size([TRUE], env, arg_max)
    check_limits(argv, env, arg_max)
    assert subprocess.run(argv, env=env, timeout=TIMEOUT, check=False).returncode == 0
    argv[-1] += "a"
    with pytest.raises(EnvironmentTooLarge):
        check_limits(argv, env, arg_max)
    with pytest.raises(OSError) as info:
        subprocess.run(argv, env=env, timeout=TIMEOUT, check=False)
    assert info.value.errno == errno.E2BIG


def test_arg_max_names_at_most_three_largest_variables() -> None:
    env = {f"V{i}": "x" * (10 * i) for i in range(1, 8)}
    with pytest.raises(EnvironmentTooLarge) as info:
        check_limits([], env, 200)
    assert str(info.value).endswith(
        "Largest variables: V7 (74 bytes), V6 (64 bytes), V5 (54 bytes)"
    )


def test_empty_environment_within_limits() -> None:
    check_limits(["true"], {}, 8192)


# --------------------------------------------------------------------------- limits via the CLI


def _big_env_file(tmp_path: Path, labels: Path, variables: dict[str, str]) -> Path:
    path = tmp_path / "big.env"
    lines = [f"{LABELS_VAR}={labels}", "PATH=/usr/bin:/bin"]
    lines += [f"{k}={v}" for k, v in variables.items()]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("opted_in", [True, False], ids=["opted-in", "not-opted-in"])
def test_cli_user_variable_of_200_kib_exits_5(tmp_path: Path, opted_in: bool) -> None:
    labels = write_labels(tmp_path / "labels.json", {FW: "pytorch"} if opted_in else {})
    env_file = _big_env_file(tmp_path, labels, {"HUGE_USER_VAR": "x" * 204800, "OTHER": "y" * 999})
    marker = tmp_path / "marker"
    env = {"PATH": os.environ["PATH"], LABELS_VAR: str(labels)}
    result = run([console_script(), "--env-file", str(env_file), "--", "touch", str(marker)], env)
    size = len("HUGE_USER_VAR") + 1 + 204800 + 1
    err = err_text(result)
    assert result.returncode == 5, err
    assert err.startswith(
        f"derive-env: error: environment variable HUGE_USER_VAR is {size} bytes as NAME=value; "
        "the kernel refuses any single string over 131072 bytes (128 KiB) at exec. Largest "
        f"variables: HUGE_USER_VAR ({size} bytes), OTHER (1006 bytes), "
    )
    assert err.endswith("derive-env: note: the command was not run (exit 5)\n")
    assert not marker.exists()


def test_cli_dry_run_with_a_too_large_environment_exits_5(tmp_path: Path) -> None:
    labels = write_labels(tmp_path / "labels.json", {FW: "pytorch"})
    env_file = _big_env_file(tmp_path, labels, {"HUGE_USER_VAR": "x" * 204800})
    env = {"PATH": os.environ["PATH"], LABELS_VAR: str(labels)}
    result = run([console_script(), "--env-file", str(env_file), "--dry-run"], env)
    assert result.returncode == 5
    assert result.stdout == b""
    assert "HUGE_USER_VAR" in err_text(result)


@pytest.mark.parametrize("opted_in", [True, False], ids=["opted-in", "not-opted-in"])
def test_cli_environment_over_arg_max_exits_5(tmp_path: Path, opted_in: bool) -> None:
    # An --env-file holds at most 1 MiB (cli.MAX_INPUT_BYTES), less than ARG_MAX: the command
    # line makes up the rest. Neither alone is too large; together they are, and the check
    # counts the command's argv.
    arg_max = os.sysconf("SC_ARG_MAX")
    if arg_max > 64 << 20:
        pytest.skip(f"ARG_MAX is {arg_max} bytes here")
    variables = {f"CHUNK_{i:03d}": chr(ord("a") + i) * 100_000 for i in range(9)}
    variables["CHUNK_BIGGEST"] = "z" * 120_000
    labels = write_labels(tmp_path / "labels.json", {FW: "pytorch"} if opted_in else {})
    env_file = _big_env_file(tmp_path, labels, variables)
    assert env_file.stat().st_size <= 1 << 20
    env_bytes = sum(len(k) + 1 + len(v) + 1 for k, v in variables.items())
    args = ["a" * 99_999] * ((arg_max - env_bytes) // 100_000 + 2)
    marker = tmp_path / "marker"
    env = {"PATH": os.environ["PATH"], LABELS_VAR: str(labels)}
    result = run(
        [console_script(), "--env-file", str(env_file), "--", "touch", str(marker), *args], env
    )
    err = err_text(result)
    assert result.returncode == 5, err[:2000]
    assert err.startswith("derive-env: error: environment and command line take ")
    assert f"the kernel's ARG_MAX is {arg_max} bytes. Largest variables: " in err
    assert err.endswith(
        "Largest variables: CHUNK_BIGGEST (120015 bytes), CHUNK_000 (100011 bytes), "
        "CHUNK_001 (100011 bytes)\n"
        "derive-env: note: the command was not run (exit 5)\n"
    )
    assert not marker.exists()


def _env_file_of(tmp_path: Path, labels: Path, extra: str = "") -> tuple[Path, dict[str, str]]:
    """An --env-file of about 1 MiB and the environment it gives."""
    variables = {f"CHUNK_{i:03d}": chr(ord("a") + i) * 100_000 for i in range(10)}
    env = {LABELS_VAR: str(labels), "PATH": "/usr/bin:/bin", **variables}
    if extra:
        env["BACKENDAI_CLUSTER_SIZE"] = extra
    path = tmp_path / "big.env"
    path.write_text("".join(f"{k}={v}\n" for k, v in env.items()), encoding="utf-8")
    return path, env


@pytest.mark.skipif(TRUE is None, reason="no /bin/true")
def test_cli_environment_the_kernel_takes_runs_when_nothing_is_added(tmp_path: Path) -> None:
    """Issue 23: an environment and command line at ARG_MAX exactly (derive-env adds nothing)
    were refused, 4096 bytes kept spare; one byte more is what the kernel refuses."""
    arg_max = os.sysconf("SC_ARG_MAX")
    if arg_max > 6 << 20:
        pytest.skip(f"ARG_MAX is {arg_max} bytes here (the kernel caps it at 6 MiB)")
    env_file, env = _env_file_of(tmp_path, write_labels(tmp_path / "labels.json", {}))
    command = command_of_size([TRUE], env, arg_max)
    shim = [console_script(), "--env-file", str(env_file), "--"]
    small = {"PATH": os.environ["PATH"], LABELS_VAR: env[LABELS_VAR]}
    result = run([*shim, *command], small)
    assert (result.returncode, err_text(result)) == (0, "")
    command[-1] += "a"
    result = run([*shim, *command], small)
    assert result.returncode == 5
    assert err_text(result) == (
        f"derive-env: error: environment and command line take {arg_max + 1} bytes; the "
        f"kernel's ARG_MAX is {arg_max} bytes. Largest variables: CHUNK_000 (100011 bytes), "
        "CHUNK_001 (100011 bytes), CHUNK_002 (100011 bytes)\n"
        "derive-env: note: the command was not run (exit 5)\n"
    )


@pytest.mark.skipif(TRUE is None, reason="no /bin/true")
def test_cli_derived_variables_keep_the_spare(tmp_path: Path) -> None:
    """What derive-env adds must leave 4096 bytes below ARG_MAX for the command's own."""
    arg_max = os.sysconf("SC_ARG_MAX")
    if arg_max > 6 << 20:
        pytest.skip(f"ARG_MAX is {arg_max} bytes here (the kernel caps it at 6 MiB)")
    env_file, env = _env_file_of(tmp_path, write_labels(tmp_path / "labels.json", {FW: "pytorch"}),
                                 extra="1")
    shim = [console_script(), "--env-file", str(env_file)]
    small = {"PATH": os.environ["PATH"], LABELS_VAR: env[LABELS_VAR]}
    dry = run([*shim, "--dry-run", "--format", "json"], small)
    derived = json.loads(dry.stdout)
    assert derived["MASTER_ADDR"] == "127.0.0.1" and not set(derived) & set(env)
    added = kernel_count(["x"], {**env, **derived}) - kernel_count(["x"], env)
    command = command_of_size([TRUE], env, arg_max - added)  # with derived: ARG_MAX exactly
    result = run([*shim, "--", *command], small)
    assert result.returncode == 5
    assert err_text(result) == (
        f"derive-env: error: environment and command line take {arg_max} bytes; the kernel's "
        f"ARG_MAX is {arg_max} bytes. derive-env's changes add {added} of them, and it adds "
        "variables only with 4096 bytes spare, left for what your command adds for its own "
        "processes (torchrun: RANK, LOCAL_RANK, ...). Largest variables: CHUNK_000 (100011 "
        "bytes), CHUNK_001 (100011 bytes), CHUNK_002 (100011 bytes)\n"
        "derive-env: note: the command was not run (exit 5)\n"
    )
    command = command_of_size([TRUE], env, arg_max - added - ARG_MAX_MARGIN)
    result = run([*shim, "--", *command], small)
    assert (result.returncode, err_text(result)) == (0, "")


# --------------------------------------------------------------------------- flush before exec


FLUSH = """\
import os, sys
from derive_env.launch import exec_command
assert type(sys.stdout.buffer).__name__ == "BufferedWriter"  # no PYTHONUNBUFFERED here
sys.stdout.write("before-exec\\n")
sys.stderr.write("stderr-before\\n")
exec_command(["sh", "-c", "echo after-exec; echo stderr-after >&2"], dict(os.environ))
"""


def test_output_written_before_exec_is_not_lost(tmp_path: Path) -> None:
    # stdout to a pipe is block-buffered in Python: without a flush "before-exec" would vanish.
    result = run([PY, "-c", FLUSH], {"PATH": os.environ["PATH"]})
    assert result.returncode == 0, err_text(result)
    assert result.stdout == b"before-exec\nafter-exec\n"
    assert result.stderr == b"stderr-before\nstderr-after\n"


def test_output_before_exec_into_a_file_is_not_lost(tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    with out.open("wb") as handle:
        result = subprocess.run([PY, "-c", FLUSH], env={"PATH": os.environ["PATH"]},
                                stdout=handle, stderr=subprocess.PIPE, timeout=TIMEOUT,
                                check=False)
    assert result.returncode == 0
    assert out.read_bytes() == b"before-exec\nafter-exec\n"


def test_closed_stdout_does_not_stop_the_exec(tmp_path: Path) -> None:
    code = FLUSH.replace('sys.stdout.write("before-exec\\n")', "sys.stdout.close()")
    result = run([PY, "-c", code], {"PATH": os.environ["PATH"]})
    assert result.returncode == 0, err_text(result)
    assert result.stdout == b"after-exec\n"


# --------------------------------------------------------------------------- closed stdout / stderr


def run_redirected(redirect: str, argv: Sequence[str], env: dict[str, str]
                   ) -> subprocess.CompletedProcess[bytes]:
    """Run ``argv`` with a shell redirection applied to it (``>&-``, ``2>&-``)."""
    return run(["sh", "-c", f'exec "$@" {redirect}', "sh", *argv], env)


@pytest.mark.parametrize("redirect", [">&-", "2>&-", ">&- 2>&-"])
def test_closed_stdout_or_stderr_does_not_stop_the_exec_of_the_shim(
    flavour: tuple[list[str], dict[str, str]], request: pytest.FixtureRequest, tmp_path: Path,
    redirect: str,
) -> None:
    # `derive-env -- cmd >&-`: Python starts with sys.stdout None; the command must still run.
    prefix, env = flavour
    marker = tmp_path / "marker"
    command = ["sh", "-c", 'echo "ran MASTER_ADDR=$MASTER_ADDR" > "$1"', "sh", str(marker)]
    result = run_redirected(redirect, [*prefix, *command], env)
    assert result.returncode == 0, err_text(result)
    master = {"script-fast-opted-in": "127.0.0.1", "script-click-opted-in": "main1"}
    name = request.node.callspec.params["flavour"]
    assert marker.read_text() == f"ran MASTER_ADDR={master.get(name, '')}\n"


BAD_TOPOLOGY = {
    "BACKENDAI_CLUSTER_SIZE": "3", "BACKENDAI_CLUSTER_HOSTS": "main1,sub1",
    "BACKENDAI_CLUSTER_HOST": "sub1",
}


@pytest.mark.parametrize(("on_error", "code"), [("warn", 0), ("fail", 3)])
def test_closed_stderr_with_a_message_to_print(tmp_path: Path, on_error: str, code: int) -> None:
    labels = write_labels(tmp_path / "labels.json",
                          {FW: "pytorch", "ai.backend.distributed.on-error": on_error})
    env = {"PATH": os.environ["PATH"], LABELS_VAR: str(labels), **BAD_TOPOLOGY}
    marker = tmp_path / "marker"
    result = run_redirected("2>&-", [console_script(), "--", "touch", str(marker)], env)
    assert result.returncode == code
    assert marker.exists() == (on_error == "warn")


# --------------------------------------------------------------------------- Ctrl-C before the exec


@pytest.mark.parametrize("script", [True, False], ids=["console-script", "python-m"])
def test_ctrl_c_before_the_exec_exits_130_without_a_traceback(
    tmp_path: Path, script: bool
) -> None:
    # derive-env reads the labels from stdin (--labels-file -), a pipe nobody writes to: it
    # waits in read(2) on fd 0 (/proc/PID/syscall says so) until SIGINT interrupts it.
    # (A FIFO labels file is refused at once now, so it can no longer be the wait.)
    marker = tmp_path / "marker"
    prefix = [console_script()] if script else [PY, "-m", "derive_env"]
    env = {"PATH": os.environ["PATH"], LABELS_VAR: os.devnull}
    proc = subprocess.Popen(
        [*prefix, "--labels-file", "-", "--", "touch", str(marker)], env=env,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        preexec_fn=_clean_signals,
    )
    try:
        deadline = time.monotonic() + TIMEOUT
        while True:
            try:
                call = Path(f"/proc/{proc.pid}/syscall").read_text().split()
            except OSError:
                call = []
            if call[:2] == ["0", "0x0"]:  # read(0, ...) on x86-64
                break
            if proc.poll() is not None:
                pytest.fail(f"derive-env ended before reading stdin: {proc.returncode}")
            if time.monotonic() > deadline:
                pytest.fail(f"derive-env did not wait on stdin within {TIMEOUT} s: {call}")
            time.sleep(0.01)
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            # The signal came between Python's last check and read(): end the read (EOF);
            # the pending KeyboardInterrupt is raised at the next check, before the exec.
            proc.stdin.close()
        out, err = proc.communicate(timeout=TIMEOUT)
    finally:
        stop(proc)
    assert proc.returncode == 130, err.decode("utf-8", "backslashreplace")
    assert (out, err) == (
        b"", b"derive-env: error: interrupted before the exec (SIGINT); nothing was run\n"
    )
    assert not marker.exists()


@pytest.mark.parametrize(("args", "reached"), [
    (["--", "true"], "derive_env.launch"),  # the ENTRYPOINT path
    (["--dry-run", "--format", "shell"], "derive_env.render"),  # the hook's (bootstrap.sh)
    (["--format=shell", "--dry-run"], "derive_env.render"),
    (["--dry-run", "--explain"], "derive_env.render.explain"),
])
def test_not_opted_in_path_imports_neither_pydantic_nor_click_nor_typing(
    tmp_path: Path, args: list[str], reached: str
) -> None:
    """Startup on every container start (docs/performance.md): the ENTRYPOINT path and the
    hook's dry run of an image that did not opt in stay clear of the heavy imports."""
    labels = tmp_path / "labels.json"
    labels.write_text("{}")
    env = {"PATH": os.environ["PATH"], "DERIVE_ENV_LABELS_FILE": str(labels)}
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "derive_env", *args],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )
    assert result.returncode == 0, result.stderr
    imported = {line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines()
                if line.startswith("import time:")}
    assert reached in imported
    assert {"pydantic", "pydantic_core", "click", "typing"} & imported == set()


@pytest.mark.parametrize(("name", "hint"), [
    ("train.py", "python SCRIPT"), ("train.sh", "sh SCRIPT"), ("train", "sh SCRIPT"),
])
def test_no_shebang_hint_names_the_interpreter(tmp_path, monkeypatch, name, hint) -> None:
    script = tmp_path / name
    script.write_text("print('hi')\n")
    script.chmod(0o755)

    def fake_execve(path, argv, env):
        raise OSError(errno.ENOEXEC, os.strerror(errno.ENOEXEC))

    monkeypatch.setattr(os, "execve", fake_execve)
    with pytest.raises(CommandNotExecutable) as info:
        launch.exec_command([str(script)], {"PATH": "/bin"})
    assert str(info.value) == (
        f"{script}: Exec format error (no #! line? run it as: {hint}) ({script})"
    )


# ------------------------------------------------------------------ the main1 hint (issue 14)

#: main1's batch command, as Backend.AI's kernel runner starts it (_BACKEND_BATCH_MODE=1).
MAIN1 = {"BACKENDAI_CLUSTER_ROLE": "main", "BACKENDAI_CLUSTER_IDX": "1",
         "BACKENDAI_CLUSTER_SIZE": "2", "_BACKEND_BATCH_MODE": "1"}


def test_main1_hint_names_the_command_and_the_fix() -> None:
    assert main1_hint(MAIN1, ["python", "train.py"]) == (
        "only this container (main1 of 2) runs python train.py: Backend.AI starts the batch "
        "command in main1 alone, so the other containers never join the job. Start it on every "
        "node: on-every-node python train.py (docs/backendai.md, \"Only main1 started the job\")")


def test_main1_hint_quotes_the_command_it_suggests() -> None:
    """The fix is pasted as shown: words with spaces or $ stay one word (new-user trial)."""
    hint = main1_hint(MAIN1, ["sh", "-c", "echo ran NODE_RANK=$NODE_RANK"])
    assert "Start it on every node: on-every-node sh -c 'echo ran NODE_RANK=$NODE_RANK' (" in hint


@pytest.mark.parametrize(("extra", "command"), [
    ({"BACKENDAI_CLUSTER_ROLE": "sub"}, ["python"]),
    ({"BACKENDAI_CLUSTER_IDX": "2"}, ["python"]),
    ({"BACKENDAI_CLUSTER_SIZE": "1"}, ["python"]),
    ({"BACKENDAI_CLUSTER_SIZE": "two"}, ["python"]),
    ({"ON_EVERY_NODE": "1"}, ["python"]),
    ({"_BACKEND_BATCH_MODE": ""}, ["python"]),  # Docker/Compose: every container runs it
    ({"_BACKEND_BATCH_MODE": "0"}, ["python"]),
    *[({}, [launcher, "x"]) for launcher in sorted(FAN_OUT)],
    ({}, ["env", "A=1", "/opt/bin/horovodrun", "-np", "4", "python"]),
    ({}, ["bash", "-c", "cd x; srun python"]),
])
def test_no_main1_hint(extra: dict[str, str], command: list[str]) -> None:
    assert main1_hint({**MAIN1, **extra}, command) is None


# ---- SageMaker starts a training image as `IMAGE train` ----------------------------------
SAGEMAKER_TRAIN_MESSAGE = (
    "train: command not found in PATH={path}; SageMaker starts a training image as "
    "'IMAGE train', so the image needs a program named train on PATH: your own (e.g. a "
    "script that runs torchrun train.py) or the one of SageMaker's training toolkit (pip "
    "install sagemaker-training), which runs the job's entry point (docs/sources/clouds.md, "
    "\"Amazon SageMaker\")")


@pytest.mark.parametrize(("variable", "value"), [
    ("TRAINING_JOB_NAME", "bert-1"), ("TRAINING_JOB_ARN", "arn:aws:sagemaker:x:1:training-job/b"),
    ("SM_CURRENT_HOST", "algo-1"), ("SM_HOSTS", '["algo-1"]')])
def test_train_not_found_under_sagemaker_says_what_sagemaker_expects(
        tmp_path: Path, variable: str, value: str) -> None:
    """The image was started as `IMAGE train` (SageMaker's way) without a train program:
    exit 127, the message says what SageMaker expects; the command was not run."""
    labels = write_labels(tmp_path / "labels.json", {})
    env = {"PATH": f"{tmp_path}:/nonexistent", LABELS_VAR: str(labels), variable: value}
    result = run([console_script(), "--", "train"], env)
    assert result.returncode == 127
    assert err_text(result) == (
        "derive-env: error: " + SAGEMAKER_TRAIN_MESSAGE.format(path=f"{tmp_path}:/nonexistent")
        + "\nderive-env: note: the command was not run (exit 127)\n")


def test_train_not_found_elsewhere_or_another_command_under_sagemaker_no_hint(
        tmp_path: Path) -> None:
    """No SageMaker variable, or a command other than train: the plain message."""
    with pytest.raises(CommandNotFound) as plain:
        launch.exec_command(["train"], {"PATH": str(tmp_path)})
    assert str(plain.value) == f"train: command not found in PATH={tmp_path}"
    with pytest.raises(CommandNotFound) as other:
        launch.exec_command(["serve"], {"PATH": str(tmp_path), "TRAINING_JOB_NAME": "bert-1"})
    assert str(other.value) == f"serve: command not found in PATH={tmp_path}"
    with pytest.raises(CommandNotFound) as hinted:
        launch.exec_command(["train"], {"PATH": str(tmp_path), "TRAINING_JOB_NAME": "bert-1"})
    assert str(hinted.value) == SAGEMAKER_TRAIN_MESSAGE.format(path=tmp_path)
