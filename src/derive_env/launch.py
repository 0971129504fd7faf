"""Exec: replace this process with the user's command (the only ``os.exec*`` of derive-env).

Rules (docs/behaviour.md section 3): same PID (``execve``), so ``docker stop``'s SIGTERM reaches the
user's program and its exit status is the container's; stdout/stderr flushed first;
SIGPIPE and SIGXFSZ reset to their default disposition (CPython ignores them, and an
ignored signal survives exec); each ``NAME=value`` checked against the kernel's per-string
limit and the whole of environment + argv against ``ARG_MAX``; command lookup in the
``PATH`` of the environment being exec'd; shell exit codes 127 (not found) and 126 (found
but not executable). Imports neither pydantic nor click: the not-opted-in path runs here.
"""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Mapping, Sequence

from derive_env.errors import (
    CommandNotExecutable,
    CommandNotFound,
    EnvironmentTooLarge,
    shorten,
)

TYPE_CHECKING = False  # not from typing: see derive_env/__init__.py
if TYPE_CHECKING:
    from typing import NoReturn

#: The kernel's limit on one argv or environment string, NUL included: 32 pages of 4 KiB
#: (MAX_ARG_STRLEN, include/uapi/linux/binfmts.h).
MAX_ARG_STRLEN = 131072
#: Room kept below ARG_MAX when derive-env adds variables, for what the command adds for its
#: own processes in turn (torchrun's RANK, LOCAL_RANK...), as xargs keeps some for itself.
ARG_MAX_MARGIN = 4096
_POINTER = 8


def _env_bytes(env: Mapping[str, str]) -> int:
    """What ``env`` takes on the new stack: each ``NAME=value`` with its NUL, and its pointer."""
    return sum(len(os.fsencode(k)) + len(os.fsencode(v)) + 2 for k, v in env.items()) + (
        _POINTER * len(env))


def check_limits(argv: Sequence[str], env: Mapping[str, str], arg_max: int,
                 given: Mapping[str, str] | None = None) -> None:
    """Check argv and the environment against the kernel's exec limits.

    The kernel's count (fs/exec.c, bprm_stack_limits and do_execveat_common): the program's
    path, every ``NAME=value`` and argument, each with its NUL, and a pointer for each
    argument (at least one) and variable. ``argv[0]`` stands for the path: exact for a path
    with ``/``; a command found in ``PATH`` adds its directory, which the exec's own E2BIG
    reports (exit 5 too), as it does over 6 MiB (the kernel's cap, 3/4 of _STK_LIM, which
    ``sysconf`` does not show). ARG_MAX_MARGIN applies only to what derive-env adds: an
    environment the kernel takes is never refused for derive-env's sake when it adds nothing.

    :param arg_max: ``sysconf(SC_ARG_MAX)`` in bytes (on Linux a quarter of the stack limit).
    :param given: the environment before derive-env's changes (``None``: ``env`` is it).
    :raises EnvironmentTooLarge: a ``NAME=value`` string with its NUL is over 131072 bytes
        (128 KiB, MAX_ARG_STRLEN); the total over ``arg_max``; or over ``arg_max`` less a
        4 KiB margin when derive-env's changes made it larger. The message names the
        largest variables.
    """
    sizes = {k: len(os.fsencode(k)) + 1 + len(os.fsencode(v)) + 1 for k, v in env.items()}
    largest = sorted(sizes.items(), key=lambda item: -item[1])[:3]
    shown = ", ".join(f"{k} ({n} bytes)" for k, n in largest)
    for name, size in largest:
        if size > MAX_ARG_STRLEN:
            raise EnvironmentTooLarge(
                f"environment variable {name} is {size} bytes as NAME=value; the kernel "
                f"refuses any single string over {MAX_ARG_STRLEN} bytes (128 KiB) at exec. "
                f"Largest variables: {shown}"
            )
    for arg in argv:
        if len(os.fsencode(arg)) + 1 > MAX_ARG_STRLEN:
            raise EnvironmentTooLarge(
                f"a command argument is {len(os.fsencode(arg)) + 1} bytes; the kernel refuses "
                f"any single string over {MAX_ARG_STRLEN} bytes (128 KiB) at exec"
            )
    path = len(os.fsencode(argv[0])) + 1 if argv else 0
    args = sum(len(os.fsencode(a)) + 1 for a in argv) + _POINTER * max(len(argv), 1)
    env_bytes = sum(sizes.values()) + _POINTER * len(env)
    total = path + args + env_bytes
    added = 0 if given is None else env_bytes - _env_bytes(given)
    if total > arg_max:
        mine = f" (derive-env's changes add {added} of them)" if added > 0 else ""
        raise EnvironmentTooLarge(
            f"environment and command line take {total} bytes; the kernel's ARG_MAX is "
            f"{arg_max} bytes{mine}. Largest variables: {shown}")
    if added > 0 and total > arg_max - ARG_MAX_MARGIN:
        raise EnvironmentTooLarge(
            f"environment and command line take {total} bytes; the kernel's ARG_MAX is "
            f"{arg_max} bytes. derive-env's changes add {added} of them, and it adds "
            f"variables only with {ARG_MAX_MARGIN} bytes spare, left for what your command "
            f"adds for its own processes (torchrun: RANK, LOCAL_RANK, ...). Largest variables: "
            f"{shown}")


