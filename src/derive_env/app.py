"""The command line's I/O half: read the real inputs, run the pipeline, print or exec.

This module and cli.py are the only places that read the process environment, files or
the host (interfaces, routes, name resolution); everything they read is handed to the pure
pipeline. It imports neither pydantic nor click at module level, so that the ENTRYPOINT
path ``derive-env -- CMD`` of an image that did not opt in costs one small JSON read
before the exec.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections.abc import Mapping, Sequence

from derive_env.errors import DeriveEnvError, LabelError, UsageError, shorten
from derive_env.labels import (
    DEFAULT_LABELS_FILE,
    LABELS_FILE_VARIABLE,
    PREFIX,
    check_not_opted_in,
    is_opted_in,
    on_error_of,
    parse_label_option,
    parse_labels_document,
)

_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def parse_env_file(text: str, origin: str) -> dict[str, str]:
    """Parse dotenv ``KEY=VALUE`` lines (as ``--env-file`` takes them).

    Blank lines and lines starting with ``#`` are skipped; an ``export`` prefix is allowed;
    a value wholly inside matching single or double quotes loses them (no escapes are
    interpreted); otherwise the value is taken as written, less blanks at the line's ends.
    Lines end at ``\n`` (``\r\n`` too).

    :raises UsageError: a line that is not ``KEY=VALUE`` with a valid variable name, or a
        value holding a NUL byte.
    """
    result: dict[str, str] = {}
    # Lines end at \n only (and a \r before it): str.splitlines() would also cut values at
    # form feeds, \x1c-\x1e, \x85 and U+2028.
    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw[:-1] if raw.endswith("\r") else raw
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.startswith("export "):
            stripped = stripped[len("export "):].lstrip()
        key, sep, value = stripped.partition("=")
        if not sep or not _ENV_KEY.match(key):
            # The line itself is not shown: it may hold a secret.
            got = f"the name {shorten(key, 60)!r}" if sep else "a line without '='"
            raise UsageError(
                f"--env-file {origin}, line {number}: expected KEY=VALUE with KEY a variable "
                f"name, got {got}"
            )
        if "\0" in value:
            raise UsageError(
                f"--env-file {origin}, line {number}: {key} contains a NUL byte, which no "
                "environment variable can hold"
            )
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        result[key] = value
    return result


#: Largest labels or env file read, in bytes: real ones are a few KiB; /dev/zero is not one.
MAX_INPUT_BYTES = 1 << 20


def _read_text(
    path: str, what: str, error: type[DeriveEnvError], *, missing_ok: bool = False
) -> str | None:
    """Read a small UTF-8 file (``-``: stdin); ``None`` when missing and ``missing_ok``.

    :raises error: unreadable, larger than :data:`MAX_INPUT_BYTES`, or not UTF-8.
    """
    shown = "stdin" if path == "-" else repr(path)
    try:
        if path == "-":
            if sys.stdin is None:
                raise error(f"{what} -: stdin is closed")
            data = sys.stdin.buffer.read(MAX_INPUT_BYTES + 1)
        else:
            with open(path, "rb") as handle:
                data = handle.read(MAX_INPUT_BYTES + 1)
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


def read_environment(env_file: str | None) -> dict[str, str]:
    """The input environment: the ``--env-file`` when given, else the process's own.

    The process's own is the one derive-env was started with: CPython's C-locale coercion
    (PEP 538) adds ``LC_CTYPE=C.UTF-8`` to ``os.environ`` at start-up, which must not reach
    the command: ``LC_CTYPE`` is taken back as ``/proc/self/environ`` had it (or dropped).
    """
    if env_file is not None:
        text = _read_text(env_file, "--env-file", UsageError)
        return parse_env_file(text or "", "stdin" if env_file == "-" else env_file)
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


def load_labels(
    environ: Mapping[str, str],
    labels_files: Sequence[str] = (),
    label_items: Sequence[str] = (),
) -> dict[str, str]:
    """Gather the image's labels, later wins: labels file, ``--labels-file``s, ``--label``s.

    The baked-in file is ``$DERIVE_ENV_LABELS_FILE`` (from the input environment, else from
    this process's: an ``--env-file`` rarely repeats the image's ``ENV``) or
    ``/etc/derive-env/labels.json``; only a default file that does not exist (ENOENT) means
    no labels, any other failure to read it is an error.

    :raises LabelError: a file that cannot be read (but the missing default) or parsed, or a
        ``--label`` that cannot be parsed.
    """
    labels: dict[str, str] = {}
    baked = environ.get(LABELS_FILE_VARIABLE) or os.environ.get(LABELS_FILE_VARIABLE) or None
    path = baked or DEFAULT_LABELS_FILE
    what = f"labels file (${LABELS_FILE_VARIABLE})" if baked else "labels file"
    text = _read_text(path, what, LabelError, missing_ok=baked is None)
    if text is not None:
        labels.update(parse_labels_document(text, path))
    for labels_file in labels_files:
        text = _read_text(labels_file, "--labels-file", LabelError) or ""
        labels.update(parse_labels_document(text, "stdin" if labels_file == "-" else labels_file))
    for item in label_items:
        key, value = parse_label_option(item)
        labels[key] = value
    return labels


def gather_facts():  # -> HostFacts; imported lazily with the pipeline
    """Read this container's interfaces, routes and name resolution (socket-ifname label)."""
    import socket
    import time

    from derive_env.frameworks import HostFacts

    def read(path: str) -> str:
        try:
            with open(path, encoding="ascii", errors="replace") as handle:
                return handle.read()
        except OSError:
            return ""

    def resolve(host: str) -> tuple[str, ...]:
        # Names may take a moment to appear in Docker's embedded DNS: retry for up to 5 s.
        deadline = time.monotonic() + 5.0
        while True:
            try:
                infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
                return tuple(dict.fromkeys(str(info[4][0]) for info in infos))
            except (socket.gaierror, UnicodeError):
                if time.monotonic() > deadline:
                    return ()
                time.sleep(0.25)

    try:
        interfaces = tuple(sorted(os.listdir("/sys/class/net")))
    except OSError:
        interfaces = ()
    return HostFacts(
        interfaces=interfaces,
        routes_v4=read("/proc/net/route"),
        routes_v6=read("/proc/net/ipv6_route"),
        addresses_v6=read("/proc/net/if_inet6"),
        hostname=socket.gethostname(),
        resolve=resolve,
    )


