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
import stat
import sys
from collections.abc import Mapping, Sequence

from derive_env.errors import DeriveEnvError, LabelError, UsageError, shorten
from derive_env.labels import (
    DEFAULT_LABELS_FILE,
    LABELS_FILE_VARIABLE,
    PREFIX,
    check_not_opted_in,
    is_opted_in,
    join_problems,
    on_error_of,
    parse_label_option,
    parse_labels_document,
)

#: A variable name; compiled on first use (re caches it): only --env-file needs it.
_ENV_KEY = r"[A-Za-z_][A-Za-z0-9_]*\Z"


#: How the formats are named in messages (the format assumed is always said).
_LINES = "dotenv lines"
_ENVIRON_TXT = "Backend.AI environ.txt lines"
_NUL = "NUL-separated, as /proc/PID/environ and env -0"
_INSPECT = "docker inspect JSON"
_USE_NUL = ("capture the environment with `env -0` (or copy /proc/PID/environ, or "
            "`docker exec CONTAINER env -0`), which --env-file reads exactly")


def parse_env_file(text: str, origin: str) -> dict[str, str]:
    """Parse an ``--env-file``, detecting its format from its content.

    Formats (the one assumed is named in every error, after the file name):

    * NUL-separated ``KEY=VALUE`` entries, each ending in a NUL byte: ``/proc/PID/environ``,
      ``env -0``, ``docker exec CONTAINER env -0``. Exact: values may span lines, exported
      shell functions (``BASH_FUNC_f%%``) are carried as they are. Chosen when the text
      ends in a NUL byte.
    * ``docker inspect CONTAINER`` (or IMAGE) output: a JSON list of one object whose
      ``Config.Env`` lists ``KEY=VALUE`` strings; also the object alone, ``{{json .Config}}``
      (an object with ``Env``) and ``{{json .Config.Env}}`` (the list of strings). Chosen
      when the text starts with ``[`` or ``{`` (no variable name does).
    * Backend.AI's ``/home/config/environ.txt`` (a file of that name): ``KEY=VALUE`` lines
      taken as written, split at the first ``=``, as Backend.AI's kernel runner reads it.
    * Otherwise dotenv / ``env`` output ``KEY=VALUE`` lines: blank lines and lines starting
      with ``#`` are skipped; an ``export`` prefix is allowed; a value wholly inside matching
      single or double quotes loses them (no escapes are interpreted); otherwise the value
      is taken as written, less blanks at the line's ends. Lines end at ``\n`` (``\r\n``
      too). A value spanning lines or an exported shell function cannot be read from lines
      exactly: the error says to capture with ``env -0``.

    :param origin: how to name the file in messages (its path, or ``stdin``).
    :raises UsageError: (exit 2) an entry or line that is not ``KEY=VALUE``, JSON that is
        not ``docker inspect`` output, a NUL byte in a line file; the message names the file,
        the format assumed and the line or entry, never the value (it may be a secret).
    """
    if text.endswith("\0"):
        return _parse_nul(text, origin)
    if text.lstrip()[:1] in ("[", "{"):
        return _parse_inspect(text, origin)
    literal = origin.replace("\\", "/").rsplit("/", 1)[-1] == "environ.txt"
    return _parse_lines(text, origin, literal)


def _entry(item: str, where: str, entry_kind: str, number: int) -> tuple[str, str]:
    """``KEY=VALUE`` of one NUL-separated or JSON entry (any name but an empty one)."""
    key, sep, value = item.partition("=")
    if not sep or not key:
        got = "an empty name" if sep else "no '='"
        raise UsageError(f"{where}, {entry_kind} {number}: expected KEY=VALUE, got {got}")
    return key, value


def _parse_nul(text: str, origin: str) -> dict[str, str]:
    where = f"--env-file {origin} ({_NUL})"
    result: dict[str, str] = {}
    for number, item in enumerate(text[:-1].split("\0"), start=1):
        if item:  # an empty entry holds no variable
            key, value = _entry(item, where, "entry", number)
            result[key] = value
    return result


