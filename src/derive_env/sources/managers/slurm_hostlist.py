"""Slurm's text formats, as pure functions: host lists, tasks per node, reserved ports, and
the hostfile of ``srun -m arbitrary``.

A port of Slurm's own parser (SchedMD/slurm@284c3b9, ``src/common/hostlist.c``, the
one-dimensional grammar every non-BlueGene cluster uses), not a re-invention. Standard
library only, no regular expression, no typing import: the Slurm source
(sources/managers/slurm.py) imports it on every container start in a Slurm job.

Host list grammar (``expand_hostlist``), rule by rule with the C function it follows:

* Tokens are separated by any of ``"\\t, \\n"`` (``hostlist_create_dims``); runs of
  separators count once; an empty list expands to no host.
* A separator between ``[`` and the next ``]`` does not end a token (``_next_tok``), so
  ``n[1,3]`` is one token.
* A token without ``[`` is one host, kept verbatim (``hostlist_push_host_dims``).
* Otherwise the LAST ``[`` of the token opens the range list, the first ``]`` after it closes
  it, and the text after that ``]`` is a suffix repeated on every host
  (``_hostlist_create_bracketed``): ``n[01-02]-ib`` -> ``n01-ib n02-ib``. A ``[`` without
  a ``]`` after it is an error.
* The text before that ``[`` (the prefix) may hold more bracket groups; its last ``[`` and
  the last ``]`` after it form a group, expanded and recursed into (``_push_range_list``).
  The resulting order is Slurm's, and for three or more groups it is not lexicographic:
  ``a[1-2]b[3-4]c[5-6]`` -> ``a1b3c5 a1b3c6 a2b3c5 a2b3c6 a1b4c5 ...`` (the group just
  before the last varies slowest). A prefix group expands to at most ``MAX_PREFIX_CNT``
  (65536) values.
* A range list is ``,``-separated items ``lo`` or ``lo-hi`` (``_parse_range_list``,
  ``_parse_single_range``): numbers are read as C's ``strtoul`` reads them (leading blanks
  and a ``+`` allowed), each host is printed ``%0*lu`` with the width of the ``lo`` TEXT
  (``n[009-011]`` -> ``n009 n010 n011``; ``n[8-10]`` -> ``n8 n9 n10``); ``lo-`` is ``lo``;
  when ``hi`` is given, junk after ``lo``'s digits is ignored (``1a-3`` -> ``01 02 03``),
  as in Slurm. Errors: an ``x`` (a multi-dimensional box), ``lo--hi`` (negative), no
  digits, junk after the last number, ``lo > hi``, more than ``MAX_RANGE`` (65536) hosts in
  one range, more than ``MAX_RANGES`` items in one bracket.
* Duplicates are kept, in order (Slurm's ``hostlist_create`` keeps them; only
  ``hostlist_uniq`` removes them).

Deliberate differences from Slurm, all on input Slurm itself never writes (it emits
``prefix[ranges]`` tokens, ``hostlist_ranged_string``):

* A number above 2**64 - 1 is an error; Slurm's ``strtoul`` silently clamps it.
* More than ``MAX_HOSTS`` (65536, Slurm's ``MAX_SLURM_NODES``) hosts in total is an error
  (Slurm would try to allocate them); so is a bracket producing names longer than
  ``MAX_NAME`` (253) characters, which no node can have (so a 1 MiB prefix is never copied
  65536 times).
* The bracket groups of a prefix are walked in a loop, not recursed into: 1500 groups
  expand like 2 (Slurm's C recursion has no such limit either).
* ``{`` (a controller-side expression, ``hostlist_create_client``) is not expanded: a
  container cannot ask slurmctld; the token is taken literally like any other text.
* Slurm before 23.11 (commit 0994b5f198, "Extend hostlist to support suffix") rejects text
  after ``]``; this module accepts it, as current Slurm does.

Differences from python-hostlist 2.3.0 (``hostlist.expand_hostlist``, GPL, a test-only
oracle in tests/sources/test_slurm_hostlist.py): it removes duplicates (sorted unless
``allow_duplicates``), splits on ``,`` only (no blank separators), orders three or more
bracket groups lexicographically, and rejects some inputs Slurm accepts (``n[1-]``,
``1a-3``, ``+3``, blanks inside brackets, ``]`` in a suffix).

Errors are :class:`ValueError` whose text completes a sentence "expected ...", so the
caller can name the variable: ``describe("SLURM_STEP_NODELIST", value, str(exc))``.
"""

