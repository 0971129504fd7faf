"""The host files and host-slot lists of the batch schedulers: hosts in first-appearance
order, slots summed per host.

Shared by the scheduler sources (sources/pbs.py, sources/lsf.py, and Grid Engine's
``PE_HOSTFILE``): every one of them states its allocation as a list of *slots* (a host
once per slot, or a host with a slot count, possibly several times), never as a list of
nodes. The rule is the same for all of them (sources-cloud.md 19, 20, 22):

* the nodes are the distinct hosts in the order of their first appearance (the first one
  is where the scheduler runs the batch script: PBS's mother superior, LSF's first
  execution host, Grid Engine's master queue);
* a host's slots are the sum of its entries (Grid Engine lists a host once per queue, LSF
  and PBS once per slot or per vnode);
* hosts are compared as DNS compares them (:func:`derive_env.hosts.host_key`), so that
  ``n1`` and ``N1`` are one host, spelled as it first appears.

Pure: the text is read at the edge (cli/) and handed in. Errors are ``ValueError`` whose
message follows "expected ..." and names the entry; the caller names the variable or file
(``describe(name, value, str(exc))``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

from derive_env.hosts import check_hosts, host_key


class HostSlots(NamedTuple):
    """An allocation as hosts and their slots.

    :ivar hosts: the distinct hosts, in the order of their first appearance.
    :ivar slots: each host's slots (>= 1), summed over its entries, in the same order.
    """

    hosts: tuple[str, ...]
    slots: tuple[int, ...]

    def total(self) -> int:
        """All slots of the allocation."""
        return sum(self.slots)


#: The most slots one entry may state (a count longer than this is no scheduler's).
_MAX_DIGITS = 9


def _summed(hosts: Sequence[str], counts: Iterable[int]) -> HostSlots:
    """Sum ``counts`` per host (by :func:`host_key`), first appearance first."""
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


def _checked(hosts: Sequence[str], what: str) -> None:
    if not hosts:
        raise ValueError(f"{what}: at least one host")
    bad = check_hosts(hosts)
    if bad is not None:
        position, host, problem = bad
        raise ValueError(f"{what}: entry {position} ({host!r}): {problem}")


def one_per_slot(text: str, what: str = "one host per line") -> HostSlots:
    """A file or list that names a host once per slot (PBS's ``PBS_NODEFILE``, LSF's
    ``LSB_DJOB_HOSTFILE``; ``LSB_HOSTS`` split on blanks gives the same lines).

    Blank lines and blanks around a name are ignored (the managers write none; a file
    edited by hand may end with one).

    :param text: the file's content.
    :param what: the format, for the message (follows "expected").
    :returns: each distinct host with its number of lines.
    :raises ValueError: no host at all, or an entry that is not a host name or address.
    """
    lines = text.split("\n")
    entries = lines if all(line and line == line.strip() for line in lines) else [
        line.strip() for line in lines if line.strip()]
    _checked(entries, what)
    keys: dict[str, int] = {}
    for entry in entries:  # a host's lines are usually adjacent: count once per run
        keys[entry] = keys.get(entry, 0) + 1
    return _summed(list(keys), keys.values())


def _count(text: str, position: int, host: str, what: str) -> int:
    if not (text.isascii() and text.isdigit()) or len(text) > _MAX_DIGITS or int(text) < 1:
        raise ValueError(f"{what}: entry {position} ({host!r}): a slot count >= 1, not "
                         f"{text!r}")
    return int(text)


def host_count_pairs(pairs: Sequence[tuple[str, str]], what: str) -> HostSlots:
    """Hosts with their slot counts as text: ``LSB_MCPU_HOSTS``'s ``host n`` pairs, or the
    first two fields of each line of Grid Engine's ``PE_HOSTFILE``.

    :param pairs: ``(host, count)`` in the scheduler's order; a host may repeat.
    :param what: the format, for the message (follows "expected").
    :returns: each distinct host with the sum of its counts.
    :raises ValueError: no pair, a host that is not a host name or address, or a count
        that is not a decimal integer >= 1.
    """
    hosts = [host for host, _ in pairs]
    _checked(hosts, what)
    counts = [_count(count, position, host, what)
              for position, (host, count) in enumerate(pairs, 1)]
    return _summed(hosts, counts)


def word_pairs(text: str, what: str) -> HostSlots:
    """``"hostA 4 hostB 4"`` (LSF's ``LSB_MCPU_HOSTS``): words taken two by two.

    :raises ValueError: an odd number of words, or as :func:`host_count_pairs`.
    """
    words = text.split()
    if len(words) % 2:
        raise ValueError(f"{what}: an even number of words (a count after each host), "
                         f"not {len(words)}")
    return host_count_pairs(list(zip(words[::2], words[1::2], strict=True)), what)


def line_pairs(text: str, what: str) -> HostSlots:
    """One ``host count [more fields]`` per line (Grid Engine's ``PE_HOSTFILE``:
    ``<host> <slots> <queue> <processor range>``); blank lines ignored.

    :raises ValueError: a line of fewer than two fields, or as :func:`host_count_pairs`.
    """
    pairs: list[tuple[str, str]] = []
    for number, line in enumerate(text.split("\n"), 1):
        fields = line.split()
        if not fields:
            continue
        if len(fields) < 2:
            raise ValueError(f"{what}: line {number} ({line.strip()!r}): a host and its "
                             "slot count")
        pairs.append((fields[0], fields[1]))
    return host_count_pairs(pairs, what)
