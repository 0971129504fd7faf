"""Every host-list form a manager writes, read once: IPv4 lines, comma lists, JSON, the
batch schedulers' host-slot lists (docs/sources/schedulers.md, gridengine.md: distinct hosts
by first appearance, slots summed, compared as DNS does); a pod hostname's DNS label limit.
Errors are ``ValueError`` completing "expected ...", naming the entry.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

from derive_env.hosts import check_hosts, host_key, repeated_host

#: A pod hostname is one DNS label: at most 63 characters (pkg/apis/batch/validation,
#: kubernetes-sigs/jobset#408; the kubelet cuts a longer pod name: :func:`pod_hostname`).
MAX_HOSTNAME = 63
#: The most nodes a source builds from a count alone (LeaderWorkerSet's ``size``, Flux's):
#: Slurm's ``MAX_SLURM_NODES`` (slurm_hostlist); a larger count is refused before building.
MAX_COUNTED_NODES = 65536
#: :data:`MAX_COUNTED_NODES` as a bound of ``validation.variable_int``, for a count-only source.
NODE_COUNT = (MAX_COUNTED_NODES, "nodes (the largest job a manager is known to name: Slurm's "
                                 "MAX_SLURM_NODES)")
#: The headless Service's name (the pod's ``subdomain``) of an Indexed Job or JobSet, when
#: ``/etc/hosts`` has no FQDN line (``hostNetwork``) or cannot be read (``--env-file``).
SUBDOMAIN = "DERIVE_ENV_SUBDOMAIN"
#: Where the kubelet writes the pod's FQDN.
HOSTS_FILE = "/etc/hosts"


def pod_files(environ: Mapping[str, str], name: str) -> tuple[str, ...]:
    """The ``files_needed`` of a Kubernetes pod's source (Indexed Job, JobSet): ``/etc/hosts``
    (the pod's FQDN, for the subdomain) unless :data:`SUBDOMAIN` is set."""
    return () if environ.get(SUBDOMAIN) else (HOSTS_FILE,)


def pod_hostname(name: str) -> str:
    """The hostname the kubelet gives a pod named ``name``: cut to :data:`MAX_HOSTNAME`
    characters, then trailing ``-`` and ``.`` removed (kubelet_pods.go
    ``truncatePodHostnameIfNeeded``)."""
    return name[:MAX_HOSTNAME].rstrip("-.")


def fqdn_suffix(hosts_text: str | None, hostname: str) -> str | None:
    """``<subdomain>.<ns>.svc.<domain>`` from the kubelet's ``/etc/hosts`` line for
    ``hostname`` (``HOSTNAME``; kubelet_pods.go, ``managedHostsFileContent``), or ``None``
    without one or when ``hosts_text`` is ``None`` (unreadable)."""
    for line in (hosts_text or "").splitlines():
        for name in line.partition("#")[0].split()[1:]:
            if name.startswith(hostname + ".") and len(name) > len(hostname) + 1:
                return name[len(hostname) + 1:].rstrip(".")
    return None


_QUAD = r"[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}"
#: Dotted quads separated by one character: one match for the whole list, not one parse per
#: node (benchmarks/iplists.py); anything else is checked entry by entry.
_QUADS = {sep: re.compile(rf"(?:{_QUAD}{sep})*{_QUAD}") for sep in ("\n", ",")}


def all_ipv4(text: str, separator: str = "\n") -> bool:
    """Whether ``text`` is IPv4 addresses (as ``ipaddress`` accepts them) separated by
    ``separator`` (a newline: SkyPilot, dstack, Determined; a comma: Azure Batch)."""
    if not _QUADS[separator].fullmatch(text):
        return False
    octets = set(text.replace(separator, ".").split("."))
    return not any(len(o) > 1 and (o[0] == "0" or int(o) > 255) for o in octets)


def host_list(text: str, separator: str = "\n") -> tuple[str, ...]:
    """The hosts of a list a manager writes, one per line or comma-separated (``separator``),
    in its order, blanks around an entry ignored. ValueError: an empty entry (an address not
    known yet), an entry that is no host name or address, a host listed twice."""
    if all_ipv4(text, separator):  # the managers' own form: nothing to strip or look up
        hosts = text.split(separator)
    else:
        hosts = [entry.strip() for entry in text.split(separator)]
        if "" in hosts:
            raise ValueError(f"one host per entry, none empty: entry {hosts.index('') + 1} is "
                             "empty")
        bad = check_hosts(hosts)
        if bad is not None:
            raise ValueError(f"one host per entry: entry {bad[0]} ({bad[1]!r}): {bad[2]}")
    twice = repeated_host(hosts)
    if twice is not None:
        raise ValueError(f"distinct hosts, one per node: {twice!r} is listed twice")
    return tuple(hosts)


def json_value(text: str | None) -> object:
    """``text`` as JSON; ``None`` when it is unset, empty or not JSON (nested deeper than
    the parser's stack included)."""
    import json  # only a source or size that reads JSON

    try:
        return json.loads(text) if text else None
    except (ValueError, RecursionError):
        return None


class HostSlots(NamedTuple):
    """An allocation: the distinct hosts in the order of their first appearance, and each
    one's slots (>= 1), summed over its entries."""

    hosts: tuple[str, ...]
    slots: tuple[int, ...]

    def total(self) -> int:
        """All slots of the allocation."""
        return sum(self.slots)

    def summary(self, limit: int = 8) -> str:
        """``"slots per host: n1 4, n2 4 ..."``, the first ``limit`` hosts, for --explain."""
        pairs = zip(self.hosts[:limit], self.slots[:limit], strict=True)
        return "slots per host: " + ", ".join(f"{host} {slots}" for host, slots in pairs) + (
            " ..." if len(self.hosts) > limit else "")


#: The most slots one entry may state (a count longer than this is no scheduler's).
_MAX_DIGITS = 9


def _summed(hosts: Sequence[str], counts: Iterable[int]) -> HostSlots:
    """Sum ``counts`` per host (by :func:`host_key`), first appearance first."""
    folded = "\n".join(hosts).lower()
    if ".\n" not in folded + "\n":  # no trailing dot: the keys are the lowered names
        keys = folded.split("\n")
        if len(set(keys)) == len(keys):  # every host once: nothing to sum
            return HostSlots(tuple(hosts), tuple(counts))
    order: dict[str, int] = {}
    spelled: list[str] = []
    slots: list[int] = []
    for host, count in zip(hosts, counts, strict=True):
        key = host_key(host)
        at = order.get(key)
        if at is None:
            order[key] = len(spelled)
            spelled.append(host)
            slots.append(count)
        else:
            slots[at] += count
    return HostSlots(tuple(spelled), tuple(slots))


def one_per_slot(text: str, what: str = "one host per line") -> HostSlots:
    """A list naming a host once per slot (``PBS_NODEFILE``, LSF's rank file, ``LSB_HOSTS``),
    blanks ignored; ``what``: the format. ValueError: no host, or an entry that is none."""
    if " " in text or "\t" in text:  # blanks inside a line: each line stripped, as it is
        entries = [line.strip() for line in text.split("\n") if line.strip()]
    else:  # one name per line (what the schedulers write): split at C speed
        entries = text.split()
    counts = Counter(entries)
    distinct = list(counts)  # first appearance order (a dict's)
    if not distinct:
        raise ValueError(f"{what}: at least one host")
    bad = check_hosts(distinct)
    if bad is not None:  # name the entry's place in the file, not among the distinct
        raise ValueError(f"{what}: entry {entries.index(bad[1]) + 1} ({bad[1]!r}): {bad[2]}")
    return _summed(distinct, counts.values())


def _slot_count(text: str) -> bool:
    """Whether ``text`` is a slot count: a decimal integer >= 1 of at most 9 digits."""
    return text.isascii() and text.isdigit() and len(text) <= _MAX_DIGITS and int(text) >= 1


def word_pairs(text: str, what: str) -> HostSlots:
    """``"hostA 4 hostB 4"`` (LSF's ``LSB_MCPU_HOSTS``) as host-count pairs (``what``: the
    format). ValueError: an odd number of words, no host, a bad host, a count not >= 1."""
    words = text.split()
    if len(words) % 2:
        raise ValueError(f"{what}: an even number of words (a count after each host), "
                         f"not {len(words)}")
    hosts, texts = words[::2], words[1::2]
    if not hosts:
        raise ValueError(f"{what}: at least one host")
    bad = check_hosts(hosts)
    if bad is not None:
        raise ValueError(f"{what}: entry {bad[0]} ({bad[1]!r}): {bad[2]}")
    joined = "".join(texts)
    fast = joined.isascii() and joined.isdigit() and max(map(len, texts)) <= _MAX_DIGITS
    counts = list(map(int, texts)) if fast else [0]  # every count decimal: at C speed
    if min(counts) < 1:
        for position, (host, count) in enumerate(zip(hosts, texts, strict=True), 1):
            if not _slot_count(count):
                raise ValueError(f"{what}: entry {position} ({host!r}): a slot count >= 1, "
                                 f"not {count!r}")
    return _summed(hosts, counts)


#: A ``PE_HOSTFILE`` line as Grid Engine writes it (host, slot count >= 1, other fields),
#: matched for the whole text at C speed (benchmarks/iplists.py); else :func:`_rows`.
_ROW = re.compile(r"^(\S+)[ \t]+([1-9][0-9]{0,8})(?:[ \t][^\n]*)?$", re.MULTILINE)


def _rows(text: str, what: str) -> list[tuple[str, str]]:
    """``(host, slot count)`` of every line that is not blank; a malformed line raises."""
    rows = []
    for number, line in enumerate(text.split("\n"), 1):
        fields = line.split()
        if not fields:
            continue
        count = fields[1] if len(fields) > 1 else ""
        if not _slot_count(count):
            raise ValueError(f"{what}; line {number} ({line.strip()!r}) has no slot count "
                             ">= 1 after its host")
        rows.append((fields[0], count))
    if not rows:
        raise ValueError(f"{what}; the file has none")
    return rows


def pe_hostfile(text: str, what: str) -> HostSlots:
    """Grid Engine's ``PE_HOSTFILE`` (``<host> <slots> <queue> <processors>``, a line per
    granted queue, exec_job.c; ``what``: the format). ValueError: no line, a line without a
    host and a slot count >= 1, a bad host."""
    body = text[:-1] if text.endswith("\n") else text
    rows = _ROW.findall(body)
    if not rows or len(rows) != body.count("\n") + 1:  # not every line matched
        rows = _rows(text, what)
    listed, counts = zip(*rows, strict=True)
    allocation = _summed(listed, map(int, counts))
    bad = check_hosts(allocation.hosts)
    if bad is not None:
        raise ValueError(f"{what}; host {bad[1]!r}: {bad[2]}")
    return allocation