from __future__ import annotations

from collections.abc import Callable

#: Token separators of ``hostlist_create_dims`` (hostlist.c).
SEPARATORS = "\t, \n"
#: Most hosts in one ``lo-hi`` range (hostlist.h: ``MAX_RANGE`` = ``MAX_SLURM_NODES``).
MAX_RANGE = 65536
#: Most values one prefix bracket group expands to (hostlist.h ``MAX_PREFIX_CNT``).
MAX_PREFIX_CNT = 64 * 1024
#: Most comma items in one bracket (hostlist.c ``MAX_RANGES``; Slurm aborts beyond it).
MAX_RANGES = 256 * 1024
#: Most hosts a list may expand to (ours: slurm.h ``MAX_SLURM_NODES``, a cluster's limit).
MAX_HOSTS = 65536
#: Longest host name a bracket may produce (a DNS name, RFC 1035; hosts.py says the same).
MAX_NAME = 253

_ULONG_MAX = 2**64 - 1
_DIGITS = "0123456789"
# C's isspace() in the "C" locale: strtoul skips these before the number.
_C_SPACE = " \t\n\v\f\r"


def _strtoul(text: str) -> tuple[int, int]:
    """C ``strtoul(text, &end, 10)``: ``(value, end)``, ``end == 0`` when nothing was read.

    Leading C blanks and one sign are skipped; a ``-`` negates modulo 2**64, as C does.
    Values above 2**64 - 1 are returned as they are (the caller refuses them).
    """
    i, n = 0, len(text)
    while i < n and text[i] in _C_SPACE:
        i += 1
    negative = False
    if i < n and text[i] in "+-":
        negative = text[i] == "-"
        i += 1
    start = i
    while i < n and text[i] in _DIGITS:
        i += 1
    if i == start:
        return 0, 0
    value = int(text[start:i])
    if negative and value <= _ULONG_MAX:
        value = -value % (_ULONG_MAX + 1)
    return value, i


def _parse_single_range(item: str) -> tuple[int, int, int]:
    """One ``lo`` or ``lo-hi`` item -> ``(lo, hi, width)`` (hostlist.c ``_parse_single_range``)."""
    if "x" in item:
        raise ValueError(
            f"a number or range lo-hi in brackets, not {item!r} "
            "(an 'x' box is for multi-dimensional clusters)"
        )
    dash = item.find("-")
    if dash == -1:
        lo_text, hi_text = item, ""
    else:
        lo_text, hi_text = item[:dash], item[dash + 1 :]
        if hi_text[:1] == "-":
            raise ValueError(f"a range lo-hi of non-negative numbers, not {item!r}")
    lo, end = _strtoul(lo_text)
    if end == 0:
        raise ValueError(f"a number or range lo-hi in brackets, not {item!r}")
    if hi_text:
        # Slurm checks only the end of the hi number: junk after lo's digits passes.
        hi, end = _strtoul(hi_text)
        if end != len(hi_text):
            raise ValueError(f"a number or range lo-hi in brackets, not {item!r}")
    else:
        hi = lo
        if end != len(lo_text):
            raise ValueError(f"a number or range lo-hi in brackets, not {item!r}")
    if hi > _ULONG_MAX:
        raise ValueError(f"numbers below 2**64 in brackets, not {item!r}")
    if lo > hi:
        raise ValueError(f"a range lo-hi with lo <= hi, not {item!r}")
    if hi - lo + 1 > MAX_RANGE:
        raise ValueError(f"at most {MAX_RANGE} hosts in one range, not {item!r}")
    return lo, hi, len(lo_text)