def find_command(name: str, path: str | None) -> str:
    """Locate ``name`` as a POSIX shell does, in ``path`` (the exec'd environment's PATH).

    A name with a ``/`` is used as is. Otherwise the first executable regular file in the
    ``PATH`` entries is taken (an empty entry is the current directory; ``PATH`` unset
    means ``os.defpath``, ``/bin:/usr/bin``, which the message then names as the default).

    :raises CommandNotFound: no such file (exit 127).
    :raises CommandNotExecutable: only non-executable files or directories found (exit 126);
        the message says how to run it (``chmod +x``, :func:`_or_run`).
    """
    if not name:
        raise CommandNotFound("'': command not found (the command is an empty string)")
    if "/" in name:
        if not os.path.exists(name):
            raise CommandNotFound(f"{name}: command not found (no such file)")
        if os.path.isdir(name):
            raise CommandNotExecutable(f"{name}: is a directory")
        if not os.access(name, os.X_OK):
            raise CommandNotExecutable(
                f"{name}: permission denied (not executable): chmod +x {name}{_or_run(name)}")
        return name
    search = os.defpath if path is None else path
    not_executable = None
    for directory in search.split(os.pathsep):
        candidate = os.path.join(directory or ".", name)
        if os.path.isfile(candidate):
            if os.access(candidate, os.X_OK):
                return candidate
            not_executable = not_executable or candidate
    if not_executable:
        raise CommandNotExecutable(f"{name}: permission denied ({not_executable} is not "
                                   f"executable): chmod +x {not_executable}"
                                   f"{_or_run(not_executable)}")
    default = "" if path is not None else (
        " (the default PATH: the command's environment, with --env-file the file's, sets none)")
    raise CommandNotFound(f"{name}: command not found in PATH={search}{default}")


#: The interpreter that runs a script by its suffix when it cannot run itself.
_INTERPRETERS = {".py": "python", ".sh": "sh"}


def _or_run(path: str) -> str:
    """The other fix for a ``.py`` or ``.sh`` file without the execute bit, after ``chmod
    +x``: its interpreter in front (``, or run it as: python PATH``); else ``""``."""
    interpreter = _INTERPRETERS.get(os.path.splitext(path)[1])
    return f", or run it as: {interpreter} {path}" if interpreter else ""


#: Variables SageMaker's platform (``TRAINING_JOB_NAME``, ``TRAINING_JOB_ARN``) or its
#: training toolkit (``SM_CURRENT_HOST``, ``SM_HOSTS``) sets in a training container.
SAGEMAKER = ("TRAINING_JOB_NAME", "TRAINING_JOB_ARN", "SM_CURRENT_HOST", "SM_HOSTS")
#: What SageMaker expects when it starts a training image as ``docker run IMAGE train`` (its
#: developer guide, "How Amazon SageMaker Runs Your Training Image").
SAGEMAKER_TRAIN = (
    "SageMaker starts a training image as 'IMAGE train', so the image needs a program named "
    "train on PATH: your own (e.g. a script that runs torchrun train.py) or the one of "
    "SageMaker's training toolkit (pip install sagemaker-training), which runs the job's "
    "entry point (docs/sources/clouds.md, \"Amazon SageMaker\")")


def exec_command(
    argv: Sequence[str], env: Mapping[str, str], *, limits_checked: bool = False
) -> NoReturn:
    """Replace this process with ``argv`` run in ``env``; returns only by raising.

    :param argv: the user's command, verbatim (``argv[0]`` is looked up in ``env['PATH']``).
    :param env: the complete environment of the command.
    :param limits_checked: the caller already ran :func:`check_limits` on exactly these
        ``argv`` and ``env`` (the opted-in path does, to honour on-error=warn): not again.
    :raises EnvironmentTooLarge: see :func:`check_limits` (also when the kernel says E2BIG).
    :raises CommandNotFound: exit 127. :raises CommandNotExecutable: exit 126.
    """
    if not limits_checked:
        check_limits(argv, env, os.sysconf("SC_ARG_MAX"))
    try:
        program = find_command(argv[0], env.get("PATH"))
    except CommandNotFound as exc:
        if argv[0] == "train" and any(env.get(name) for name in SAGEMAKER):
            raise CommandNotFound(f"{exc}; {SAGEMAKER_TRAIN}") from None
        raise
    for stream in (sys.stdout, sys.stderr):
        # A closed (None) or broken stream must not stop the exec.
        if stream is not None:
            try:  # noqa: SIM105 (contextlib.suppress: its import is ~3% of a plain start)
                stream.flush()
            except (OSError, ValueError):
                pass
    import signal  # here: the dry run (the hook) imports this module for check_limits only

    for signum in (signal.SIGPIPE, signal.SIGXFSZ):
        signal.signal(signum, signal.SIG_DFL)
    try:
        os.execve(program, list(argv), dict(env))
    except ValueError as exc:  # a NUL byte in an argument or a variable
        raise CommandNotExecutable(f"{argv[0]}: cannot be run: {exc}") from None
    except OSError as exc:
        if exc.errno == errno.E2BIG:
            raise EnvironmentTooLarge(
                f"{argv[0]}: the kernel refused the environment and arguments as too large "
                "(E2BIG)"
            ) from None
        if exc.errno == errno.ENOENT:
            raise CommandNotFound(_interpreter_problem(argv[0], program, exc)) from None
        raise CommandNotExecutable(_interpreter_problem(argv[0], program, exc)) from None