def _say(kind: str, message: str) -> None:
    """One line on stderr; a closed or broken stderr must not change what happens next."""
    if sys.stderr is None:
        return
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(f"derive-env: {kind}: {shorten(message, 4000)}\n")
        sys.stderr.flush()


def run(
    command: Sequence[str],
    *,
    dry_run: bool = False,
    fmt: str = "env",
    explain: bool = False,
    labels_files: Sequence[str] = (),
    label_items: Sequence[str] = (),
    env_file: str | None = None,
) -> int:
    """Do what the command line asked; returns the exit status (or execs and never returns).

    Errors from input print ``derive-env: error: ...`` and return their exit code without
    running the command; with label ``on-error=warn`` a derivation error prints a warning
    and the command runs with its environment unchanged.
    """
    try:
        environ = read_environment(env_file)
        labels = load_labels(environ, labels_files, label_items)
        opted_in = is_opted_in(labels)
        if not opted_in:
            _check_not_opted_in(labels)
        if dry_run and not explain and _is_host_format(fmt):
            return _write(_host_list(environ, labels, fmt))
        if not opted_in:
            return _finish(command, environ, None, dry_run, fmt, explain)
        # Host facts describe this machine: meaningless for another container's --env-file.
        derivation = _derive(
            environ, labels, command, dry_run, explain, host_facts=env_file is None
        )
        if derivation is None and dry_run and explain:  # on-error=warn, already reported
            return _write("nothing derived: on-error=warn (see the warning above)\n")
        return _finish(command, environ, derivation, dry_run, fmt, explain)
    except DeriveEnvError as exc:
        _say("error", str(exc))
        if command and not dry_run:
            _say("note", f"the command was not run (exit {exc.exit_code})")
        return exc.exit_code


def _check_not_opted_in(labels: Mapping[str, str]) -> None:
    """Stray distributed labels without the opt-in one: an error, or a warning with warn."""
    try:
        check_not_opted_in(labels)
    except LabelError as exc:
        if on_error_of(labels) != "warn":
            raise
        _say("warning", str(exc))


def _is_host_format(fmt: str) -> bool:
    from derive_env.hostfiles import HOST_FORMATS  # not needed on the exec path

    return fmt in HOST_FORMATS


