"""Slurm's text formats (docs/sources/slurm.md): host lists, tasks per node, reserved ports,
the hostfile of ``srun -m arbitrary``; errors are ValueErrors completing "expected ...".

Host lists: a port of SchedMD/slurm@284c3b9 ``src/common/hostlist.c`` (one-dimensional), each
function naming the C function it follows; stricter only on input Slurm never writes (above
2**64 - 1, ``MAX_HOSTS``, ``MAX_NAME``); ``{`` literal; text after ``]`` a suffix (Slurm
23.11, commit 0994b5f198).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import lru_cache

# No typing, no re (tests/test_ports.py): derive_env.hosts is imported where it is used.
from derive_env.errors import TopologyError, describe, shorten

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
    """C ``strtoul(text, &end, 10)``: ``(value, end)``, ``end == 0`` when nothing was read;
    ``-`` negates modulo 2**64; no clamping (the caller refuses values above 2**64 - 1)."""
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
        raise ValueError(f"a number or range lo-hi in brackets, not {item!r} "
                         "(an 'x' box is for multi-dimensional clusters)")
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
    hi, last = lo, lo_text
    if hi_text:  # Slurm checks only the end of the hi number: junk after lo's digits passes
        hi, end = _strtoul(hi_text)
        last = hi_text
    if end != len(last):
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


def _push_range_list(prefix: str, suffix: str, ranges: list[tuple[int, int, int]],
                     out: list[str]) -> None:
    """Expand the bracket groups of ``prefix``, then the ranges (``_push_range_list``), in
    Slurm's order; a loop where Slurm recurses (1500 groups exceed Python's recursion limit)."""
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
                raise ValueError(f"at most {MAX_PREFIX_CNT} values in a bracket before the "
                                 f"last, in {_cut(prefix)!r}")
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
    """A Slurm host list -> its hosts in Slurm's order, duplicates kept (``hostlist.c``
    ``hostlist_create_dims``). ValueError: an unclosed ``[``, a bad range, too many hosts."""
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


@lru_cache(maxsize=4)
def expand_checked(value: str) -> tuple[str, ...]:
    """``value`` expanded and every host checked (ValueError); cached: a step's two lines
    read one ``SLURM_JOB_NODELIST``."""
    from derive_env.hosts import check_hosts, repeated_host

    hosts = expand_hostlist(value)
    if not hosts:
        raise ValueError("a Slurm host list of at least one node")
    twice = repeated_host(hosts)
    if twice is not None:
        raise ValueError(f"every node once (Slurm never lists a node twice), not {twice!r} "
                         "twice")
    bad = check_hosts(hosts)
    if bad:
        raise ValueError(f"{bad[2]}, not {bad[1]!r}")
    return hosts


def expand_tasks_per_node(text: str) -> tuple[int, ...]:
    """``SLURM_STEP_TASKS_PER_NODE`` -> one count per node: items ``N`` or ``N(xK)`` (``N``
    0-65535 repeated ``K`` >= 1 times, ``src/common/env.c`` ``uint16_array_to_str``)."""
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
    """``SLURM_STEP_RESV_PORTS`` (srun ``--resv-ports``) -> the ports in order (src/common/
    port_mgr.c ``_resv_port_alloc``), read as a bracket's range list (``_rebuild_port_array``).
    ValueError: an empty or malformed list, a port outside 1-65535."""
    if not text.strip(_C_SPACE):
        raise ValueError("a list of TCP ports such as 12000-12003, not an empty value")
    ports = []
    for lo, hi, _width in _parse_range_list(text):
        if lo < 1 or hi > 65535:
            raise ValueError(f"TCP ports 1-65535, not {lo}-{hi}")
        ports += range(lo, hi + 1)
    return tuple(ports)


def expand_hostfile(text: str, check: Callable[[str], str | None]) -> list[str]:
    """The hosts of an ``srun -m arbitrary`` hostfile, task ``r`` on ``hosts[r]`` (src/api/
    allocate.c ``slurm_read_hostfile``): ``#`` comments unless ``\\#``, lines of ``name`` or
    ``name*N`` separated by ``,`` (blanks around a line ignored); ``check`` once per name.
    ValueError: a malformed line, a bad name, an empty file, over 2**20 tasks."""
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


#: Why a hostfile disagrees with its step.
_STALE = "the file was changed after srun read it, or belongs to another step"


def arbitrary_master(environ: Mapping[str, str], files: Mapping[str, str | None],
                     hosts: tuple[str, ...], rank: int) -> tuple[str, str | None]:
    """Rank 0's host of an arbitrary step, the first of ``SLURM_HOSTFILE`` (srun.1
    "arbitrary"), and this task's line, when it has one."""
    path = environ.get("SLURM_HOSTFILE", "")
    if not path:
        raise TopologyError(describe(
            "SLURM_DISTRIBUTION", environ["SLURM_DISTRIBUTION"],
            "SLURM_HOSTFILE to be set as well: with arbitrary distribution rank 0 runs on "
            "the first host of that file, which no other variable states; set SLURM_HOSTFILE"
            " to the file srun used"))
    where, text = f"SLURM_HOSTFILE={shorten(path)!r}", files.get(path)
    if text is None:
        raise TopologyError(
            f"{where}: expected a regular file of at most 16 MiB this process can read "
            "(not a directory, FIFO or device): with SLURM_DISTRIBUTION="
            "arbitrary rank 0 runs on its first host, which no variable states; make the "
            "file visible at the same path inside the container (bind-mount its folder) "
            "or use another distribution (-m block)")
    from derive_env.hosts import host_problem

    try:
        listed = expand_hostfile(text, host_problem)
    except ValueError as exc:
        raise TopologyError(f"{where}: expected {exc}") from None
    if listed[0] not in hosts:
        raise TopologyError(
            f"{where}: expected its first host {listed[0]!r} (rank 0's) to be a node of the "
            f"step, SLURM_STEP_NODELIST={environ['SLURM_STEP_NODELIST']!r}: {_STALE}")
    world = int(environ["SLURM_STEP_NUM_TASKS"])
    if len(listed) < world:  # srun needs a line per task (slurm_read_hostfile)
        raise TopologyError(
            f"{where}: expected a line for each of the SLURM_STEP_NUM_TASKS={world} tasks "
            f"(srun places task r on line r+1), not {len(listed)}: {_STALE}")
    return listed[0], listed[rank]


def _uncommented(line: str) -> str:
    """``line`` without its ``#`` comment; ``\\#`` is a literal ``#`` (slurm_read_hostfile)."""
    kept, *rest = line.split("#")
    for part in rest:
        if not kept.endswith("\\"):
            break
        kept = kept[:-1] + "#" + part
    return kept


def _cut(text: str) -> str:
    """A hostfile line cut for a message."""
    return text if len(text) <= 80 else text[:80] + "..."
