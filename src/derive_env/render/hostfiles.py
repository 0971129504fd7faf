"""Host lists and hostfiles for launchers that start processes over SSH: printing only.

``derive-env --dry-run --format FORMAT`` prints the nodes of the session in canonical order
(node rank order, the master first) in the syntax a launcher reads:

* ``hosts``: ``main1``, for anything that reads one host per line;
* ``openmpi-hostfile``: ``main1 slots=N``, for Open MPI's ``mpirun --hostfile FILE``;
* ``mpich-hostfile``: ``main1:N``, for MPICH's ``mpiexec -f FILE`` and Intel MPI's
  ``mpirun -machinefile FILE``;
* ``deepspeed-hostfile``: ``main1 slots=N``, for ``deepspeed --hostfile FILE``;
* ``horovod-hosts``: ``main1:N,sub1:N,...``, for ``horovodrun -H "$(...)"``.

Entries are one per line, except ``horovod-hosts``: one line, entries joined by commas.
No comment lines: the hostfile readers below skip them, but ``hosts`` is also read by shell
loops and ``horovod-hosts`` is a command-line value.

Rules followed (each checked in the launcher's own source):

* Open MPI 4.1 (orte/util/hostfile/hostfile_lex.l, hostfile.c): ``host slots=N`` per line,
  ``#`` comments; node names of letters, digits, ``.`` and ``-`` only: ``mpirun`` refuses
  an IPv6 literal ("the regex parser has detected the presence of an illegal character"),
  checked with the real Debian ``mpirun.openmpi``.
* MPICH Hydra (src/pm/hydra/lib/utils/args.c ``HYDU_parse_hostfile``,
  ``HYDU_process_mfile_token``): ``host:N`` per line, ``#`` comments; the host is cut at
  the first ``:``, so an IPv6 literal cannot be written. Intel MPI (Developer Guide,
  "Controlling Process Placement") documents ``host:N`` lines for ``-machinefile``; its
  ``-f`` host file holds names only.
* DeepSpeed (deepspeed/launcher/runner.py ``_parse_hostfile``): each line must match
  ``^(\\S+)\\s+slots=(\\d+)``, a host listed twice is an error; its ``--include`` /
  ``--exclude`` filters split ``host:slots`` at ``:`` and its MPI launchers hand the hosts
  to ``mpirun``, so an IPv6 literal is refused here too.
* Horovod (horovod/runner/common/util/hosts.py ``parse_hosts``,
  ``parse_hosts_and_slots``): ``-H`` takes ``host:N`` entries joined by ``,``, each
  matching ``^[\\w.-]+:[0-9]+$``: no IPv6 literal.

N (slots, processes per node) is what the image states: a user-set integer
``PET_NPROC_PER_NODE`` (the merge keeps it over the label, so torchrun starts that many),
else the label ``ai.backend.distributed.nproc-per-node`` (both from
:func:`derive_env.pipeline.host_list`); else each node's own count when the launcher states
them (a Slurm step's ``SLURM_STEP_TASKS_PER_NODE``); else the container's GPU count when
> 0 (the same rule as ``PET_NPROC_PER_NODE``), written for every host: a Backend.AI session
gives every container the same resources. None known: an error (exit 4) that says what to
set. ``hosts`` needs no N.

A single-container session lists ``localhost``: Open MPI (``hostfile.c`` maps
``localhost`` to this node) and Hydra start the processes without SSH (both checked with
the real launchers, tests/render/test_hostfiles.py), as ``horovodrun`` does for hosts that
resolve to a local address (horovod/runner/util/network.py ``filter_local_addresses``); it matches
``MASTER_ADDR=127.0.0.1`` (docs/behaviour.md section 6).

The topology and N come from :func:`derive_env.pipeline.host_list`; this module only
prints them. It imports neither pydantic, click nor typing, and only ``--format`` with a
host format imports it.
"""

from __future__ import annotations

from collections.abc import Sequence

from derive_env.errors import LabelError, TopologyError
from derive_env.hosts import is_ipv6
from derive_env.labels import OPT_IN, PREFIX
from derive_env.render import HOST_FORMATS

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (docs/performance.md)
if TYPE_CHECKING:
    from derive_env.topology import ClusterTopology

__all__ = ["HOST_FORMATS", "launcher_hosts", "render_hosts", "slots_per_node"]
#: What a single-container session lists (the local node for every launcher here).
SINGLE_CONTAINER_HOST = "localhost"
NPROC_LABEL = PREFIX + "nproc-per-node"


#: How each launcher reads hosts: (entry template, separator between entries, why it
#: cannot take an IPv6 literal).
_SYNTAX: dict[str, tuple[str, str, str]] = {
    "openmpi-hostfile": (
        "{host} slots={n}", "\n",
        "Open MPI's mpirun accepts only node names of letters, digits, '.' and '-'",
    ),
    "mpich-hostfile": (
        "{host}:{n}", "\n", "MPICH's and Intel MPI's Hydra cut each host:N line at the first ':'"
    ),
    "deepspeed-hostfile": (
        "{host} slots={n}", "\n",
        "DeepSpeed splits host:slots at ':' (--include/--exclude) and hands the hosts to mpirun",
    ),
    "horovod-hosts": (
        "{host}:{n}", ",", "horovodrun -H takes only host:N entries with host of [A-Za-z0-9_.-]"
    ),
}


