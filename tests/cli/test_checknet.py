"""derive-env check's sockets: the master port's listener, who holds a port, the greeting."""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

from derive_env.cli.checknet import connect_once, greeted, listen, owner, read_line
from derive_env.preflight import PROTOCOL


def _pair() -> tuple[socket.socket, socket.socket]:
    return socket.socketpair()


def test_a_port_in_use_names_the_process_holding_it() -> None:
    first = listen(0)
    assert isinstance(first, socket.socket)
    with first:
        port = first.getsockname()[1]
        comm = Path("/proc/self/comm").read_text().strip()
        assert listen(port) == f" (by pid {os.getpid()}, {comm})"
        assert owner(port) == f" (by pid {os.getpid()}, {comm})"
    assert owner(port) == ""


def test_a_line_is_read_until_the_deadline() -> None:
    ours, theirs = _pair()
    with ours, theirs:
        theirs.sendall(b'{"a": 1}\nrest')
        assert read_line(ours, time.monotonic() + 1) == '{"a": 1}'
        start = time.monotonic()
        assert read_line(ours, time.monotonic() + 0.2) is None  # "rest", no line end
        assert time.monotonic() - start < 1
        theirs.close()
        assert read_line(ours, time.monotonic() + 1) is None


def test_the_greeting_tells_this_job_from_anything_else() -> None:
    where = "main1:29500"
    for sent, expected in [
        ({"protocol": PROTOCOL, "key": "k", "host": "main1"}, None),
        ({"protocol": PROTOCOL, "key": "other", "host": "main9"},
         "main1:29500 is already in use by the derive-env check of another job "
         "(on main9)"),
        ("SSH-2.0-OpenSSH_9.6", "main1:29500 is already in use: a program there answered "
                                "'SSH-2.0-OpenSSH_9.6'"),
    ]:
        ours, theirs = _pair()
        with ours, theirs:
            text = sent if isinstance(sent, str) else json.dumps(sent)
            theirs.sendall(text.encode() + b"\n")
            assert greeted(ours, "k", time.monotonic() + 1, where) == expected
    ours, theirs = _pair()
    with ours, theirs:
        assert greeted(ours, "k", time.monotonic() + 0.1, where) == (
            "main1:29500 is already in use: a program there accepts connections but does not "
            "greet as derive-env check")


def test_connect_once_says_why_it_could_not() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    sock, problem = connect_once(("x", port), ["127.0.0.1"], "k", time.monotonic() + 1)
    assert sock is None
    assert problem == ("connection refused at 127.0.0.1 (nothing listens there: is the check "
                       "running on the master?)")
    assert connect_once(("x", port), ["127.0.0.1"], "k", time.monotonic() - 1) == (
        None, "no time left")
