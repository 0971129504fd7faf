"""The port policy (issue 9, item 5): reserved ports first, else a seed from (manager, job,
step) into the window above the ephemeral range; the same in every process."""

from __future__ import annotations

import binascii
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from derive_env.ports import (
    MIN_WINDOW,
    job_ports,
    parse_port_range,
    parse_reserved_ports,
    port_order,
    port_seed,
)
from helpers import value_error


def _documented(manager: str, job: str, step: str, high: int = 60999) -> tuple[int, int, int]:
    """The formula of the docstring, with another CRC-32 implementation (binascii)."""
    seed = binascii.crc32(f"{manager}/{job}/{step}".encode())
    low = high + 1
    size = 65535 - low + 1
    return tuple(low + (seed + k) % size for k in range(3))  # type: ignore[return-value]


def test_exact_ports_with_the_default_range() -> None:
    assert port_order() == ("pytorch", "tensorflow", "jax")
    assert job_ports("slurm", "123", "0") == (61957, 61958, 61959)
    assert job_ports("slurm", "123", "0") == _documented("slurm", "123", "0")
    assert port_seed("slurm", "123", "0") == binascii.crc32(b"slurm/123/0")


def test_every_part_of_the_seed_matters() -> None:
    ports = {
        job_ports("slurm", "123", "0"),
        job_ports("slurm", "123", "1"),  # two steps of one job at once
        job_ports("slurm", "124", "0"),
        job_ports("pbs", "123", "0"),
    }
    assert len(ports) == 4


def test_window_follows_the_ephemeral_range() -> None:
    ports = job_ports("slurm", "123", "0", ephemeral=(1024, 50000))
    assert ports == _documented("slurm", "123", "0", high=50000)
    assert all(50001 <= port <= 65535 for port in ports)


def test_wraps_around_at_65535() -> None:
    high = 65535 - MIN_WINDOW  # window 65280-65535, 256 ports
    job = next(str(j) for j in range(100000) if port_seed("slurm", str(j), "0") % 256 == 255)
    assert job_ports("slurm", job, "0", ephemeral=(1024, high)) == (65535, 65280, 65281)


def test_reserved_ports_are_skipped() -> None:
    assert job_ports("slurm", "123", "0", reserved=frozenset({61958})) == (61957, 61959, 61960)
    assert job_ports("slurm", "123", "0", reserved=frozenset(range(61957, 62000))) == (
        62000,
        62001,
        62002,
    )


def test_granted_ports_come_first() -> None:
    assert job_ports("slurm", "123", "0", granted=(12000,)) == (12000, 61957, 61958)
    assert job_ports("slurm", "123", "0", granted=(12000, 12001, 12002, 12003)) == (
        12000,
        12001,
        12002,
    )
    # a granted port the formula also gives is not given twice
    assert job_ports("slurm", "123", "0", granted=(61957,)) == (61957, 61958, 61959)
    assert job_ports("slurm", "123", "0", granted=(12000, 12000)) == (12000, 61957, 61958)


def test_granted_ports_need_no_window() -> None:
    assert job_ports("slurm", "1", "0", ephemeral=(1024, 65535), granted=(7, 8, 9)) == (7, 8, 9)


@pytest.mark.parametrize(
    ("ephemeral", "reserved", "expected"),
    [
        (
            (32768, 65535),
            frozenset(),
            "at least 256 ports above this node's ephemeral port range 32768-65535 "
            "(net.ipv4.ip_local_port_range), not 0: lower its upper bound, reserve ports for "
            "the step (srun --resv-ports), or set the ports by label or variable",
        ),
        (
            (1024, 65280),
            frozenset(),
            "at least 256 ports above this node's ephemeral port range 1024-65280 "
            "(net.ipv4.ip_local_port_range), not 255: lower its upper bound, reserve ports for "
            "the step (srun --resv-ports), or set the ports by label or variable",
        ),
        (
            (60999, 32768),
            frozenset(),
            "an ephemeral port range 'low high' with 1 <= low <= high <= 65535, not 60999-32768",
        ),
        (
            (0, 60999),
            frozenset(),
            "an ephemeral port range 'low high' with 1 <= low <= high <= 65535, not 0-60999",
        ),
        (
            (1024, 65279),
            frozenset(range(65280, 65534)),
            "3 ports in 65280-65535 outside net.ipv4.ip_local_reserved_ports, "
            "not all of them reserved",
        ),
    ],
)
def test_errors(ephemeral: tuple[int, int], reserved: frozenset[int], expected: str) -> None:
    assert (
        value_error(job_ports, "slurm", "123", "0", ephemeral=ephemeral, reserved=reserved)
        == expected
    )


