"""cli/hostfacts.py: this container's network facts (label socket-ifname), one deadline for
all name resolution, signals during it (issue 7 item 5)."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from derive_env import cli
from derive_env.cli.hostfacts import Resolver, exit_on_signals
from helpers import wait_for_handler

HANG = threading.Event()  # never set: a DNS server that does not answer


def hanging(host, port, type=0):
    HANG.wait(60)
    raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")


def info(address: str):
    return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, 0))]


def test_one_deadline_for_all_names_and_all_calls() -> None:
    resolver = Resolver(0.5, lookup=hanging)
    start = time.monotonic()
    assert resolver(["main1", "sub1", "sub2", "sub3"]) == dict.fromkeys(
        ["main1", "sub1", "sub2", "sub3"], ())
    first = time.monotonic() - start
    assert 0.45 < first < 1.0  # one bound for the four names, not one each
    start = time.monotonic()
    assert resolver(["sub4"]) == {"sub4": ()}  # the start's deadline has passed already
    assert time.monotonic() - start < 0.2


def test_names_are_resolved_at_once() -> None:
    def slow(host, port, type=0):
        time.sleep(0.3)
        return info({"main1": "198.18.0.10", "sub1": "198.18.0.11"}.get(host, "198.18.0.12"))

    start = time.monotonic()
    assert Resolver(5.0, lookup=slow)(["main1", "sub1", "sub2", "main1"]) == {
        "main1": ("198.18.0.10",), "sub1": ("198.18.0.11",), "sub2": ("198.18.0.12",)}
    assert time.monotonic() - start < 0.8  # not 3 x 0.3 s


def test_unknown_names_are_retried_until_they_appear(monkeypatch) -> None:
    monkeypatch.setattr(Resolver, "RETRY_SECONDS", 0.01)
    tries = []

    def appears(host, port, type=0):
        tries.append(host)
        if len(tries) < 3:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return info("198.18.0.10") + info("198.18.0.10")

    assert Resolver(5.0, lookup=appears)(["main1"]) == {"main1": ("198.18.0.10",)}
    assert tries == ["main1"] * 3


def test_a_name_idna_cannot_encode_is_not_retried() -> None:
    tries = []

    def bad(host, port, type=0):
        tries.append(host)
        raise UnicodeError("label empty or too long")

    start = time.monotonic()
    assert Resolver(5.0, lookup=bad)(["a..b"]) == {"a..b": ()}
    assert (tries, time.monotonic() - start < 0.5) == (["a..b"], True)


def test_handlers_are_put_back_and_ignored_signals_stay_ignored() -> None:
    old_term = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    old_int = signal.getsignal(signal.SIGINT)
    try:
        with exit_on_signals("testing"):
            assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
            assert callable(signal.getsignal(signal.SIGINT))
            assert signal.getsignal(signal.SIGINT) is not old_int
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGINT) is old_int
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        with exit_on_signals("testing"):
            assert callable(signal.getsignal(signal.SIGTERM))
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGTERM, old_term)


def test_gather_facts_reads_this_container() -> None:
    facts = cli.gather_facts()
    assert isinstance(facts.resolve, Resolver)
    assert "lo" in facts.interfaces
    assert facts.hostname == socket.gethostname()
    assert facts.hosts == Path("/etc/hosts").read_text()
    assert "127.0.0.1" in facts.local_v4


WAITER = """
import sys, threading
from derive_env.cli.hostfacts import Resolver
def hanging(host, port, type=0):
    threading.Event().wait(60)
resolver = Resolver(30.0, lookup=hanging)
print("waiting", flush=True)
resolver(["main1"])
print("the wait ended", flush=True)
"""


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_during_the_wait_exits_at_once(signum: int, code: int) -> None:
    proc = subprocess.Popen([sys.executable, "-c", WAITER], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "waiting\n"
        wait_for_handler(proc.pid, signum)
        sent = time.monotonic()
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=5)
        elapsed = time.monotonic() - sent
    finally:
        proc.kill()
        proc.wait(5)
    name = signal.Signals(signum).name
    assert (proc.returncode, out, err) == (code, "", (
        f"derive-env: error: interrupted by {name} while resolving host names (label "
        f"socket-ifname): nothing was run (exit {code})\n"))
    assert elapsed < 1.0