def _parse_inspect(text: str, origin: str) -> dict[str, str]:
    import json

    where = f"--env-file {origin} ({_INSPECT}, as it starts with {text.lstrip()[0]!r})"
    try:
        document = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise UsageError(f"{where}: not valid JSON ({shorten(str(exc))})") from None
    if isinstance(document, list) and document and all(isinstance(i, dict) for i in document):
        if len(document) > 1:
            raise UsageError(
                f"{where}: holds {len(document)} containers; inspect one (docker inspect "
                "CONTAINER > FILE)"
            )
        document = document[0]
    if isinstance(document, dict):
        config = document.get("Config")
        holder = config if isinstance(config, dict) else document
        if "Env" not in holder:
            raise UsageError(
                f"{where}: expected `docker inspect` output, an object with Config.Env (or "
                "Env); found none"
            )
        document = holder["Env"] if holder["Env"] is not None else []
    if not isinstance(document, list) or not all(isinstance(i, str) for i in document):
        raise UsageError(f"{where}: expected Config.Env to be a list of KEY=VALUE strings")
    result: dict[str, str] = {}
    for number, item in enumerate(document, start=1):
        key, value = _entry(item, where, "Env entry", number)
        if "\0" in item:
            raise UsageError(f"{where}, Env entry {number}: {key} contains a NUL byte, which "
                             "no environment variable can hold")
        result[key] = value
    return result


def _parse_lines(text: str, origin: str, literal: bool) -> dict[str, str]:
    where = f"--env-file {origin} ({_ENVIRON_TXT if literal else _LINES})"
    if "\0" in text:
        line = text[: text.index("\0")].count("\n") + 1
        raise UsageError(
            f"{where}, line {line}: contains a NUL byte, which no environment variable can "
            "hold; a NUL-separated file (env -0, /proc/PID/environ) ends in one: this one "
            "does not, so it was read as lines"
        )
    result: dict[str, str] = {}
    previous: tuple[str, int] | None = None  # the last variable read, for the hint
    # Lines end at \n only (and a \r before it): str.splitlines() would also cut values at
    # form feeds, \x1c-\x1e, \x85 and U+2028.
    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw[:-1] if raw.endswith("\r") else raw
        if literal:
            if not line:
                continue
            key, sep, value = line.partition("=")
        else:
            stripped = line.strip()
            if not stripped or stripped.startswith("#"):
                continue
            if stripped.startswith("export "):
                stripped = stripped[len("export "):].lstrip()
            key, sep, value = stripped.partition("=")
        if not sep or not re.match(_ENV_KEY, key):
            raise UsageError(_line_problem(where, number, key, sep, value, previous))
        if not literal and len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        result[key] = value
        previous = (key, number)
    return result


def _line_problem(
    where: str, number: int, key: str, sep: str, value: str, previous: tuple[str, int] | None
) -> str:
    """Why a line is not ``KEY=VALUE``, without showing it (it may hold a secret)."""
    if sep and key.startswith("BASH_FUNC_") and value.lstrip().startswith("()"):
        return (f"{where}, line {number}: {shorten(key, 60)} is an exported shell function, "
                f"which `env` prints over several lines; {_USE_NUL}")
    got = f"the name {shorten(key, 60)!r}" if sep else "a line without '='"
    message = f"{where}, line {number}: expected KEY=VALUE with KEY a variable name, got {got}"
    if previous is not None:
        message += (f"; if the file is `env` output, the value of {shorten(previous[0], 60)} "
                    f"(line {previous[1]}) may span lines: {_USE_NUL}")
    return message


#: Largest labels or env file read, in bytes: real ones are a few KiB; /dev/zero is not one.
MAX_INPUT_BYTES = 1 << 20
#: Largest file a source reads (a 4096-node step's SLURM_HOSTFILE of 8 tasks per node is
#: about 0.4 MiB).
MAX_SOURCE_FILE_BYTES = 16 << 20


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
            # O_NONBLOCK: opening a FIFO must not wait for a writer (it would stall the
            # container start with no message). Devices (/dev/null) are read as before.
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            with os.fdopen(fd, "rb") as handle:
                if os.fstat(fd).st_mode & 0o170000 in (0o010000, 0o140000):  # FIFO, socket
                    raise error(
                        f"{what} {shown}: a FIFO or socket, which can wait for a writer "
                        "forever; write it to a file first, or give - for stdin"
                    )
                os.set_blocking(fd, True)
                data = handle.read(MAX_INPUT_BYTES + 1)
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


