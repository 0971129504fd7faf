"""Slurm's host list, tasks-per-node and reserved-port formats (issue 9, item 2).

Three oracles: exact values read off Slurm's code (hostlist.c at SchedMD/slurm@284c3b9),
python-hostlist 2.3.0 (GPL, test-only) in a hypothesis differential test, and the
``scontrol show hostnames`` of the Slurm installed on the machine (22.05 in our image), for
the inputs on which Slurm 22.05 and current Slurm agree.

python-hostlist differs from Slurm: it removes duplicates (sorted unless
``allow_duplicates``), splits on ``,`` only, orders three or more bracket groups
lexicographically, and rejects some inputs Slurm accepts (``n[1-]``, ``1a-3``, ``+3``, blanks
inside brackets, ``]`` in a suffix).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from derive_env.sources.managers.slurm_hostlist import (
    expand_hostlist,
    expand_tasks_per_node,
    parse_resv_ports,
)
from helpers import require, value_error

try:
    import hostlist as python_hostlist  # python-hostlist, the [test] extra
except ImportError:  # pragma: no cover - CI has it (require() below fails there)
    python_hostlist = None


# --- exact values ------------------------------------------------------------------------

EXACT = [
    # sources.md section 4, the names readers got wrong
    ("rack[1-2]-node[01-02]", ("rack1-node01", "rack1-node02", "rack2-node01", "rack2-node02")),
    ("n[01-02]-ib", ("n01-ib", "n02-ib")),
    ("linux[1,2]", ("linux1", "linux2")),
    ("n[009-011]", ("n009", "n010", "n011")),
    ("b04-[09-10]", ("b04-09", "b04-10")),
    ("gpu-a100-[09-11]", ("gpu-a100-09", "gpu-a100-10", "gpu-a100-11")),
    ("nodeA,nodeB[001,003]", ("nodeA", "nodeB001", "nodeB003")),
    # names without digits, single names, padding kept on plain names
    ("login", ("login",)),
    ("alpha,beta,gamma", ("alpha", "beta", "gamma")),
    ("n007,n", ("n007", "n")),
    ("007", ("007",)),
    # separators: tab, comma, blank, newline, runs of them; empty list
    (" a  b\tc\nd ,", ("a", "b", "c", "d")),
    ("n[1-2]\tm[3-4] x", ("n1", "n2", "m3", "m4", "x")),
    ("", ()),
    (",, \t", ()),
    # width from the low bound's text, growing past it
    ("n[8-10]", ("n8", "n9", "n10")),
    ("n[098-101]", ("n098", "n099", "n100", "n101")),
    ("n[0-1]", ("n0", "n1")),
    # order is the list's, not sorted; duplicates kept
    ("n[3,1,2]", ("n3", "n1", "n2")),
    ("n[1-2],n[1-2]", ("n1", "n2", "n1", "n2")),
    ("n1,n1", ("n1", "n1")),
    ("n[1,1]", ("n1", "n1")),
    # several bracket groups: Slurm's order (the group before the last varies slowest)
    ("a[1-2][3-4]", ("a13", "a14", "a23", "a24")),
    ("a[01-2]b[1-2]", ("a01b1", "a01b2", "a02b1", "a02b2")),
    (
        "a[1-2]b[3-4]c[5-6]",
        ("a1b3c5", "a1b3c6", "a2b3c5", "a2b3c6", "a1b4c5", "a1b4c6", "a2b4c5", "a2b4c6"),
    ),
    ("[1-3]", ("1", "2", "3")),
    ("[1-2]x", ("1x", "2x")),
    # strtoul's leniency, as Slurm: lo- is lo, junk after lo ignored when hi is given, + and
    # blanks (a blank inside brackets does not split the token) count in the width
    ("n[1-]", ("n1",)),
    ("n[1a-3]", ("n01", "n02", "n03")),
    ("n[+3]", ("n03",)),
    ("n[1, 2]", ("n1", "n02")),
    ("n[ 1- 2]", ("n01", "n02")),
    # brackets and text Slurm takes literally
    ("n1]", ("n1]",)),
    ("a[[1-2]]", ("a[1]", "a[2]")),
    ("a[b[1],c]", ("a[b1", "c]")),
    ("n%d[1-2]", ("n%d1", "n%d2")),
    # the limits themselves are allowed
    ("n[1-65536]", tuple(f"n{i}" for i in range(1, 65537))),
]


@pytest.mark.parametrize(("text", "hosts"), EXACT, ids=[text[:30] for text, _ in EXACT])
def test_expand_hostlist_exact(text: str, hosts: tuple[str, ...]) -> None:
    assert expand_hostlist(text) == hosts


def test_4096_nodes_in_order() -> None:
    hosts = expand_hostlist("n[0001-4096]")
    assert len(hosts) == 4096
    assert hosts[:2] == ("n0001", "n0002")
    assert hosts[999] == "n1000"
    assert hosts[-1] == "n4096"


ERRORS = [
    ("n[1-2", "a ']' closing the last '[' of 'n[1-2'"),
    ("n[1-2]x[3", "a ']' closing the last '[' of 'n[1-2]x[3'"),
    ("a]b[1,2]", "a ']' closing the last '[' of 'a]b[1'"),
    ("n[5-3]", "a range lo-hi with lo <= hi, not '5-3'"),
    ("n[]", "a number or range lo-hi in brackets, not ''"),
    ("n[1,,2]", "a number or range lo-hi in brackets, not ''"),
    ("n[1--2]", "a range lo-hi of non-negative numbers, not '1--2'"),
    ("n[-1]", "a number or range lo-hi in brackets, not '-1'"),
    ("n[1-2-3]", "a number or range lo-hi in brackets, not '1-2-3'"),
    ("n[1-a]", "a number or range lo-hi in brackets, not '1-a'"),
    ("n[a]", "a number or range lo-hi in brackets, not 'a'"),
    ("n[1a]", "a number or range lo-hi in brackets, not '1a'"),
    ("n[1- -2]", "at most 65536 hosts in one range, not '1- -2'"),
    (
        "n[1x2]",
        "a number or range lo-hi in brackets, not '1x2' "
        "(an 'x' box is for multi-dimensional clusters)",
    ),
    ("n[0-65536]", "at most 65536 hosts in one range, not '0-65536'"),
    ("n[18446744073709551616]", "numbers below 2**64 in brackets, not '18446744073709551616'"),
    ("a[1-2]b]c[3-4]", "a number or range lo-hi in brackets, not '1-2]b'"),
    ("a[1-2]b[5-3]c[1]", "a range lo-hi with lo <= hi, not '5-3'"),
    ("a[0-65536]b[1]", "at most 65536 hosts in one range, not '0-65536'"),
    (
        "a[0-40000,0-40000]b[1]",
        "at most 65536 values in a bracket before the last, in 'a[0-40000,0-40000]b'",
    ),
    ("a[1-2]b[1-65536]", "at most 65536 hosts in a host list"),
    ("n[1-65536],x", "at most 65536 hosts in a host list"),
    ("a," * 65537, "at most 65536 hosts in a host list"),
    ("a," * 65536 + "n[1]", "at most 65536 hosts in a host list"),
]


@pytest.mark.parametrize(("text", "expected"), ERRORS, ids=[text[:30] for text, _ in ERRORS])
def test_expand_hostlist_errors(text: str, expected: str) -> None:
    assert value_error(expand_hostlist, text) == expected


def test_too_many_items_in_one_bracket() -> None:
    assert (
        value_error(expand_hostlist, "n[" + ",".join(["1"] * (256 * 1024 + 1)) + "]")
        == "at most 262144 items in one bracket, not 262145"
    )


# --- differential: python-hostlist --------------------------------------------------------

_NAME = st.text("abcxyz-_.", min_size=0, max_size=4)
_DIGITS = st.text("0123456789", min_size=0, max_size=3)


@st.composite
def _range_item(draw: st.DrawFn, span: int) -> str:
    """``lo`` or ``lo-hi`` with lo <= hi <= lo + span, lo zero-padded to a drawn width."""
    lo = draw(st.integers(0, 120))
    width = draw(st.integers(1, 4))
    text = f"{lo:0{width}d}"
    if draw(st.booleans()):
        text += f"-{lo + draw(st.integers(0, span))}"
    return text


@st.composite
def _token(draw: st.DrawFn, max_groups: int) -> str:
    """A host or bracketed token: name parts and 0..max_groups bracket groups, a suffix.
    At most 39 hosts per group up to 2 groups, 8 with more (16384 per token at most)."""
    span, most = (12, 3) if max_groups <= 2 else (3, 2)
    parts = [draw(_NAME) + draw(_DIGITS)]
    for _ in range(draw(st.integers(0, max_groups))):
        items = draw(st.lists(_range_item(span), min_size=1, max_size=most))
        parts.append("[" + ",".join(items) + "]" + draw(_NAME))
    token = "".join(parts)
    return token if token else "h"


def _token_lists(max_groups: int) -> st.SearchStrategy[list[str]]:
    return st.lists(_token(max_groups), min_size=1, max_size=4)


def _require_python_hostlist() -> None:
    require(python_hostlist is not None, "python-hostlist (the [test] extra) is not installed")


@settings(max_examples=400, deadline=None)
@given(_token_lists(max_groups=2))
def test_same_as_python_hostlist(tokens: list[str]) -> None:
    """Up to two bracket groups per token: the same hosts in the same order, duplicates kept
    (python-hostlist's ``allow_duplicates=True``)."""
    _require_python_hostlist()
    text = ",".join(tokens)
    assert expand_hostlist(text) == tuple(
        python_hostlist.expand_hostlist(text, allow_duplicates=True)
    )


@settings(max_examples=150, deadline=None)
@given(_token_lists(max_groups=4), st.sampled_from([" ", "\t", "\n", ", ", " \t,\n"]))
def test_same_hosts_as_python_hostlist_any_groups_and_separators(
    tokens: list[str], sep: str
) -> None:
    """Documented differences normalised: python-hostlist has only ``,`` as separator (so it
    gets the tokens joined by commas, we by blanks) and orders three or more groups
    lexicographically (so the hosts are compared as multisets)."""
    _require_python_hostlist()
    ours = expand_hostlist(sep.join(tokens))
    theirs = python_hostlist.expand_hostlist(",".join(tokens), allow_duplicates=True)
    assert sorted(ours) == sorted(theirs)


def test_python_hostlist_differences_are_as_documented() -> None:
    """The differences the module docstring lists, pinned so a new python-hostlist shows."""
    _require_python_hostlist()
    assert python_hostlist.expand_hostlist("n[1-2],n[1-2]") == ["n1", "n2"]
    assert expand_hostlist("n[1-2],n[1-2]") == ("n1", "n2", "n1", "n2")
    assert python_hostlist.expand_hostlist("a b") == ["a b"]
    assert expand_hostlist("a b") == ("a", "b")
    assert python_hostlist.expand_hostlist("a[1-2]b[3-4]c[5]")[:3] == ["a1b3c5", "a1b4c5", "a2b3c5"]
    assert expand_hostlist("a[1-2]b[3-4]c[5]")[:3] == ("a1b3c5", "a2b3c5", "a1b4c5")
    for accepted_by_slurm_only in ("n[1-]", "n[1a-3]", "n[+3]", "a[[1-2]]"):
        with pytest.raises(python_hostlist.BadHostlist):
            python_hostlist.expand_hostlist(accepted_by_slurm_only)


# --- the real Slurm: scontrol show hostnames ----------------------------------------------

# Inputs on which Slurm 22.05 (installed) and current Slurm differ: text after "]" (23.11
# added suffixes, 0994b5f198), a "[" left open (22.05 appended a "]"; f520d2a109 made it an
# error), and this module's own limits (numbers >= 2**64, more than MAX_HOSTS hosts).
NOT_IN_SLURM_22_05 = {
    "n[01-02]-ib",
    "[1-2]x",
    "a[[1-2]]",
    "n[1-2",
    "n[1-2]x[3",
    "a]b[1,2]",
    "n[18446744073709551616]",
    "a[1-2]b[1-65536]",
    "n[1-65536],x",
    "a," * 65537,
    "a," * 65536 + "n[1]",
}
SCONTROL_CASES = [text for text, _ in EXACT + ERRORS if text not in NOT_IN_SLURM_22_05]


@pytest.fixture(scope="module")
def scontrol(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Environment for an offline ``scontrol``: a minimal slurm.conf, no controller."""
    require(shutil.which("scontrol") is not None, "Slurm's scontrol is not installed")
    conf = tmp_path_factory.mktemp("slurm") / "slurm.conf"
    conf.write_text(
        "ClusterName=oracle\nSlurmctldHost=localhost\n"
        "NodeName=localhost CPUs=1 State=UNKNOWN\nPartitionName=p Nodes=localhost\n"
    )
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "SLURM_CONF": str(conf)}


def test_same_as_scontrol(scontrol: dict[str, str]) -> None:
    """Every case in one test, each one scontrol run (about 10 ms each)."""
    mismatches = []
    for text in SCONTROL_CASES:
        run = subprocess.run(
            ["scontrol", "show", "hostnames", text],
            env=scontrol,
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
        slurm: object = tuple(run.stdout.splitlines())
        if "Invalid hostlist" in run.stdout + run.stderr:
            slurm = "error"
        try:
            ours: object = expand_hostlist(text)
        except ValueError:
            ours = "error"
        if ours != slurm:
            mismatches.append((text, ours, slurm, run.stderr[-200:]))
    assert mismatches == []


_HOST = st.builds(
    lambda prefix, number, width, suffix: (
        f"{prefix}{'' if number is None else f'{number:0{width}d}'}{suffix}"
    ),
    st.sampled_from(["n", "gpu-a100-", "rack1-node", "b04-", "login", ""]),
    st.none() | st.integers(0, 1200),
    st.integers(1, 4),
    st.sampled_from(["", "", "", "-ib", ".hpc"]),
).filter(lambda host: host[:1] not in ("", "-", "."))  # scontrol would take "-ib" as an option


@settings(max_examples=25, deadline=None)
@given(st.lists(_HOST, min_size=1, max_size=12))
def test_inverts_slurms_own_compression(scontrol: dict[str, str], hosts: list[str]) -> None:
    """What Slurm writes: ``scontrol show hostlist`` compresses a list of names the way
    srun writes SLURM_STEP_NODELIST (``hostlist_ranged_string``, order kept); expanding
    that gives the names back, in order, duplicates included."""
    run = subprocess.run(
        ["scontrol", "show", "hostlist", ",".join(hosts)],
        env=scontrol,
        capture_output=True,
        text=True,
        timeout=20,
        check=True,
    )
    assert expand_hostlist(run.stdout.strip()) == tuple(hosts)


# --- SLURM_STEP_TASKS_PER_NODE -----------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "counts"),
    [
        ("2(x3),1", (2, 2, 2, 1)),
        ("8(x4096)", (8,) * 4096),
        ("1", (1,)),
        ("4,2,4", (4, 2, 4)),
        ("1,2,1(x3),3,2", (1, 2, 1, 1, 1, 3, 2)),  # env.c uint16_array_to_str's own example
        ("0", (0,)),
        ("65535(x1)", (65535,)),
    ],
)
def test_expand_tasks_per_node(text: str, counts: tuple[int, ...]) -> None:
    assert expand_tasks_per_node(text) == counts


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 65535), st.integers(1, 40)), min_size=1, max_size=8))
def test_tasks_per_node_same_as_python_hostlist(items: list[tuple[int, int]]) -> None:
    """Written as Slurm writes it (``N`` or ``N(xK)``, K >= 2) and as a user might (K = 1)."""
    _require_python_hostlist()
    text = ",".join(f"{n}(x{k})" if k > 1 or n % 2 else str(n) for n, k in items)
    expected = tuple(python_hostlist.parse_slurm_tasks_per_node(text))
    assert expand_tasks_per_node(text) == expected
    assert sum(k for _, k in items) == len(expected)


# --- SLURM_STEP_RESV_PORTS ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "ports"),
    [
        ("12000-12003", (12000, 12001, 12002, 12003)),
        ("12000,12005", (12000, 12005)),
        ("12000-12001,12005", (12000, 12001, 12005)),
        ("12000", (12000,)),
        ("1-2,65535", (1, 2, 65535)),
    ],
)
def test_parse_resv_ports(text: str, ports: tuple[int, ...]) -> None:
    assert parse_resv_ports(text) == ports


_TPN, _PORTS = expand_tasks_per_node, parse_resv_ports


@pytest.mark.parametrize(
    ("parse", "text", "expected"),
    [
        (_TPN, "", "items N or N(xK) with N a task count 0-65535, not ''"),
        (_TPN, "1,,2", "items N or N(xK) with N a task count 0-65535, not ''"),
        (_TPN, "2(x0)", "items N or N(xK) with K >= 1, not '2(x0)'"),
        (_TPN, "2(x3)x", "items N or N(xK) with K >= 1, not '2(x3)x'"),
        (_TPN, "2(x)", "items N or N(xK) with K >= 1, not '2(x)'"),
        (_TPN, "2(3)", "items N or N(xK) with N a task count 0-65535, not '2(3)'"),
        (_TPN, "2 (x3)", "items N or N(xK) with N a task count 0-65535, not '2 (x3)'"),
        (_TPN, "-1", "items N or N(xK) with N a task count 0-65535, not '-1'"),
        (_TPN, "+1", "items N or N(xK) with N a task count 0-65535, not '+1'"),
        (_TPN, "65536", "items N or N(xK) with N a task count 0-65535, not '65536'"),
        (_TPN, "\u0661", "items N or N(xK) with N a task count 0-65535, not '\u0661'"),
        (_TPN, "1(x65537)", "at most 65536 nodes, not more from '1(x65537)'"),
        (_PORTS, "", "a list of TCP ports such as 12000-12003, not an empty value"),
        (_PORTS, " ", "a list of TCP ports such as 12000-12003, not an empty value"),
        (_PORTS, "0-3", "TCP ports 1-65535, not 0-3"),
        (_PORTS, "65535-65536", "TCP ports 1-65535, not 65535-65536"),
        (_PORTS, "12003-12000", "a range lo-hi with lo <= hi, not '12003-12000'"),
        (_PORTS, "12000,", "a number or range lo-hi in brackets, not ''"),
        (_PORTS, "[12000]", "a number or range lo-hi in brackets, not '[12000]'"),
    ],
)
def test_tasks_per_node_and_resv_ports_errors(
    parse: Callable[[str], object], text: str, expected: str
) -> None:
    assert value_error(parse, text) == expected


# --- hostile input (issue 15, item 7) ---------------------------------------------------


def test_1500_bracket_groups_expand_without_recursion() -> None:
    """1500 bracket groups in one item once raised RecursionError (a traceback); now the
    groups are walked in a loop, in Slurm's order, and the name they make is too long."""
    assert value_error(expand_hostlist, "a[1]" * 1500) == (
        "host names of at most 253 characters (RFC 1035), not '" + "a[1]" * 20 + "...'")
    assert value_error(expand_hostlist, "a[1]" * 100 + "b" * 60) == (
        "host names of at most 253 characters (RFC 1035), not '" + "a1" * 40 + "...'")
    # the product is bounded before it is built (2**17 names)
    assert value_error(expand_hostlist, "a[1-2]" * 17) == "at most 65536 hosts in a host list"
    stem = "1" * 120
    assert expand_hostlist("[1]" * 120 + "b[1-2]c[3-4]d[5]") == (
        stem + "b1c3d5", stem + "b2c3d5", stem + "b1c4d5", stem + "b2c4d5")
    assert value_error(expand_hostlist, "x[1-2]" * 17) == "at most 65536 hosts in a host list"


def test_a_bracket_producing_names_longer_than_dns_allows_is_an_error() -> None:
    """65536 copies of a 1 MiB prefix would take 64 GiB: refused before any copy."""
    assert value_error(expand_hostlist, "a" * (1 << 20) + "[1-65536]") == (
        "host names of at most 253 characters (RFC 1035), not '" + "a" * 80 + "...'")
    assert expand_hostlist("a" * 250 + "[1-2]") == ("a" * 250 + "1", "a" * 250 + "2")