def _parse_range_list(text: str) -> list[tuple[int, int, int]]:
    """The inside of a bracket -> ranges (hostlist.c ``_parse_range_list``)."""
    items = text.split(",")
    if len(items) > MAX_RANGES:
        raise ValueError(f"at most {MAX_RANGES} items in one bracket, not {len(items)}")
    return [_parse_single_range(item) for item in items]


def _next_tokens(text: str) -> list[str]:
    """Split ``text`` into tokens, brackets protecting separators (hostlist.c ``_next_tok``)."""
    tokens = []
    i, n = 0, len(text)
    while True:
        while i < n and text[i] in SEPARATORS:
            i += 1
        if i >= n:
            return tokens
        start = parse = i
        extended = True
        while extended:
            while i < n and text[i] not in SEPARATORS:
                i += 1
            # Step over bracket pairs: a separator inside [...] belongs to the token.
            extended = False
            while True:
                open_at = text.find("[", parse)
                if open_at == -1 or open_at > i:
                    break
                close_at = text.find("]", parse)
                if close_at == -1 or close_at < open_at:
                    break
                if close_at < i:
                    parse = close_at + 1
                    continue
                i, extended = close_at, True
                break
        tokens.append(text[start:i])


def _push(prefix: str, suffix: str, ranges: list[tuple[int, int, int]], out: list[str]) -> None:
    """Append ``prefix + %0*lu + suffix`` for every range (hostlist.c ``hostlist_push_hr``)."""
    if len(prefix) + len(suffix) > MAX_NAME:  # 65536 copies of a 1 MiB prefix: 64 GiB
        raise ValueError(f"host names of at most {MAX_NAME} characters (RFC 1035), "
                         f"not {_cut(prefix + '[...]' + suffix)!r}")
    for lo, hi, width in ranges:
        if len(out) + hi - lo + 1 > MAX_HOSTS:
            raise ValueError(f"at most {MAX_HOSTS} hosts in a host list")
        # One %-format per host is the cheapest way to pad; escape % of the names.
        form = prefix.replace("%", "%%") + f"%0{width}d" + suffix.replace("%", "%%")
        out += [form % number for number in range(lo, hi + 1)]


def _push_range_list(
    prefix: str, suffix: str, ranges: list[tuple[int, int, int]], out: list[str]
) -> None:
    """Expand the bracket groups of ``prefix``, then the ranges (``_push_range_list``).

    Slurm recurses once per group of the prefix; this walks the groups in a loop (1500
    groups would exceed Python's recursion limit) in the same order: the group just
    before the last range varies slowest, the first group of the prefix fastest of the
    prefix groups, the last range fastest of all.
    """
    groups: list[tuple[list[str], str]] = []  # (numbers as printed, text after), last first
    end = len(prefix)  # indices, not slices: 262144 groups must not copy the prefix each
    combinations = 1
    while True:
        if len(groups) > MAX_NAME:  # a digit or more per group: every name is too long
            _push(prefix, suffix, ranges, out)  # raises, naming the text as given
        open_at = prefix.rfind("[", 0, end)
        close_at = prefix.rfind("]", open_at, end) if open_at != -1 else -1
        if close_at == -1:
            break
        values: list[str] = []
        for lo, hi, width in _parse_range_list(prefix[open_at + 1 : close_at]):
            if len(values) + hi - lo + 1 > MAX_PREFIX_CNT:
                raise ValueError(
                    f"at most {MAX_PREFIX_CNT} values in a bracket before the last, "
                    f"in {_cut(prefix)!r}"
                )
            values += [f"{number:0{width}d}" for number in range(lo, hi + 1)]
        combinations *= len(values)
        if combinations > MAX_HOSTS:  # before the product is built
            raise ValueError(f"at most {MAX_HOSTS} hosts in a host list")
        groups.append((values, prefix[close_at + 1 : end]))
        end = open_at
    if not groups:
        _push(prefix, suffix, ranges, out)
        return
    base = prefix[:end]
    if len(base) + sum(len(after) + 1 for _values, after in groups) > MAX_NAME:
        first = base + "".join(values[0] + after for values, after in reversed(groups))
        _push(first, suffix, ranges, out)  # raises: the name is too long
    from itertools import product  # only for host lists with two or more bracket groups

    # Every combination, the last group varying slowest as Slurm's recursion does.
    in_order = groups[::-1]
    for combination in product(*(values for values, _after in groups)):
        parts = [base]
        for number, (_values, after) in zip(reversed(combination), in_order, strict=True):
            parts += [number, after]
        _push("".join(parts), suffix, ranges, out)