def launcher_hosts(topology: ClusterTopology) -> tuple[str, ...]:
    """The hosts a launcher is given, in canonical order (node rank order, master first).

    :returns: the nodes' hosts; ``("localhost",)`` for a single-container session.
    """
    if not topology.multi_node:
        return (SINGLE_CONTAINER_HOST,)
    if not topology.nodes:
        # Not topology.missing: that says how to name the master, and a host list needs all.
        raise TopologyError(
            f"no host list to print: no source states the hosts of every node "
            f"({topology.source} states none): run it where a source states them (inside a "
            "Slurm allocation or a Backend.AI session)")
    return tuple(node.host for node in topology.nodes)


def slots_per_node(
    topology: ClusterTopology, nproc: int | None, fmt: str, *, opted_in: bool = True
) -> int:
    """N of ``host slots=N`` / ``host:N``: processes to start on each node.

    :param topology: the session; its ``gpus_per_node`` is this container's GPU count.
    :param nproc: the processes per node the image states (a user-set integer
        ``PET_NPROC_PER_NODE``, else the validated label ``nproc-per-node``; ``None``: neither).
    :param fmt: the format asked for, named in the error.
    :param opted_in: whether the image opted in; without it the label cannot be used, and
        the error says so.
    :returns: ``nproc``, else the GPU count when > 0 (as ``PET_NPROC_PER_NODE``). (Without
        ``nproc``, :func:`render_hosts` first takes each node's own count when the launcher
        states them: a Slurm step's ``SLURM_STEP_TASKS_PER_NODE``.)
    :raises LabelError: neither is known (exit 4); the message says what to set.
    """
    if nproc is not None:
        return nproc
    if topology.gpus_per_node:
        return topology.gpus_per_node
    if topology.gpus_per_node is None:
        gpus = "the cluster manager gave no GPU count"
    else:
        gpus = f"{topology.inputs_of('gpus')} is 0"
    needs = f"--format {fmt} needs the number of processes per node"
    if opted_in:
        raise LabelError(
            f"{needs}: set the label {NPROC_LABEL} (for example --label "
            f"{NPROC_LABEL}=2, or DERIVE_ENV_NPROC_PER_NODE=2 for the job); the GPU count "
            f"cannot stand in for it ({gpus})"
        )
    raise LabelError(
        f"{needs}, and the GPU count cannot give it ({gpus}); derive-env is not opted in "
        f"({OPT_IN} is not set: --frameworks, DERIVE_ENV_FRAMEWORKS or the image's label), so "
        f"{NPROC_LABEL} cannot give it either: opt in and set {NPROC_LABEL}, or use --format "
        "hosts and give the launcher the process count yourself"
    )


def render_hosts(
    topology: ClusterTopology, fmt: str, nproc: int | None, *, opted_in: bool = True
) -> str:
    """The host list of ``topology`` in ``fmt`` (one of :data:`HOST_FORMATS`).

    :param topology: the session, as :func:`derive_env.pipeline.host_list` gives it.
    :param fmt: one of :data:`HOST_FORMATS`.
    :param nproc: see :func:`slots_per_node`.
    :param opted_in: see :func:`slots_per_node`.
    :returns: the text to print, ending in a newline.
    :raises LabelError: N is needed and unknown (:func:`slots_per_node`).
    :raises TopologyError: a host is an IPv6 literal and the launcher cannot take one
        (exit 3); every container has the same hosts, so every one refuses alike.
    :raises ValueError: ``fmt`` is not a host format (the command line passes only those).
    """
    hosts = launcher_hosts(topology)
    if fmt == "hosts":
        return "".join(f"{host}\n" for host in hosts)
    if fmt not in _SYNTAX:
        raise ValueError(f"unknown host format {fmt!r}")
    entry, separator, no_ipv6 = _SYNTAX[fmt]
    layout = topology.processes
    tasks = layout.tasks_per_node if layout is not None else None
    if nproc is None and tasks:
        # The launcher stated every node's processes (SLURM_STEP_TASKS_PER_NODE): those.
        counts: Sequence[int] = tasks
    else:
        counts = [slots_per_node(topology, nproc, fmt, opted_in=opted_in)] * len(hosts)
    for rank, host in enumerate(hosts):
        if is_ipv6(host):
            raise TopologyError(
                f"--format {fmt}: node {host} (node rank {rank}, from "
                f"{topology.inputs_of('nodes')}) is an IPv6 address, and {no_ipv6}; "
                "give the nodes host names, or use --format hosts"
            )
    return separator.join(
        entry.format(host=h, n=n) for h, n in zip(hosts, counts, strict=True)) + "\n"

