"""The refusals: a launcher derive-env cannot read, or a single container it contradicts.

derive-env refuses (exit 3) rather than describe one process of a larger job (sources.md
3, 3.13): every process of such a job would derive a job of one. The data is the table's
(:data:`derive_env.sources.SOURCES`: ``marker``, ``states``, ``size``, ``part_of`` ...):

* a line without a module (Flux, LSF jsrun, SageMaker ...) whose variables state more than
  one process;
* a partial set of a line's variables that states more than one process (a partial set
  never selects a source: it may be left over from another job);
* a launcher that started this process without saying the job's size (PMIx alone);
* no source seen while another launcher's ``WORLD_SIZE``, ``RANK`` ... state more than a
  single container (:func:`check_single_container`).
"""

from __future__ import annotations

from collections.abc import Mapping

from derive_env.errors import TopologyError, describe
from derive_env.sources import BY_NAME, ON_ERROR_WARN, SOURCES, Source
from derive_env.validation import static_count

#: Variables through which another launcher (torchrun, Kubeflow, MPI wrappers...) states a
#: multi-node or multi-process topology, with the value a single container has. Checked only
#: when no cluster manager stated the nodes: inside a session they are user values
#: (contract section 6, :mod:`derive_env.merge`).
_SINGLE_VALUES = {"WORLD_SIZE": 1, "RANK": 0, "NODE_RANK": 0, "PET_NNODES": 1,
                  "PET_NODE_RANK": 0, "GROUP_RANK": 0}

_NO_SOURCE = "derive-env has no source for it yet (planned)"

#: The lines that can state a job of more than one process, in table order.
_LAUNCHERS = tuple(line for line in SOURCES if line.states or line.size)


def _single(value: str, single: int) -> bool:
    """Whether ``value`` states the single-container value (``01``, torchrun's ``1:1`` too)."""
    return static_count(value) == single


def launcher_problem(
    environ: Mapping[str, str],
    session: str | None,
    seen: frozenset[str] = frozenset(),
    launched: bool = False,
) -> str | None:
    """Say which launcher started more than one process without a usable source, or ``None``.

    derive-env refuses rather than describe one process under a multi-process launcher it
    cannot read (every process of such a job would derive a job of one): a line without a
    module, or one whose variables are only partly set (a partial set never selects a
    source, sources.md 3.13). The lines are checked in table order; the first that states
    more than one process is named.

    :param session: the cluster manager session the container is in (``"a Backend.AI
        session of 3 nodes"``), or ``None`` for none.
    :param seen: the names of the sources that were seen (their launchers are read).
    :param launched: a seen source stated the process layer: then a launcher that a module
        reads but only part of whose variables are set is that source's companion (``srun
        --mpi=pmi2`` sets ``PMI_RANK`` and ``PMI_SIZE``), checked by that source.
    :returns: the message, naming the variable, the launcher and the fix.
    """
    unsized: Source | None = None  # a launcher that started us without saying the size
    sized = False  # some launcher's complete marker states the size (one process)
    for line in _LAUNCHERS:
        if any(environ.get(name) for name in line.unless):
            continue
        reader = line if line.module is not None else BY_NAME.get(line.part_of or "")
        if reader is not None and (reader.name in seen or launched):
            continue
        complete = all(environ.get(name) for name in line.marker or line.detect)
        if not complete and not line.partial:
            continue
        stated = _stated(line, environ, complete)
        if stated is not None:
            return _refusal(line, reader, environ, session, *stated)
        if complete and line.sized:
            sized = True
        elif complete and unsized is None:
            unsized = line
    if unsized is not None and not sized:
        # Open MPI also sets PMIx's variables, and its own say the size: only PMIx (or a
        # Kubernetes index) alone leaves it unknown.
        marker = unsized.marker or unsized.detect
        return describe(
            marker[0], environ[marker[0]],
            f"unset: {unsized.title} started this process ({' and '.join(marker)} "
            f"are set) without saying how many processes the job has, and {_NO_SOURCE}; "
            f"describing a job of one process could be wrong. {unsized.fix}",
        )
    return None


def _stated(line: Source, environ: Mapping[str, str],
            complete: bool) -> tuple[str, str, str] | None:
    """``(variable, value, single value)`` of the first variable of ``line`` that states
    more than one process, or ``None``."""
    if complete and line.size is not None:
        over = line.size(environ)
        if over is not None:
            return over[0], environ[over[0]], over[1]
    for name, single in line.states:
        value = environ.get(name)
        if value and not _single(value, single):
            return name, value, str(single)
    return None


def _refusal(line: Source, reader: Source | None, environ: Mapping[str, str],
             session: str | None, name: str, value: str, single: str) -> str:
    """The message for ``line``'s ``name=value``: a partial set of the ``reader`` line's
    variables, or a launcher no module reads."""
    if reader is not None:
        missing = [n for n in reader.detect if not environ.get(n)]
        return describe(
            name, value,
            f"{single} or unset: {line.title} states a job of more than one "
            f"{line.unit}, but only part of its variables are set (not set: "
            f"{', '.join(missing)}), and a partial set is never used: it may be "
            "left over from another job. Run derive-env in the launcher's own "
            f"process (the launcher sets all of them), {ON_ERROR_WARN}",
        )
    outcome = (f"inside {session}, whose nodes derive-env cannot combine with the "
               "launcher's ranks" if session else
               f"derive-env would describe a job of one {line.unit}")
    return describe(
        name, value,
        f"{single} or unset: {line.title} states a job of more than one "
        f"{line.unit}, and {_NO_SOURCE}; {outcome}. {line.fix}",
    )


def check_single_container(environ: Mapping[str, str]) -> None:
    """Refuse a single-container topology that another launcher's variables contradict.

    Used when no cluster manager stated the nodes (no ``BACKENDAI_CLUSTER_*``): then
    ``WORLD_SIZE=4`` or ``RANK=2`` come from a launcher derive-env has no source for, and
    describing one container would contradict it. Nothing is guessed.

    :raises TopologyError: naming the first contradicting variable.
    """
    for name, single in _SINGLE_VALUES.items():
        value = environ.get(name, "")
        if value and not _single(value, single):
            raise TopologyError(describe(
                name, value,
                f"{single} or unset: no source's complete set of variables is set (no "
                "cluster manager or launcher stated the job), so this is taken for a single "
                "container, but another launcher set a larger topology"
                f"{_closest_partial(environ)}. Run the command without derive-env for that "
                "launcher, or give the container its cluster manager's variables",
            ))


def _closest_partial(environ: Mapping[str, str]) -> str:
    """``" (closest: torchrun, not set: X)"``: the line with a module with the most of its
    variables set, when some but not all are (a value left empty, a launcher's copy)."""
    best, missing = None, ()
    count = 0
    for source in SOURCES:
        if source.any_of or source.module is None:
            continue
        present = [n for n in source.detect if environ.get(n)]
        if present and len(present) > count:
            best, count = source, len(present)
            missing = tuple(n for n in source.detect if not environ.get(n))
    if best is None:
        return ""
    return f" (closest: {best.title}; not set: {', '.join(missing)})"