def expand_hostlist(text: str) -> tuple[str, ...]:
    """Expand a Slurm host list (``SLURM_STEP_NODELIST``, ``SLURM_JOB_NODELIST``) in order.

    Input: the variable's value, e.g. ``"rack[1-2]-node[01-02],login"``. Output: the host
    names in Slurm's order, duplicates kept, e.g. ``("rack1-node01", "rack1-node02",
    "rack2-node01", "rack2-node02", "login")``. The grammar and its sources in Slurm are in
    this module's docstring (``hostlist.c`` ``hostlist_create_dims``).

    Raises ValueError, whose text completes "expected ...", for a malformed list: a ``[``
    without ``]``, a bad range item, ``lo > hi``, a range or a list too large.
    """
    if "[" not in text:
        # No bracket: the separators alone split it (the common single-host case).
        for separator in "\t\n ":
            text = text.replace(separator, ",")
        hosts = tuple(host for host in text.split(",") if host)
        if len(hosts) > MAX_HOSTS:
            raise ValueError(f"at most {MAX_HOSTS} hosts in a host list")
        return hosts
    out: list[str] = []
    for token in _next_tokens(text):
        open_at = token.rfind("[")
        if open_at == -1:
            out.append(token)
            if len(out) > MAX_HOSTS:
                raise ValueError(f"at most {MAX_HOSTS} hosts in a host list")
            continue
        close_at = token.find("]", open_at)
        if close_at == -1:
            raise ValueError(f"a ']' closing the last '[' of {token!r}")
        # Slurm drops the text after "]," (only reachable inside an outer bracket).
        after = token[close_at + 1 : close_at + 2]
        suffix = token[close_at + 1 :] if after not in (",", "") else ""
        ranges = _parse_range_list(token[open_at + 1 : close_at])
        _push_range_list(token[:open_at], suffix, ranges, out)
    return tuple(out)


def expand_tasks_per_node(text: str) -> tuple[int, ...]:
    """Expand ``SLURM_STEP_TASKS_PER_NODE`` / ``SLURM_TASKS_PER_NODE``: one count per node.

    Input: comma-separated items ``N`` or ``N(xK)`` (``N`` repeated ``K`` times), as Slurm's
    ``uint16_array_to_str`` (``src/common/env.c``) writes them, e.g. ``"2(x3),1"``. Output:
    ``(2, 2, 2, 1)``. ``N`` is a task count (0-65535, Slurm's uint16), ``K`` >= 1; no blanks.

    Raises ValueError, whose text completes "expected ...", for anything else (an empty
    list, an empty item, a sign, a count above 65535, ``(x0)``, text after ``)``).
    """
    counts: list[int] = []
    for item in text.split(","):
        number, paren, repeat = item.partition("(x")
        times = 1
        if paren:
            if repeat[-1:] != ")" or not _is_decimal(repeat[:-1]) or int(repeat[:-1]) < 1:
                raise ValueError(f"items N or N(xK) with K >= 1, not {item!r}")
            times = int(repeat[:-1])
        if not _is_decimal(number) or int(number) > 65535:
            raise ValueError(f"items N or N(xK) with N a task count 0-65535, not {item!r}")
        if len(counts) + times > MAX_HOSTS:
            raise ValueError(f"at most {MAX_HOSTS} nodes, not more from {item!r}")
        counts += [int(number)] * times
    return tuple(counts)


