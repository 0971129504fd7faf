"""The command line's I/O half: read the real inputs, run the pipeline, print or exec.

This module and cli.py are the only places that read the process environment, files or
the host (interfaces, routes, name resolution); everything they read is handed to the pure
pipeline. It imports neither pydantic nor click at module level, so that the ENTRYPOINT
path ``derive-env -- CMD`` of an image that did not opt in costs one small JSON read
before the exec.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping, Sequence

from derive_env.errors import DeriveEnvError, LabelError, UsageError, shorten
from derive_env.labels import (
    DEFAULT_LABELS_FILE,
    LABELS_FILE_VARIABLE,
    PREFIX,
    is_opted_in,
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
            raise UsageError(
                f"--env-file {origin}, line {number}: expected KEY=VALUE with KEY a variable "
                f"name, got {shorten(line)!r}"
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


def _read_text(path: str, what: str, error: type[DeriveEnvError]) -> str:
    try:
        if path == "-":
            return sys.stdin.read()
        with open(path, "rb") as handle:
            return handle.read().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{what} {path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise error(f"{what} {path}: cannot be read ({exc.strerror})") from None


def read_environment(env_file: str | None) -> dict[str, str]:
    """The input environment: the ``--env-file`` when given, else the process's own.

    The process's own is the one derive-env was started with: CPython's C-locale coercion
    (PEP 538) adds ``LC_CTYPE=C.UTF-8`` to ``os.environ`` at start-up, which must not reach
    the command, so a ``LC_CTYPE`` absent from ``/proc/self/environ`` is dropped.
    """
    if env_file is not None:
        return parse_env_file(_read_text(env_file, "--env-file", UsageError), env_file)
    environ = dict(os.environ)
    if "LC_CTYPE" in environ:
        try:
            with open("/proc/self/environ", "rb") as handle:
                initial = handle.read()
        except OSError:
            return environ
        if not any(item.startswith(b"LC_CTYPE=") for item in initial.split(b"\0")):
            del environ["LC_CTYPE"]
    return environ


def load_labels(
    environ: Mapping[str, str],
    labels_file: str | None = None,
    label_items: Sequence[str] = (),
) -> dict[str, str]:
    """Gather the image's labels, later wins: labels file, ``--labels-file``, ``--label``.

    The baked-in file is ``$DERIVE_ENV_LABELS_FILE`` (from the input environment, else from
    this process's: an ``--env-file`` rarely repeats the image's ``ENV``) or
    ``/etc/derive-env/labels.json``; missing at the default path means no labels.

    :raises LabelError: an explicitly named file that cannot be read, or any file or
        ``--label`` that cannot be parsed.
    """
    labels: dict[str, str] = {}
    baked = environ.get(LABELS_FILE_VARIABLE) or os.environ.get(LABELS_FILE_VARIABLE) or None
    path = baked or DEFAULT_LABELS_FILE
    what = f"labels file (${LABELS_FILE_VARIABLE})" if baked else "labels file"
    if baked is not None or os.path.exists(path):
        labels.update(parse_labels_document(_read_text(path, what, LabelError), path))
    if labels_file is not None:
        origin = "stdin" if labels_file == "-" else labels_file
        text = _read_text(labels_file, "--labels-file", LabelError)
        labels.update(parse_labels_document(text, origin))
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
    sys.stderr.write(f"derive-env: {kind}: {shorten(message, 4000)}\n")


def run(
    command: Sequence[str],
    *,
    dry_run: bool = False,
    fmt: str = "env",
    explain: bool = False,
    labels_file: str | None = None,
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
        labels = load_labels(environ, labels_file, label_items)
        if not is_opted_in(labels):
            return _finish(command, environ, None, dry_run, fmt, explain)
        # Host facts describe this machine: meaningless for another container's --env-file.
        derivation = _derive(environ, labels, dry_run, host_facts=env_file is None)
        if derivation is None:  # on-error=warn: already reported
            if dry_run:
                return 0
            return _finish(command, environ, None, False, fmt, explain)
        return _finish(command, environ, derivation, dry_run, fmt, explain)
    except DeriveEnvError as exc:
        _say("error", str(exc))
        if command and not dry_run:
            _say("note", f"the command was not run (exit {exc.exit_code})")
        return exc.exit_code


def _derive(
    environ: Mapping[str, str], labels: Mapping[str, str], dry_run: bool, host_facts: bool
):
    from derive_env.errors import EnvironmentTooLarge
    from derive_env.launch import check_limits
    from derive_env.pipeline import derive
    from derive_env.policy import on_error_of

    arg_max = os.sysconf("SC_ARG_MAX")
    try:
        wants_facts = host_facts and PREFIX + "socket-ifname" in labels
        derivation = derive(environ, labels, gather_facts() if wants_facts else None)
        assert derivation is not None  # opted in, checked by the caller
        check_limits((), {**environ, **derivation.changes()}, arg_max)
    except DeriveEnvError as exc:
        if isinstance(exc, EnvironmentTooLarge):
            # Too large already without derived variables: on-error=warn cannot help.
            check_limits((), environ, arg_max)
        if on_error_of(labels) != "warn":
            raise
        _say("warning", str(exc))
        _say("warning", "on-error=warn: " + (
            "nothing derived" if dry_run else "running the command with the environment unchanged"
        ))
        return None
    for warning in derivation.warnings:
        _say("warning", warning)
    return derivation


def _finish(command, environ, derivation, dry_run: bool, fmt: str, explain: bool) -> int:
    if dry_run:
        from derive_env import render

        text = render.explain(derivation) if explain else render.render(derivation, fmt)
        sys.stdout.write(text)
        sys.stdout.flush()
        return 0
    from derive_env.launch import exec_command

    changes = derivation.changes() if derivation else {}
    exec_command(command, {**environ, **changes})


def run_command(command: Sequence[str]) -> int:
    """The ENTRYPOINT path ``derive-env [--] CMD ARG...`` with no options (no click import)."""
    if not command:
        _say("error", "no command given. Usage: derive-env [OPTIONS] -- COMMAND [ARG]... "
                      "or derive-env --dry-run (see derive-env --help)")
        return 2
    return run(command)