def test_two_free_ports_are_not_enough_but_three_are() -> None:
    window = range(65280, 65536)
    three_free = frozenset(window) - {65300, 65400, 65500}
    assert sorted(job_ports("slurm", "1", "0", ephemeral=(1024, 65279), reserved=three_free)) == [
        65300,
        65400,
        65500,
    ]


@settings(max_examples=300, deadline=None)
@given(
    st.text(max_size=12),
    st.text(max_size=12),
    st.text(max_size=6),
    st.integers(1024, 65535 - MIN_WINDOW),
    st.frozensets(st.integers(60000, 65535), max_size=200),
    st.lists(st.integers(1, 65535), max_size=4),
)
def test_distinct_in_window_not_reserved(
    manager: str,
    job: str,
    step: str,
    high: int,
    reserved: frozenset[int],
    granted: list[int],
) -> None:
    ports = job_ports(
        manager, job, step, ephemeral=(1, high), reserved=reserved, granted=tuple(granted)
    )
    assert len(set(ports)) == 3
    given_first = list(dict.fromkeys(granted))[:3]
    assert list(ports[: len(given_first)]) == given_first
    for port in ports[len(given_first) :]:
        assert high < port <= 65535
        assert port not in reserved


def test_same_ports_in_processes_with_different_hash_seeds() -> None:
    """Every task computes the ports alone: Python's salted hash() must play no part."""
    code = (
        "from derive_env.ports import job_ports;"
        "print(job_ports('slurm', '4242', '3'), job_ports('k8s', 'job-äöü', 'batch'))"
    )
    outputs = set()
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        run = subprocess.run(
            [sys.executable, "-c", code],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        outputs.add(run.stdout)
    expected = f"{job_ports('slurm', '4242', '3')} {job_ports('k8s', 'job-äöü', 'batch')}\n"
    assert outputs == {expected}


# --- the /proc/sys formats ----------------------------------------------------------------


_RANGE, _RESERVED = parse_port_range, parse_reserved_ports


@pytest.mark.parametrize(
    ("parse", "text", "expected"),
    [
        (_RANGE, "", "two port numbers 'low high', not ''"),
        (_RANGE, "32768", "two port numbers 'low high', not '32768'"),
        (_RANGE, "32768 60999 1", "two port numbers 'low high', not '32768 60999 1'"),
        (_RANGE, "32768 -1", "two port numbers 'low high', not '32768 -1'"),
        (_RESERVED, "8080,x", "ports and port ranges separated by commas, not 'x'"),
        (_RESERVED, "9000-", "ports and port ranges separated by commas, not '9000-'"),
        (
            _RESERVED,
            "9000-9001-9002",
            "ports and port ranges separated by commas, not '9000-9001-9002'",
        ),
    ],
)
def test_parse_errors(parse: Callable[[str], object], text: str, expected: str) -> None:
    assert value_error(parse, text) == expected


def test_building_blocks_import_only_the_standard_library() -> None:
    """Both run on every container start of the Slurm source: no pydantic, click or typing
    (the grammar is loaded by path, as its package's __init__ is not this test's subject)."""
    grammar = Path(__file__).resolve().parents[1] / "src/derive_env/sources/slurm_hostlist.py"
    code = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('g', {str(grammar)!r})\n"
        "spec.loader.exec_module(importlib.util.module_from_spec(spec))\n"
        "import derive_env.ports\n"
        "print(sorted(m for m in ('typing', 'pydantic', 'click', 'hashlib', 're')"
        " if m in sys.modules))\n"
    )
    run = subprocess.run(
        [sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert run.stdout == "[]\n"