def read_environment(env_file: str | None) -> dict[str, str]:
    """The input environment: the ``--env-file`` when given (any format of
    :func:`parse_env_file`), else the process's own.

    The process's own is the one derive-env was started with: CPython's C-locale coercion
    (PEP 538) adds ``LC_CTYPE=C.UTF-8`` to ``os.environ`` at start-up, which must not reach
    the command: ``LC_CTYPE`` is taken back as ``/proc/self/environ`` had it (or dropped).
    """
    if env_file is not None:
        text = _read_text(env_file, "--env-file", UsageError)
        origin = "stdin" if env_file == "-" else env_file
        parsed = parse_env_file(text or "", origin)
        for key, value in parsed.items():
            try:
                os.fsencode(key)
                os.fsencode(value)
            except UnicodeEncodeError:
                # JSON's \ud800 escapes: a lone surrogate no exec'd environment can hold.
                raise UsageError(
                    f"--env-file {origin}: variable {shorten(ascii(key), 120)} holds a lone "
                    "UTF-16 surrogate (a JSON escape such as \\ud800), which no environment "
                    "variable can hold"
                ) from None
        return parsed
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
        ``--label`` that cannot be parsed: every such problem of every source in one message.
    """
    labels: dict[str, str] = {}
    problems: list[str] = []

    def read(path: str, what: str, missing_ok: bool = False) -> None:
        try:
            text = _read_text(path, what, LabelError, missing_ok=missing_ok)
            if text is not None or not missing_ok:
                labels.update(parse_labels_document(text or "", "stdin" if path == "-" else path))
        except LabelError as exc:
            problems.append(str(exc))

    baked = environ.get(LABELS_FILE_VARIABLE) or os.environ.get(LABELS_FILE_VARIABLE) or None
    read(baked or DEFAULT_LABELS_FILE,
         f"labels file (${LABELS_FILE_VARIABLE})" if baked else "labels file", baked is None)
    for labels_file in labels_files:
        read(labels_file, "--labels-file")
    for item in label_items:
        try:
            key, value = parse_label_option(item)
        except LabelError as exc:
            problems.append(str(exc))
            continue
        labels[key] = value
    if problems:
        raise LabelError(join_problems(problems))
    return labels


def gather_facts(full: bool = True):  # -> HostFacts; imported lazily with the pipeline
    """Read this container's network facts (frameworks/network.py's rules).

    :param full: everything label ``socket-ifname`` uses: interface names
        (``/sys/class/net``), routes (``/proc/net/route``, ``ipv6_route``), own addresses
        (``if_inet6``, ``fib_trie``), ``/etc/hosts``, the host name, and a resolver bounded
        by ``RESOLVE_SECONDS`` (5 s) for all names of this start together. ``False`` (no
        label): only whether ``baimulti0`` exists, one stat.
        Always: the kernel's ephemeral and reserved port ranges (``/proc/sys/net/ipv4/``
        ``ip_local_port_range``, ``ip_local_reserved_ports``), for the port policy.
    :returns: a ``HostFacts``; unreadable files read as empty (the port files as ``None``).
    """
    from derive_env.frameworks.context import RESOLVE_SECONDS, HostFacts
    from derive_env.frameworks.network import OVERLAY

    ports = {"port_range": _text_or_none("/proc/sys/net/ipv4/ip_local_port_range"),
             "reserved_ports": _text_or_none("/proc/sys/net/ipv4/ip_local_reserved_ports")}
    if not full:
        present = os.path.exists(f"/sys/class/net/{OVERLAY}")
        return HostFacts(interfaces=(OVERLAY,) if present else (), **ports)
    import socket

    def read(path: str) -> str:
        try:
            with open(path, encoding="ascii", errors="replace") as handle:
                return handle.read()
        except OSError:
            return ""

    try:
        interfaces = tuple(sorted(os.listdir("/sys/class/net")))
    except OSError:
        interfaces = ()
    return HostFacts(
        interfaces=interfaces,
        routes_v4=read("/proc/net/route"),
        routes_v6=read("/proc/net/ipv6_route"),
        addresses_v6=read("/proc/net/if_inet6"),
        local_v4=read("/proc/net/fib_trie"),
        hosts=read("/etc/hosts"),
        hostname=socket.gethostname(),
        resolve=Resolver(RESOLVE_SECONDS),
        **ports,
    )


def _text_or_none(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


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


class Resolver:
    """Resolve host names at once, all calls of one start sharing one deadline.

    Each name gets a daemon thread that calls ``getaddrinfo`` and, while the name is unknown,
    retries every 0.25 s (containers start together: a peer's name may appear in Docker's
    DNS a moment later). The caller waits until every name it asked for has an answer or
    the deadline, ``seconds`` after the first call, has passed; a lookup still hanging then
    (a DNS server that does not answer) is left behind: daemon threads neither delay the
    exit nor survive the exec. SIGTERM and SIGINT during the wait end the process at once
    (:func:`exit_on_signals`).

    :param seconds: the bound for all names of all calls together, in seconds.
    :param lookup: ``socket.getaddrinfo``'s signature (tests pass a slow or failing one).
    """

    RETRY_SECONDS = 0.25

    def __init__(self, seconds: float, lookup=None) -> None:
        import socket
        import threading

        self._seconds = seconds
        self._lookup = lookup or socket.getaddrinfo
        self._deadline: float | None = None
        self._results: dict[str, tuple[str, ...]] = {}
        self._started: set[str] = set()
        self._done = threading.Condition()

    def __call__(self, names: Sequence[str]) -> dict[str, tuple[str, ...]]:
        """``{name: addresses}`` for ``names``, ``()`` for a name without an answer in time."""
        import threading
        import time

        if self._deadline is None:
            self._deadline = time.monotonic() + self._seconds
        wanted = list(dict.fromkeys(names))
        for name in wanted:
            if name not in self._started:
                self._started.add(name)
                threading.Thread(target=self._resolve, args=(name,), daemon=True,
                                 name=f"resolve {name}").start()
        with exit_on_signals("resolving host names (label socket-ifname)"), self._done:
            while any(name not in self._results for name in wanted):
                remaining = self._deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._done.wait(remaining)
            return {name: self._results.get(name, ()) for name in wanted}

    def _resolve(self, name: str) -> None:
        import socket
        import time

        assert self._deadline is not None
        addresses: tuple[str, ...] = ()
        while True:
            try:
                infos = self._lookup(name, None, type=socket.SOCK_STREAM)
                addresses = tuple(dict.fromkeys(str(info[4][0]) for info in infos))
                break
            except UnicodeError:  # not a name IDNA can encode: it never resolves
                break
            except OSError:  # gaierror: unknown yet, or DNS not answering
                if time.monotonic() + self.RETRY_SECONDS >= self._deadline:
                    break
                time.sleep(self.RETRY_SECONDS)
        with self._done:
            self._results[name] = addresses
            self._done.notify_all()


def exit_on_signals(what: str):  # -> contextlib.AbstractContextManager[None]
    """While the body waits: SIGTERM or SIGINT exits 143 or 130 at once, running nothing.

    A process that is PID 1 (the image's ENTRYPOINT without tini) gets no default action for
    any signal, so without a handler ``docker stop``'s SIGTERM would be ignored and the
    command run anyway. The handlers are installed in the main thread only, and the previous
    ones put back afterwards (the exec resets caught signals to their default anyway); a
    signal inherited as ignored stays ignored, as it would reach the command.

    :param what: the wait, for the message (``... while <what>``).
    """
    # contextlib here, not at module level: importing it is ~3% of a plain start.
    import contextlib

    return contextlib.contextmanager(_exit_on_signals)(what)


def _exit_on_signals(what: str):
    import signal
    import threading

    def handler(signum: int, frame: object) -> None:
        code = 128 + signum
        _say("error", f"interrupted by {signal.Signals(signum).name} while {what}: "
                      f"nothing was run (exit {code})")
        os._exit(code)

    saved = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGINT):
            previous = signal.getsignal(signum)
            if previous is not signal.SIG_IGN:
                saved[signum] = signal.signal(signum, handler)
    try:
        yield
    finally:
        for signum, previous in saved.items():
            signal.signal(signum, signal.SIG_DFL if previous is None else previous)


def interrupted() -> int:
    """Ctrl-C (SIGINT) before the exec, on every path: say so, exit status 130 (errors.py)."""
    _say("error", "interrupted before the exec (SIGINT); nothing was run")
    return 130


def _say(kind: str, message: str) -> None:
    """One line on stderr; a closed or broken stderr must not change what happens next."""
    if sys.stderr is None:
        return
    try:  # not contextlib.suppress: importing contextlib is ~3% of a plain start
        sys.stderr.write(f"derive-env: {kind}: {shorten(message, 4000)}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def run(
    command: Sequence[str],
    *,
    dry_run: bool = False,
    fmt: str = "env",
    explain: bool = False,
    labels_files: Sequence[str] = (),
    label_items: Sequence[str] = (),
    env_file: str | None = None,
    source: str | None = None,
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
        # The files a source names (SLURM_HOSTFILE) are read for --env-file too: they sit on
        # a shared file system where the operator runs the dry run, as in the job.
        files = read_files
        if dry_run and not explain and _is_host_format(fmt):
            return _write(_host_list(environ, labels, fmt, source, files))
        if not opted_in:
            return _finish(command, environ, None, dry_run, fmt, explain)
        # Host facts describe this machine: meaningless for another container's --env-file.
        derivation = _derive(
            environ, labels, command, dry_run, explain, host_facts=env_file is None,
            source=source, files=files,
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


def _host_list(environ: Mapping[str, str], labels: Mapping[str, str], fmt: str,
               source: str | None, files) -> str:
    """``--format hosts`` and the hostfiles: from the topology, whether opted in or not."""
    _before_pydantic()
    from derive_env.hostfiles import render_for

    return render_for(environ, labels, fmt, source, files)


def _before_pydantic() -> None:
    """The stand-ins that keep pydantic's first model cheap (every path that builds one)."""
    _without_pydantic_plugins()
    _without_secrets_until_used()


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
    def get_plugins(*args: object, **kwargs: object) -> tuple[()]:
        return ()

    _stand_in("pydantic.plugin._loader", get_plugins=get_plugins)


def _without_secrets_until_used() -> None:
    """Keep ``secrets`` (and OpenSSL's libcrypto) unloaded until something uses it.

    ``pydantic.types``, imported with the first model, imports ``secrets`` at module level
    for one call, ``secrets.compare_digest`` in ``Secret.__eq__``, which derive-env's
    models never reach; ``secrets`` imports ``hmac``, ``hashlib`` and ``_hashlib``, which
    loads libcrypto: about 5 ms, 0.05x of the pydantic import, on every opted-in start
    (docs/performance.md). The stand-in holds nothing: the first use of any name loads the
    real module, as an import would have. (``importlib.util.LazyLoader`` cannot do this:
    the second ``import secrets`` reads ``__spec__``, which loads it.) Only derive-env's
    own process is affected: the exec'd program starts a new interpreter.
    """
    _stand_in("secrets")


def _stand_in(name: str, **attributes: object) -> None:
    """Put a stand-in for module ``name`` in ``sys.modules``, unless it is loaded already.

    The stand-in has ``attributes``; any other name loads the real module (which then
    replaces the stand-in in ``sys.modules``) and is taken from it. Dunder names raise
    AttributeError, so the import system's probes (``__path__``...) import nothing.
    """
    if name in sys.modules:
        return
    import types

    stub = types.ModuleType(name)

    def real(attribute: str) -> object:
        if attribute.startswith("__"):  # the import system probing (__path__ ...)
            raise AttributeError(attribute)
        if sys.modules.get(name) is stub:
            del sys.modules[name]
        from importlib import import_module

        return getattr(import_module(name), attribute)

    vars(stub).update(attributes)
    stub.__getattr__ = real  # type: ignore[method-assign]
    sys.modules[name] = stub


def _derive(
    environ: Mapping[str, str],
    labels: Mapping[str, str],
    command: Sequence[str],
    dry_run: bool,
    explain: bool,
    host_facts: bool,
    source: str | None = None,
    files=None,
):
    _before_pydantic()
    from derive_env.errors import EnvironmentTooLarge
    from derive_env.launch import check_limits
    from derive_env.pipeline import derive

    arg_max = os.sysconf("SC_ARG_MAX")
    try:
        # Read only if a rule asks (ctx.facts); everything only with the socket-ifname label.
        full = PREFIX + "socket-ifname" in labels
        derivation = derive(environ, labels, (lambda: gather_facts(full)) if host_facts else None,
                            source, files)
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
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
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


#: The dry-run options :func:`dry_run_options` parses itself (the flags, and the options with
#: a value), mapped to the keyword of :func:`run` that click's command (cli.py) fills.
_FLAGS = {"--dry-run": "dry_run", "--explain": "explain"}
_VALUED = {"--format": "fmt", "--label": "label_items", "--labels-file": "labels_files",
           "--env-file": "env_file", "--source": "source"}


def dry_run_options(args: Sequence[str]) -> dict[str, object] | None:
    """The keyword arguments of :func:`run` for a dry-run command line, parsed without click.

    For the hook (``derive-env --dry-run --format shell``, on every Backend.AI container
    start) and the operator's dry runs: importing click costs more than the whole derivation
    (docs/performance.md). Accepted, in any order: ``--dry-run``, ``--explain``,
    ``--format NAME`` / ``--format=NAME`` with a name of :data:`derive_env.formats.FORMATS`
    (once), and ``--label``, ``--labels-file`` (repeatable), ``--env-file``, ``--source``
    (once each), each
    ``--option VALUE`` or ``--option=VALUE``, the value taken verbatim as click takes it.

    It only ever answers for a command line that click's command (cli.py) accepts with the
    same meaning, and ``None`` for everything else (a command or ``--``, another option,
    ``--help``, a missing or unknown value, a repeated ``--format``, no ``--dry-run``,
    ``--explain`` with ``--format``, two ``--env-file`` or ``--source``, stdin for both
    ``--env-file`` and ``--labels-file``; a check added to cli.py must be added here): click
    then parses it and says what is wrong, so messages and exit codes are click's
    (tests/test_fast_path.py compares both paths).

    :param args: the command line without the program name.
    :returns: ``run()``'s keyword arguments (``command`` excluded: a dry run has none here).
    """
    from derive_env.formats import FORMATS

    found: dict[str, list[str]] = {"fmt": [], "label_items": [], "labels_files": [],
                                   "env_file": [], "source": []}
    flags = {"dry_run": False, "explain": False}
    position = 0
    while position < len(args):
        arg = args[position]
        position += 1
        if arg in _FLAGS:
            flags[_FLAGS[arg]] = True  # click accepts a flag twice
            continue
        name, equals, value = arg.partition("=")
        if name not in _VALUED:
            return None
        if not equals:  # the value is the next word, whatever it is (as click takes it)
            if position == len(args):
                return None
            value = args[position]
            position += 1
        found[_VALUED[name]].append(value)
    fmt, env_file, source = found["fmt"], found["env_file"], found["source"]
    if (not flags["dry_run"] or len(fmt) > 1 or (fmt and fmt[0] not in FORMATS)
            or (flags["explain"] and fmt) or len(env_file) > 1 or len(source) > 1
            or ("-" in env_file and "-" in found["labels_files"])):  # cli.py's checks
        return None
    return {
        "dry_run": True, "fmt": fmt[0] if fmt else "env", "explain": flags["explain"],
        "labels_files": tuple(found["labels_files"]), "label_items": tuple(found["label_items"]),
        "env_file": env_file[0] if env_file else None,
        "source": source[0] if source else None,
    }


def run_command(command: Sequence[str]) -> int:
    """The ENTRYPOINT path ``derive-env [--] CMD ARG...`` with no options (no click import)."""
    if not command:
        _say("error", "no command given. Usage: derive-env [OPTIONS] -- COMMAND [ARG]... "
                      "or derive-env --dry-run (see derive-env --help)")
        return 2
    return run(command)