def _is_decimal(text: str) -> bool:
    """True for a non-empty run of ASCII digits (str.isdigit also takes other scripts)."""
    return bool(text) and all(char in _DIGITS for char in text)


def parse_resv_ports(text: str) -> tuple[int, ...]:
    """Expand ``SLURM_STEP_RESV_PORTS`` (srun ``--resv-ports``, ``MpiParams=ports=``).

    Input: Slurm's port list, written by ``_resv_port_alloc`` (``src/common/port_mgr.c``) as
    a sorted host list of port numbers without brackets, e.g. ``"12000-12003"`` or
    ``"12000-12001,12005"``, and read back by Slurm as ``"[" + text + "]"``
    (``_rebuild_port_array``); this does the same. Output: the ports in that order, e.g.
    ``(12000, 12001, 12002, 12003)``; the first one is the step's to use.

    Raises ValueError, whose text completes "expected ...", for an empty or malformed list
    or a port outside 1-65535.
    """
    if not text.strip(_C_SPACE):
        raise ValueError("a list of TCP ports such as 12000-12003, not an empty value")
    ports = []
    for lo, hi, _width in _parse_range_list(text):
        if lo < 1 or hi > 65535:
            raise ValueError(f"TCP ports 1-65535, not {lo}-{hi}")
        ports += range(lo, hi + 1)
    return tuple(ports)


def expand_hostfile(text: str, check: Callable[[str], str | None]) -> list[str]:
    """The hosts of an ``srun -m arbitrary`` hostfile (``SLURM_HOSTFILE``), one per task.

    Follows ``slurm_read_hostfile`` (src/api/allocate.c): a ``#`` starts a comment unless
    escaped ``\\#``; empty lines are skipped; a line must start with a letter or digit; it
    holds ``,``-separated names, ``name*N`` meaning ``N`` times. Blanks around a line are
    ignored (Slurm refuses a leading blank, so srun never ran with one; leniency here cannot
    change a file srun accepted).

    :param text: the file's content.
    :param check: why a name cannot be a node's address, or ``None``
        (:func:`derive_env.hosts.host_problem`); called once per distinct name.
    :returns: the hosts in file order, task ``r`` on ``hosts[r]``.
    :raises ValueError: its text completes "expected ...": a malformed line, a bad name, an
        empty file, more than 2**20 tasks.
    """
    hosts: list[str] = []
    checked: set[str] = set()  # a 4096-node file names each host many times: check it once
    for number, line in enumerate(text.splitlines(), 1):
        entry = _uncommented(line).strip()
        if not entry:
            continue
        if not entry[0].isascii() or not entry[0].isalnum():
            raise ValueError(f"lines of Slurm node names (src/api/allocate.c "
                             f"slurm_read_hostfile), not line {number} {_cut(entry)!r}")
        for name in entry.split(","):
            host, star, times = name.partition("*")
            count = 1
            if star:
                if len(times) > 6 or not _is_decimal(times):
                    raise ValueError(f"name or name*N on line {number}, not {_cut(name)!r}")
                count = int(times)
            problem = None if host in checked else (check(host) if host else "a node name")
            checked.add(host)
            if problem:
                raise ValueError(f"{problem} on line {number}, not {_cut(host)!r}")
            hosts += [host] * count
            if len(hosts) > 1 << 20:
                raise ValueError(f"at most {1 << 20} tasks")
    if not hosts:
        raise ValueError("at least one node name (the file is empty)")
    return hosts


def _uncommented(line: str) -> str:
    """``line`` without its ``#`` comment; ``\\#`` is a literal ``#`` (slurm_read_hostfile)."""
    if "\\#" not in line:
        return line.partition("#")[0]
    kept, i = [], 0
    while i < len(line):
        if line[i] == "#":
            if kept and kept[-1] == "\\":
                kept[-1] = "#"
                i += 1
                continue
            break
        kept.append(line[i])
        i += 1
    return "".join(kept)


def _cut(text: str) -> str:
    """A hostfile line cut for a message."""
    return text if len(text) <= 80 else text[:80] + "..."
