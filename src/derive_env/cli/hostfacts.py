"""This container's network, for label ``socket-ifname``; signals while waiting on it.

What frameworks/network.py's rules read when the image sets label ``socket-ifname``:
interface names (``/sys/class/net``), routes (``/proc/net/route``, ``ipv6_route``), own
addresses (``if_inet6``, ``fib_trie``), ``/etc/hosts``, the host name, and a resolver bounded
by one deadline for all names of this start. Loaded only with that label: the facts every
opted-in start reads (whether ``baimulti0`` exists; the port range, for a hashed port) are
read by :func:`derive_env.cli.gather_facts` without this module.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing
if TYPE_CHECKING:
    from derive_env.frameworks.context import HostFacts


def network_facts(port_range: Callable[[], str | None]) -> HostFacts:
    """Every network fact of this container.

    :param port_range: reads the text of ``ip_local_port_range`` (``None``: unreadable),
        called only when a port is derived by hash.
    :returns: a ``HostFacts`` whose ``resolve`` is a :class:`Resolver` bounded by
        ``RESOLVE_SECONDS`` (5 s); unreadable files read as empty, a missing
        ``/sys/class/net`` as no interface.
    """
    from derive_env.frameworks.context import RESOLVE_SECONDS, HostFacts

    try:
        interfaces = tuple(sorted(os.listdir("/sys/class/net")))
    except OSError:
        interfaces = ()
    return HostFacts(
        interfaces=interfaces,
        routes_v4=_read("/proc/net/route"),
        routes_v6=_read("/proc/net/ipv6_route"),
        addresses_v6=_read("/proc/net/if_inet6"),
        local_v4=_read("/proc/net/fib_trie"),
        hosts=_read("/etc/hosts"),
        hostname=socket.gethostname(),
        resolve=Resolver(RESOLVE_SECONDS),
        port_range=port_range,
    )


def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii", errors="replace") as handle:
            return handle.read()
    except OSError:
        return ""


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
        self._seconds = seconds
        self._lookup = lookup or socket.getaddrinfo
        self._deadline: float | None = None
        self._results: dict[str, tuple[str, ...]] = {}
        self._started: set[str] = set()
        self._done = threading.Condition()

    def __call__(self, names: Sequence[str]) -> dict[str, tuple[str, ...]]:
        """``{name: addresses}`` for ``names``, ``()`` for a name without an answer in time."""
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


@contextlib.contextmanager
def exit_on_signals(what: str) -> Iterator[None]:
    """While the body waits: SIGTERM or SIGINT exits 143 or 130 at once, running nothing.

    A process that is PID 1 (the image's ENTRYPOINT without tini) gets no default action for
    any signal, so without a handler ``docker stop``'s SIGTERM would be ignored and the
    command run anyway. The handlers are installed in the main thread only, and the previous
    ones put back afterwards (the exec resets caught signals to their default anyway); a
    signal inherited as ignored stays ignored, as it would reach the command.

    :param what: the wait, for the message (``... while <what>``).
    """
    def handler(signum: int, frame: object) -> None:
        code = 128 + signum
        line = (f"derive-env: error: interrupted by {signal.Signals(signum).name} while "
                f"{what}: nothing was run (exit {code})\n")
        # os.write, not derive_env.cli.say: the handler may run inside a write to sys.stderr,
        # which a second write would find busy (a reentrant call of its buffer).
        with contextlib.suppress(OSError):
            os.write(2, line.encode("utf-8", "backslashreplace"))
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