def _interpreter_problem(name: str, program: str, exc: OSError) -> str:
    """Explain an exec failure of a file that exists, naming its ``#!`` interpreter if any."""
    try:
        with open(program, "rb") as handle:
            first = handle.readline(256)
    except OSError:
        first = b""
    if first.startswith(b"#!") and exc.errno in (errno.ENOENT, errno.EACCES):
        line = first[2:].decode("utf-8", "replace")
        interpreter = line.strip().split()[0] if line.strip() else ""
        crlf = line.rstrip("\n").endswith("\r")
        hint = " (the line ends in \\r: CRLF line endings)" if crlf else ""
        what = "not found" if exc.errno == errno.ENOENT else "not executable"
        return f"{name}: bad interpreter {interpreter!r} in its #! line, {what}{hint} ({program})"
    hint = ""
    if exc.errno == errno.ENOEXEC and first and not first.startswith((b"#!", b"\x7fELF")):
        # A shell would run such a file with sh; a .py file wants its interpreter instead.
        interpreter = "python" if name.endswith(".py") else "sh"
        hint = f" (no #! line? run it as: {interpreter} SCRIPT)"
    return f"{name}: {exc.strerror}{hint} ({program})"


# ------------------------------------------------------------------ before the exec


#: Commands that start their command on every node themselves (docs/backendai.md section
#: 4, docs/integration.md): after one of them, the main1 hint would be wrong.
FAN_OUT = frozenset({
    "on-every-node", "bssh", "pdsh", "clush", "pssh", "parallel-ssh", "mpirun", "mpiexec",
    "mpiexec.hydra", "orterun", "prterun", "mpirun_rsh", "srun", "jsrun", "aprun", "flux",
    "deepspeed", "horovodrun",
})


#: Set to 1 by Backend.AI's kernel runner in the environment of the batch command it starts
#: (``run_subproc(..., batch=True)`` in src/ai/backend/kernel/base.py of lablup/backend.ai);
#: absent where Docker or Compose started the command in every container.
BATCH_MODE = "_BACKEND_BATCH_MODE"


def main1_hint(environ: Mapping[str, str], command: Sequence[str]) -> str | None:
    """The warning for a command started in main1 only (docs/backendai.md, "Only main1
    started the job"), or ``None``.

    Given when Backend.AI's kernel runner started the command as the session's batch
    command (``_BACKEND_BATCH_MODE=1``, :data:`BATCH_MODE`), ``environ`` is main1's
    (``BACKENDAI_CLUSTER_ROLE=main``, ``BACKENDAI_CLUSTER_IDX=1``) in a session of more than
    one container, ``on-every-node`` did not start the command (it exports
    ``ON_EVERY_NODE=1``), and no word of the command (``sh -c '...'`` included) is a
    launcher of :data:`FAN_OUT`, which starts it on every node itself. Never on a sub
    container, never on Docker/Compose (every container runs its command there, with the
    same BACKENDAI_* variables), never for a dry run (the caller's part).
    """
    if (environ.get(BATCH_MODE) != "1"
            or environ.get("BACKENDAI_CLUSTER_ROLE") != "main"
            or environ.get("BACKENDAI_CLUSTER_IDX", "").strip() != "1"
            or environ.get("ON_EVERY_NODE") == "1"):
        return None
    size = environ.get("BACKENDAI_CLUSTER_SIZE", "").strip()
    if not (size.isascii() and size.isdigit() and int(size) > 1):
        return None
    words = {os.path.basename(word) for arg in command for word in
             arg.replace(";", " ").replace("&", " ").replace("|", " ").split()}
    if words & FAN_OUT:
        return None
    import shlex  # only when the hint is given: not on the start path

    shown = shorten(shlex.join(command), 120)  # quoted, so the fix can be pasted as shown
    return (f"only this container (main1 of {int(size)}) runs {shown}: Backend.AI starts "
            "the batch command in main1 alone, so the other containers never join the job. "
            f"Start it on every node: on-every-node {shown} (docs/backendai.md, \"Only main1 "
            "started the job\")")
