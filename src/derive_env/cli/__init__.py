"""The command line's I/O: read the real inputs, run the pipeline, print or exec.

This package is the only place that reads argv, the process environment, files or the host
(interfaces, routes, name resolution), and writes stdout or stderr; everything it reads is
handed to the pure pipeline. This module holds :func:`run` and the readers every start
uses; the others are loaded by the option or label that needs them:

* :mod:`derive_env.cli.options`: the option table and its checks, and the click-free parser
  of the dry-run forms (the hook's ``--dry-run --format shell``);
* :mod:`derive_env.cli.command`: the click command, for every other command line;
* :mod:`derive_env.cli.envfile`: ``--env-file``; :mod:`derive_env.cli.hostfacts`: the
  network facts and the bounded resolver of label ``socket-ifname``.

It imports neither pydantic nor click at module level: the ENTRYPOINT path
``derive-env -- CMD`` of an image that did not opt in reads one small JSON file, then execs.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Mapping, Sequence

from derive_env.errors import (
    DeriveEnvError,
    LabelError,
    UsageError,
    printable,
    shorten,
    without_waiver,
)
from derive_env.labels import (
    DEFAULT_LABELS_FILE,
    LABELS_FILE_VARIABLE,
    OPT_IN,
    PREFIX,
    check_not_opted_in,
    gather,
    is_opted_in,
    on_error_of,
    variable_of,
)

#: Largest labels or env file read, in bytes: real ones are a few KiB; /dev/zero is not one.
MAX_INPUT_BYTES = 1 << 20
#: Largest file a source reads (a 4096-node step's SLURM_HOSTFILE is about 0.4 MiB).
MAX_SOURCE_FILE_BYTES = 16 << 20
#: The kernel's ephemeral port range (sysctl ``net.ipv4.ip_local_port_range``), read only
#: when a port was derived by hash, for the warning of a range that overlaps the window
#: (:func:`derive_env.ports.overlap_warning`).
PORT_RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"


#: :func:`run`'s options, the option table's keywords (cli/options.py), when not given.
RUN_OPTIONS = {"dry_run": False, "fmt": "env", "explain": False, "all_nodes": False,
               "labels_files": (), "label_items": (), "env_file": None, "source": None,
               "frameworks": None}
_ITEMS = ("labels_files", "label_items")  # run()'s options of several str: a str is one


def run(command: Sequence[str], **options: object) -> int:
    """Do what the command line asked (``options``: :data:`RUN_OPTIONS` by keyword, another
    a ``TypeError``; a str ``labels_files`` or ``label_items`` is one item): the exit status,
    or an exec. ``frameworks`` is the ``frameworks`` label, after every ``--label``. An input
    error prints ``derive-env: error: ...`` and returns its exit code, the command not run (no
    command and no dry run: 2); with ``on-error=warn`` a derivation error is a warning and the
    command runs unchanged. ``--explain`` is a dry run; on an error it prints every node's view
    when it can (:func:`derive_env.cli.formats.picture`); ``all_nodes`` adds that view."""
    given = {**RUN_OPTIONS, **options}
    if len(given) > len(RUN_OPTIONS):
        raise TypeError(f"run() got other options: {sorted(given.keys() - RUN_OPTIONS.keys())}")
    given.update({k: (v,) for k, v in given.items() if k in _ITEMS and isinstance(v, str)})
    dry_run, fmt, explain = given["dry_run"] or given["explain"], given["fmt"], given["explain"]
    environ: Mapping[str, str] | None = None
    labels: Mapping[str, str] | None = None
    if command and dry_run:  # what the command would get, printed, not run
        say("note", "--explain is a dry run: the command was not run" if explain else
                    "--dry-run prints the variables the command would get: it was not run")
    try:
        if not command and not dry_run:  # an empty argv never reaches the exec
            raise UsageError("no command given. Usage: derive-env [OPTIONS] -- COMMAND [ARG]... "
                             "or derive-env --dry-run (see derive-env --help)")
        environ = read_environment(given["env_file"])
        frameworks = () if given["frameworks"] is None else (f"{OPT_IN}={given['frameworks']}",)
        given["label_items"] = items = (*given["label_items"], *frameworks)  # fixes echo them
        labels = load_labels(environ, given["labels_files"], items)
        opted_in = is_opted_in(labels)
        if not opted_in:
            _check_not_opted_in(labels)
        if dry_run and not explain and (_is_host_format(fmt) or _is_digest_format(fmt)):
            from derive_env.cli import formats

            inputs = _inputs(environ, labels, given)._replace(command=tuple(command))
            return _write((formats.host_list if _is_host_format(fmt) else formats.digest)(
                inputs, fmt))
        image = getattr(labels, "image", True)  # a labels file: speak of the image
        if not opted_in:
            _note_larger_job(environ, image)
            return _print(None, fmt, explain, image) if dry_run else _exec(command, environ)
        inputs = _inputs(environ, labels, given)._replace(command=tuple(command))
        derivation = _derive(inputs, dry_run, explain, given["label_items"])
        if derivation is None and dry_run and explain:  # on-error=warn, already reported
            return _write("nothing derived: on-error=warn (see the warning above)\n")
        if dry_run and explain and given["all_nodes"]:
            from derive_env.cli.formats import picture
            from derive_env.render.explain import explain as for_a_person

            return _write(f"{for_a_person(derivation, image=image)}\n{picture(inputs, derivation)}")
        return (_print(derivation, fmt, explain, image) if dry_run
                else _exec(command, environ, derivation))
    except DeriveEnvError as exc:
        if explain and environ is not None and labels is not None and is_opted_in(labels):
            from derive_env.cli.formats import picture  # this machine's files, --env-file too

            _write(picture(_inputs(environ, labels, {**given, "env_file": None}), None))
        from derive_env.render.fixes import fixed  # the opt-in in the message's fixes
        say("error", fixed(str(exc), labels, given["label_items"]))
        if command and not dry_run:
            say("note", f"the command was not run (exit {exc.exit_code})")
        return exc.exit_code


def run_command(command: Sequence[str]) -> int:
    """The ENTRYPOINT path ``derive-env [--] CMD ARG...`` with no options (no click import)."""
    return run(command)  # no command: run() says so, exit 2


def interrupted() -> int:
    """Ctrl-C (SIGINT) before the exec, on every path: say so, exit status 130 (errors.py)."""
    say("error", "interrupted before the exec (SIGINT); nothing was run")
    return 130


# ------------------------------------------------------------------------------ the inputs


def read_environment(env_file: str | None) -> dict[str, str]:
    """The input environment: the ``--env-file`` when given (any format of
    :func:`derive_env.cli.envfile.parse_env_file`), else the process's own.

    The process's own is the one derive-env was started with: CPython's C-locale coercion
    (PEP 538) adds ``LC_CTYPE=C.UTF-8`` to ``os.environ`` at start-up, which must not reach
    the command: ``LC_CTYPE`` is taken back as ``/proc/self/environ`` had it (or dropped).

    :raises UsageError: the ``--env-file`` cannot be read or parsed (exit 2).
    """
    if env_file is not None:
        from derive_env.cli.envfile import env_file_variables

        return env_file_variables(read_text(env_file, "--env-file", UsageError) or "", env_file)
    environ = dict(os.environ)
    if "LC_CTYPE" in environ:
        try:
            with open("/proc/self/environ", "rb") as handle:
                initial = handle.read().split(b"\0")
        except OSError:
            return environ
        original = [item[len(b"LC_CTYPE="):] for item in initial if item.startswith(b"LC_CTYPE=")]
        if original:
            environ["LC_CTYPE"] = os.fsdecode(original[-1])
        else:
            del environ["LC_CTYPE"]
    return environ


def load_labels(environ: Mapping[str, str], labels_files: Sequence[str] = (),
                label_items: Sequence[str] = ()) -> dict[str, str]:
    """The image's labels (:func:`derive_env.labels.gather`: labels file, ``--labels-file``s,
    ``DERIVE_ENV_<NAME>`` variables, ``--label``s, later wins), the files read here with
    :func:`read_text`; ``$DERIVE_ENV_LABELS_FILE`` from the input environment, else from
    this process's (an ``--env-file`` rarely repeats the image's ``ENV``).

    :raises LabelError: as :func:`derive_env.labels.gather`.
    """
    # DEFAULT_LABELS_FILE: a module global, which tests point elsewhere
    return gather(environ, (os.environ.get(LABELS_FILE_VARIABLE), DEFAULT_LABELS_FILE),
                  (labels_files, label_items), lambda path, what, missing_ok: read_text(
                      path, what, LabelError, missing_ok=missing_ok))


def read_text(
    path: str, what: str, error: type[DeriveEnvError], *, missing_ok: bool = False
) -> str | None:
    """Read a small UTF-8 input file (labels, ``--env-file``; ``-``: stdin).

    :param what: how to name the file in messages (``--labels-file``).
    :returns: its text; ``None`` when it does not exist and ``missing_ok``.
    :raises error: unreadable, a FIFO or socket, larger than :data:`MAX_INPUT_BYTES`, or not
        UTF-8.
    """
    shown = "stdin" if path == "-" else repr(path)
    try:
        if path == "-":
            if sys.stdin is None:
                raise error(f"{what} -: stdin is closed")
            data = sys.stdin.buffer.read(MAX_INPUT_BYTES + 1)
        else:
            data = _read_bounded(path, what, shown, error)
    except (UnicodeEncodeError, ValueError):  # a path no file system can hold (\ud800, NUL)
        raise error(f"{what} {shorten(ascii(path), 200)}: not a valid file path") from None
    except FileNotFoundError as exc:
        if missing_ok:
            return None
        raise error(f"{what} {shown}: cannot be read ({exc.strerror})") from None
    except OSError as exc:
        raise error(f"{what} {shown}: cannot be read ({exc.strerror})") from None
    if len(data) > MAX_INPUT_BYTES:
        raise error(f"{what} {shown}: larger than {MAX_INPUT_BYTES} bytes, too large to be one")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{what} {shown}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def _read_bounded(path: str, what: str, shown: str, error: type[DeriveEnvError]) -> bytes:
    """At most one byte more than :data:`MAX_INPUT_BYTES` of the file at ``path``."""
    # O_NONBLOCK: opening a FIFO must not wait for a writer (it would stall the container
    # start with no message). Devices (/dev/null) are read as before.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as handle:
        if os.fstat(fd).st_mode & 0o170000 in (0o010000, 0o140000):  # FIFO, socket
            raise error(
                f"{what} {shown}: a FIFO or socket, which can wait for a writer "
                "forever; write it to a file first, or give - for stdin"
            )
        os.set_blocking(fd, True)
        return handle.read(MAX_INPUT_BYTES + 1)


def _job_files(paths: Sequence[str]) -> dict[str, str | None]:
    """:func:`read_files` for another container's ``--env-file``: this machine's own files
    (``/proc/...``, ``/etc/hosts``) are unreadable (``None``), as they describe it."""
    own = [p for p in paths if p.startswith("/proc/") or p == "/etc/hosts"]
    return {**read_files([p for p in paths if p not in own]), **dict.fromkeys(own)}


def read_files(paths: Sequence[str]) -> dict[str, str | None]:
    """Edge reader for the files a source needs (``SLURM_HOSTFILE``): path -> its text
    (UTF-8, undecodable bytes escaped), ``None`` when it is not a regular file this process
    can read of at most :data:`MAX_SOURCE_FILE_BYTES` (16 MiB). Opened without blocking
    (``O_NONBLOCK``), so a FIFO never hangs a container start."""
    out: dict[str, str | None] = {}
    for path in paths:
        out[path] = None
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
        except (OSError, ValueError):
            continue
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_SOURCE_FILE_BYTES:
                continue
            with os.fdopen(fd, "rb", closefd=False) as handle:
                data = handle.read(MAX_SOURCE_FILE_BYTES + 1)
            if len(data) <= MAX_SOURCE_FILE_BYTES:
                out[path] = data.decode("utf-8", "surrogateescape")
        except OSError:
            pass
        finally:
            os.close(fd)
    return out


def gather_facts(full: bool = True, environ: Mapping[str, str] | None = None):  # -> HostFacts
    """Read this container's facts for the framework rules (frameworks/network.py, ports.py).

    :param full: everything label ``socket-ifname`` uses (:func:`~derive_env.cli.hostfacts.
        network_facts`); else whether ``baimulti0`` exists (one stat), and everything when it
        does not in Backend.AI's container of a session ``environ`` states larger than one.
    :returns: a ``HostFacts`` (unreadable files read as empty), with a reader of the port
        range (:data:`PORT_RANGE_FILE`, ``None`` unreadable) called only for a hashed port."""
    from derive_env.frameworks.network import BACKENDAI_MARKER, OVERLAY, route_default_wanted

    present = os.path.exists(f"/sys/class/net/{OVERLAY}")
    if full or (not present and environ is not None and route_default_wanted(environ)
                and os.path.exists(BACKENDAI_MARKER)):
        from derive_env.cli.hostfacts import network_facts

        return network_facts(read_port_range)
    from derive_env.frameworks.context import HostFacts

    return HostFacts(interfaces=(OVERLAY,) if present else (), port_range=read_port_range)


def new_run_id() -> str:
    """This start's fresh run id (:func:`derive_env.merge.run_id`): 16 lowercase hex digits,
    64 bits from the kernel's random source, never guessable from the time of the start."""
    return os.urandom(8).hex()


