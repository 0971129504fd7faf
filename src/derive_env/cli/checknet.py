"""The sockets of ``derive-env check`` (:mod:`derive_env.cli.check`): listen on the master
port, name what holds it, connect, and tell the check's greeting from a foreign listener's.

Every wait ends at a deadline given in :func:`time.monotonic` seconds.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import time
from collections.abc import Sequence

from derive_env.hosts import host_port

#: Seconds a listener has to greet a new connection before it counts as foreign.
GREETING_SECONDS = 3.0
#: Largest line read from a connection (a row of a job of 4096 nodes is ~0.3 MiB).
MAX_LINE = 4 << 20


def listen(port: int) -> socket.socket | str:
    """A socket listening on ``port`` of every address (IPv6 and IPv4 when the host has
    IPv6, as torch's TCPStore binds), or why not: ``""`` or `` (by pid N, NAME)`` when the
    port is in use, else a sentence."""
    for family, address in ((socket.AF_INET6, "::"), (socket.AF_INET, "0.0.0.0")):
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError:
            continue
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            sock.bind((address, port))
            sock.listen(128)
            return sock
        except OSError as exc:
            sock.close()
            if exc.errno == errno.EADDRINUSE:
                return owner(port)
            if family == socket.AF_INET6 and exc.errno in (errno.EAFNOSUPPORT,
                                                          errno.EADDRNOTAVAIL):
                continue
            return f"cannot listen on port {port}: {exc.strerror}"
    return f"cannot listen on port {port}: no IPv4 or IPv6 socket"


def owner(port: int) -> str:
    """`` (by pid N, NAME)`` of the process listening on TCP ``port`` here, ``""`` when it
    cannot be seen (another user's process, another PID namespace)."""
    inodes = set()
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(path) as handle:
                lines = handle.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local_port = int(fields[1].rsplit(":", 1)[1], 16) if len(fields) > 9 else -1
            if fields[3] == "0A" and local_port == port:  # 0A: TCP_LISTEN
                inodes.add(f"socket:[{fields[9]}]")
    for pid in (p for p in os.listdir("/proc") if p.isdigit()) if inodes else ():
        try:
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") in inodes
                   for fd in os.listdir(f"/proc/{pid}/fd")):
                with open(f"/proc/{pid}/comm") as handle:
                    return f" (by pid {pid}, {handle.read().strip()})"
        except OSError:
            continue
    return ""


def connect_once(master: tuple[str, int], addresses: Sequence[str], key: str, end: float):
    """One connection to the ``master`` ``(name, port)``'s port at each of its ``addresses``
    in turn, greeted by the check of this job (key ``key``), until ``end``
    (``time.monotonic()``). :returns: ``(socket, "")``, or ``(None, why)``; a listener that
    does not greet as the check of this job: why starts with ``NAME:PORT is already in
    use``."""
    where, port = host_port(*master), master[1]
    problem = "no time left"
    for address in addresses:
        remaining = end - time.monotonic()
        if remaining <= 0:
            break
        try:
            sock = socket.create_connection((address, port), timeout=min(2.0, remaining))
        except ConnectionRefusedError:
            problem = (f"connection refused at {address} (nothing listens there: is the check "
                       "running on the master?)")
            continue
        except TimeoutError:
            problem = f"no answer from {address} (a firewall dropping the connection?)"
            continue
        except OSError as exc:
            problem = f"{address}: {exc.strerror or exc}"
            continue
        wait = min(GREETING_SECONDS, max(0.1, end - time.monotonic()))
        foreign = greeted(sock, key, time.monotonic() + wait, where)
        if foreign is None:
            return sock, ""
        sock.close()
        return None, foreign
    return None, problem


def greeted(sock: socket.socket, key: str, end: float, where: str) -> str | None:
    """``None`` when the listener greets as the check of this job, else why it is foreign."""
    from derive_env.errors import shorten
    from derive_env.preflight import PROTOCOL

    try:
        text = read_line(sock, end)
    except OSError:
        text = None
    if not text:
        return (f"{where} is already in use: a program there accepts connections but does not "
                "greet as derive-env check")
    try:
        greeting = json.loads(text)
    except ValueError:
        greeting = None
    if isinstance(greeting, dict) and greeting.get("protocol") == PROTOCOL:
        if greeting.get("key") == key:
            return None
        return (f"{where} is already in use by the derive-env check of another job "
                f"(on {shorten(str(greeting.get('host')), 80)})")
    return f"{where} is already in use: a program there answered {shorten(ascii(text), 80)}"


def read_line(sock: socket.socket, end: float) -> str | None:
    """One line from ``sock`` (without its end), read until ``end`` (monotonic seconds);
    ``None`` when none came in time, the peer closed first, or it exceeds MAX_LINE."""
    data = b""
    while b"\n" not in data:
        remaining = end - time.monotonic()
        if remaining <= 0 or len(data) > MAX_LINE:
            return None
        sock.settimeout(remaining)
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            return None
        if not chunk:
            return None
        data += chunk
    return data.split(b"\n", 1)[0].decode("utf-8", "replace")