def _host_list(environ: Mapping[str, str], labels: Mapping[str, str], fmt: str) -> str:
    """``--format hosts`` and the hostfiles: from the topology, whether opted in or not."""
    _without_pydantic_plugins()
    from derive_env.hostfiles import render_for

    return render_for(environ, labels, fmt)


def _without_pydantic_plugins() -> None:
    """Keep pydantic from importing ``importlib.metadata`` to look for plugins.

    When the first model is built, pydantic imports its plugin loader
    (``pydantic.plugin._loader``, private), which imports ``importlib.metadata`` and scans
    every installed distribution: ~0.25x of the pydantic import on every opted-in container
    start (docs/performance.md). derive-env's models use no plugin, and the exec'd program
    is a new process that loads its own. The stand-in answers ``get_plugins()`` with none and
    hands any other name to the real module, so a pydantic that changes its loader costs
    the speed-up, never a failure.
    """
    name = "pydantic.plugin._loader"
    if name in sys.modules:
        return
    import types

    stub = types.ModuleType(name)

    def get_plugins(*args: object, **kwargs: object) -> tuple[()]:
        return ()

    def real(attribute: str) -> object:
        if attribute.startswith("__"):  # the import system probing (__path__ ...)
            raise AttributeError(attribute)
        del sys.modules[name]
        from importlib import import_module

        return getattr(import_module(name), attribute)

    stub.get_plugins = get_plugins  # type: ignore[attr-defined]
    stub.__getattr__ = real  # type: ignore[method-assign]
    sys.modules[name] = stub


def _derive(
    environ: Mapping[str, str],
    labels: Mapping[str, str],
    command: Sequence[str],
    dry_run: bool,
    explain: bool,
    host_facts: bool,
):
    _without_pydantic_plugins()
    from derive_env.errors import EnvironmentTooLarge
    from derive_env.launch import check_limits
    from derive_env.pipeline import derive

    arg_max = os.sysconf("SC_ARG_MAX")
    try:
        wants_facts = host_facts and PREFIX + "socket-ifname" in labels
        derivation = derive(environ, labels, gather_facts() if wants_facts else None)
        assert derivation is not None  # opted in, checked by the caller
        check_limits(command, {**environ, **derivation.changes()}, arg_max)
    except DeriveEnvError as exc:
        if isinstance(exc, EnvironmentTooLarge):
            # Too large already without derived variables: on-error=warn cannot help.
            check_limits(command, environ, arg_max)
        if on_error_of(labels) != "warn":
            raise
        _say("warning", str(exc))
        _say("warning", "on-error=warn: " + (
            "nothing derived" if dry_run else "running the command with the environment unchanged"
        ))
        return None
    if not (dry_run and explain):  # --explain prints them in its own output
        for warning in derivation.warnings:
            _say("warning", warning)
    return derivation


def _write(text: str) -> int:
    """Print dry-run output; 0, or 1 with a message when stdout is closed or full."""
    if sys.stdout is None:
        _say("error", "cannot write the dry-run output: stdout is closed")
        return 1
    try:
        # Kept values and session ids may hold undecodable bytes (surrogate escapes).
        sys.stdout.reconfigure(errors="backslashreplace")  # type: ignore[union-attr]
        sys.stdout.write(text)
        sys.stdout.flush()
    except (OSError, ValueError) as exc:
        _say("error", f"cannot write the dry-run output to stdout ({exc})")
        # Drop what is still buffered, or the interpreter's final flush fails again (exit 120).
        with contextlib.suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return 1
    return 0


def _finish(command, environ, derivation, dry_run: bool, fmt: str, explain: bool) -> int:
    if dry_run:
        from derive_env import render

        return _write(render.explain(derivation) if explain else render.render(derivation, fmt))
    from derive_env.launch import exec_command

    if derivation is None:  # not opted in, or on-error=warn: the environment unchanged
        exec_command(command, environ)
    # _derive checked these exact argv and environment against the kernel's limits.
    exec_command(command, {**environ, **derivation.changes()}, limits_checked=True)


def run_command(command: Sequence[str]) -> int:
    """The ENTRYPOINT path ``derive-env [--] CMD ARG...`` with no options (no click import)."""
    if not command:
        _say("error", "no command given. Usage: derive-env [OPTIONS] -- COMMAND [ARG]... "
                      "or derive-env --dry-run (see derive-env --help)")
        return 2
    return run(command)
