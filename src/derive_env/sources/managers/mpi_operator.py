"""The Kubeflow MPIJob's hostfile: the nodes of the ranks its launcher's mpirun starts (line
``mpi-operator-launcher``, docs/sources/kubeflow.md).

kubeflow/mpi-operator ``pkg/controller/mpi_job_controller.go`` (``newLauncherPodTemplate``,
``newConfigMap``; kubeflow/trainer ``pkg/runtime/framework/plugins/mpi/mpi.go``): the launcher
has ``K_MPI_JOB_ROLE=launcher`` and the hostfile variable (``ompiEnvVars``, ``intelEnvVars``,
``mpichEnvVars``); the hostfile, on the launcher only, has ``<pod>.<job>.<ns>.svc slots=<n>``
or ``<host>:<n>`` lines, the launcher first when it runs ranks, then workers 0..N-1, rank 0
on the first (Open MPI's mapping). The launcher process itself is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from derive_env.errors import TopologyError, describe, shorten
from derive_env.hosts import check_hosts
from derive_env.sources.report import Report
from derive_env.topology import Node

if TYPE_CHECKING:
    from derive_env.sources import Source

#: The variable that names mpirun's default hostfile (Open MPI's MCA parameter).
HOSTFILE = "OMPI_MCA_orte_default_hostfile"
#: The launcher's hostfile variable per MPI (``ompiEnvVars``, ``intelEnvVars``, ...).
HOSTFILES = (HOSTFILE, "I_MPI_HYDRA_HOST_FILE", "HYDRA_HOST_FILE")
#: A rank's world size, only in the processes mpirun started (Open MPI; Hydra).
RANK_MARKS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE")

_MOUNT = ("mount the MPIJob's hostfile ConfigMap on the workers too (in the Worker template: "
          "a volume from ConfigMap <job>-config, items hostfile, mounted at /etc/mpi), or "
          "pass the master to every rank: mpirun -x MASTER_ADDR=$(head -n1 /etc/mpi/hostfile "
          "| cut -d' ' -f1) ...")


def _hostfile_variable(environ: Mapping[str, str]) -> str | None:
    return next((name for name in HOSTFILES if environ.get(name)), None)


def files_needed(environ: Mapping[str, str], name: str) -> tuple[str, ...]:
    """The hostfile, for a rank only (the launcher process is refused without it)."""
    variable = _hostfile_variable(environ)
    return (environ[variable],) if variable and any(map(environ.get, RANK_MARKS)) else ()


def hosts_of(text: str) -> list[str]:
    """An mpi-operator hostfile's hosts in order, without Intel MPI's / MPICH's ``:<slots>``."""
    hosts = []
    for line in text.splitlines():
        words = line.partition("#")[0].split()
        if words:
            host, _, slots = words[0].rpartition(":")
            hosts.append(host if host and slots.isdigit() else words[0])
    return hosts


def read(environ: Mapping[str, str], line: Source,
         files: Mapping[str, str | None] | None = None) -> Report:
    """A rank's nodes from the hostfile (``files``: text by path, None when unreadable) and
    ``job`` (first host, count); the launcher process: a ``problem``; another role, a rank
    without the hostfile variable, or one given ``MASTER_ADDR`` that cannot read it: nothing.

    :raises TopologyError: a rank's hostfile is unreadable, empty or lists a bad host.
    """
    role, variable = environ["K_MPI_JOB_ROLE"], _hostfile_variable(environ)
    rank = any(map(environ.get, RANK_MARKS))
    if (not rank and role != "launcher") or (rank and variable is None):
        # A worker pod's own process (sshd's container), or a rank to which nothing proves
        # the hostfile: nothing to say (the MPI source's own refusal names the fix).
        return Report(source=line.name, title=line.title, notes=(
            f"K_MPI_JOB_ROLE={role!r}: no hostfile of the launcher for this process",))
    if not rank:
        return Report(source=line.name, title=line.title, problem=describe(
            "K_MPI_JOB_ROLE", role, f"a rank mpirun started (OMPI_COMM_WORLD_SIZE set) or "
            f"unset: {line.title} runs mpirun, which starts the ranks (on the workers), and "
            f"this process is not one of them. {line.fix}"))
    assert variable is not None
    path = environ[variable]
    text = (files or {}).get(path)
    if text is None and environ.get("MASTER_ADDR"):
        # The user passed the master (the fix below): the ranks need no host list.
        return Report(source=line.name, title=line.title, notes=(
            f"{path} is not readable here: the master is MASTER_ADDR, passed by mpirun -x",))
    if text is None:
        raise TopologyError(describe(
            variable, path, f"a hostfile this rank can read (the mpi-operator mounts it on "
                            f"the launcher only; the first host is rank 0's): {_MOUNT}"))
    hosts = hosts_of(text)
    bad = check_hosts(hosts)
    if not hosts or bad is not None:
        raise TopologyError(describe(
            path, shorten(",".join(hosts)), "lines '<host> slots=<n>' (mpi_job_controller.go "
            f"newConfigMap; {bad[2] if bad else 'none found'}); {_MOUNT}"))
    return Report(
        source=line.name, title=line.title, nodes=tuple(Node(host=h) for h in hosts),
        job=("mpi-operator", hosts[0], str(len(hosts))),
        inputs={"nodes": (variable,), "ports": (variable,)},
        order=f"the hostfile's order ({path}: the launcher first when it runs ranks, then "
              "the workers 0..N-1; Open MPI maps rank 0 to its first host)",
        notes=(f"{len(hosts)} host(s) from {path} (K_MPI_JOB_ROLE={role!r} and {variable} "
               "passed by the launcher)",),
    )