def read_port_range() -> str | None:
    return _text_or_none(PORT_RANGE_FILE)  # None when it cannot be read


def _text_or_none(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


# ------------------------------------------------------------------------ the derivation


def _check_not_opted_in(labels: Mapping[str, str]) -> None:
    """Stray distributed labels without the opt-in one: an error, or a warning with warn."""
    try:
        check_not_opted_in(labels)
    except LabelError as exc:
        if on_error_of(labels) != "warn":
            raise
        say("warning", str(exc))


def _note_larger_job(environ: Mapping[str, str], image: bool) -> None:
    """Not opted in, inside a job a source states as more than one node or process: one
    line on stderr, on every path, so that nodes each training alone do not look healthy
    (:func:`derive_env.sources.sizes.not_opted_in`; ``image``: a labels file was read)."""
    from derive_env.sources.sizes import not_opted_in

    warning = not_opted_in(environ, image, (OPT_IN, variable_of(OPT_IN)), read_files)
    if warning is not None:
        say("warning", warning)


def _is_host_format(fmt: str) -> bool:
    from derive_env.render import HOST_FORMATS  # not needed on the exec path

    return fmt in HOST_FORMATS


def _is_digest_format(fmt: str) -> bool:
    from derive_env.render import DIGEST_FORMATS

    return fmt in DIGEST_FORMATS


def _inputs(environ: Mapping[str, str], labels: Mapping[str, str],
            given: Mapping[str, object]):  # -> Inputs; imported lazily with the pipeline
    """The :class:`~derive_env.topology.Inputs` of a derivation: the files a source names
    (``SLURM_HOSTFILE``) are read for ``--env-file`` too (they sit on a shared file system
    where the operator runs the dry run, as in the job), but not this machine's (its routes,
    its ``/etc/hosts``), which describe no other container; nor are its host facts (read
    only if a rule asks, everything only with label ``socket-ifname``)."""
    from derive_env.topology import Inputs

    if given["env_file"] is not None:
        return Inputs(environ, labels, _job_files, None, given["source"])
    full = PREFIX + "socket-ifname" in labels
    return Inputs(environ, labels, read_files, lambda: gather_facts(full, environ),
                  given["source"], new_run_id())


def _derive(inputs, dry_run: bool, explain: bool, label_items: Sequence[str] = ()):
    """The derivation, warnings said (``--explain`` prints them), exec limits checked; ``None``
    after an error with ``on-error=warn``."""
    from derive_env.errors import EnvironmentTooLarge
    from derive_env.launch import check_limits
    from derive_env.pipeline import derive_from

    environ, labels = inputs.environ, inputs.labels
    arg_max = os.sysconf("SC_ARG_MAX")
    try:
        derivation = derive_from(inputs)
        assert derivation is not None  # opted in, checked by the caller
        check_limits(inputs.command, {**environ, **derivation.changes()}, arg_max, environ)
    except DeriveEnvError as exc:
        if isinstance(exc, EnvironmentTooLarge):
            # Too large already without derived variables: on-error=warn cannot help.
            check_limits(inputs.command, environ, arg_max)
        if on_error_of(labels) != "warn":
            raise
        from derive_env.render.fixes import fixed  # the opt-in in the message's fixes
        say("warning", fixed(without_waiver(str(exc)), labels, label_items))
        say("warning", "on-error=warn: " + ("nothing derived" if dry_run else
                                            "running the command with the environment unchanged"))
        return None
    if not (dry_run and explain):  # --explain prints them in its own output
        for warning in derivation.warnings:
            say("warning", warning)
    return derivation


def _print(derivation, fmt: str, explain: bool, image: bool = True) -> int:
    """The dry run's output: ``--explain``'s, else the format's; ``image``: a labels file
    was read (``--explain`` names the image's label or the job's options, containers or
    nodes: :func:`derive_env.render.explain.explain`)."""
    if explain:
        from derive_env.render.explain import explain as for_a_person

        return _write(for_a_person(derivation, image=image))
    from derive_env.render import render

    return _write(render(derivation, fmt))


def _exec(command: Sequence[str], environ: Mapping[str, str], derivation=None) -> int:
    """Exec ``command`` with the derived variables (none: the environment unchanged)."""
    from derive_env.launch import exec_command, main1_hint

    hint = main1_hint(environ, command)
    if hint is not None:
        say("warning", hint)

    if derivation is None:  # not opted in, or on-error=warn: the environment unchanged
        exec_command(command, environ)
    exec_command(command, {**environ, **derivation.changes()},
                 limits_checked=True)  # _derive checked this argv and environment


# ------------------------------------------------------------------------------ the output


def say(kind: str, message: str) -> None:
    """``derive-env: KIND: MESSAGE`` on stderr (4000 characters at most); never fails."""
    if sys.stderr is None:
        return
    try:  # not contextlib.suppress: contextlib stays off the start path
        # A raw value in a message (an escape code) must not reach the terminal as such.
        text = printable(shorten(message, 4000), keep="\n")
        sys.stderr.write(f"derive-env: {kind}: {text}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def _write(text: str) -> int:
    """Print dry-run output; 0, or 1 with a message when stdout is closed or full."""
    if sys.stdout is None:
        say("error", "cannot write the dry-run output: stdout is closed")
        return 1
    try:
        # Kept values and session ids may hold undecodable bytes (surrogate escapes).
        sys.stdout.reconfigure(errors="backslashreplace")  # type: ignore[union-attr]
        sys.stdout.write(text)
        sys.stdout.flush()
    except (OSError, ValueError) as exc:
        say("error", f"cannot write the dry-run output to stdout ({exc})")
        # Drop what is still buffered, or the interpreter's final flush fails again (exit 120).
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 1
    return 0
