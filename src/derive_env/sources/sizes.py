"""The job sizes that no single variable states, for the refusals of managers no module reads.

Each function is named by a :data:`derive_env.sources.SOURCES` line's ``size`` and called
only when that line's marker is complete (sources/refusals.py), with the environment and
the text of the line's ``files`` (read in cli/; ``None``: unreadable). It answers ``None``
when the manager states a job of one, ``(variable, expected)`` naming the variable that
states more and what a job of one would hold (``(what, value, expected)`` for a file's
entry), or :data:`UNKNOWN`
when the size cannot be told (then the manager is refused as one that does not say it).

The rules come from sources-cloud.md (section per manager): SageMaker's
``resourceconfig.json`` ``hosts`` (section 8), TF_CONFIG's and Vertex AI's ``cluster``
(sections 7 and 11; the TFJob's sparse ``{"index": "host:port"}`` form counts too),
Volcano's ``VC_<TASK>_NUM`` (section 5), SkyPilot's and dstack's IP lists (sections 13, 14),
a TPU slice's ``TPU_WORKER_HOSTNAMES`` (section 12), Determined's ``container_addrs``
(section 16), PBS's node file (section 19), LSF's ``LSB_MCPU_HOSTS`` (section 20), Grid
Engine's ``PE_HOSTFILE`` (section 22), the mpi-operator's launcher pod (section 6).
"""

from __future__ import annotations

from collections.abc import Mapping

from derive_env.sources import DETERMINED_RENDEZVOUS, SAGEMAKER_CONFIG, SOURCES, states_of

#: The answer when the job's size cannot be told.
UNKNOWN = "unknown"

Files = Mapping[str, "str | None"]


def json_value(text: str | None) -> object:
    """:func:`derive_env.sources.lists.json_value`, imported only by a size that reads JSON
    (the note of :func:`larger_job` needs none)."""
    from derive_env.sources.lists import json_value as read

    return read(text)


def json_list(environ: Mapping[str, str], files: Files) -> tuple[str, str] | None:
    """``SM_HOSTS`` (a JSON list of the job's hosts) unless it lists exactly one."""
    hosts = json_value(environ["SM_HOSTS"])
    if isinstance(hosts, list) and len(hosts) == 1:
        return None
    return "SM_HOSTS", "a JSON list of one host"


def ip_lines(environ: Mapping[str, str], files: Files) -> tuple[str, str] | None:
    """SkyPilot's ``SKYPILOT_NODE_IPS`` or dstack's ``DSTACK_NODES_IPS`` (one IP per line)
    unless it holds one line: the list alone states the job's size (sources-cloud.md 13,
    14), also when the tool's other variables are missing."""
    for name in ("SKYPILOT_NODE_IPS", "DSTACK_NODES_IPS"):
        text = environ.get(name, "")
        if len([line for line in text.split("\n") if line.strip()]) > 1:
            return name, "one IP"
    return None


def tasks(spec: object) -> int:
    """The tasks of a ``TF_CONFIG`` / ``CLUSTER_SPEC`` ``cluster`` (lists of ``host:port``,
    or the sparse ``{"index": "host:port"}`` map of a TFJob); 0 when it is not one."""
    cluster = spec.get("cluster") if isinstance(spec, dict) else None
    if not isinstance(cluster, dict):
        return 0
    return sum(len(entries) for entries in cluster.values() if isinstance(entries, list | dict))


def _cluster(environ: Mapping[str, str], variable: str) -> tuple[str, str] | None:
    if tasks(json_value(environ[variable])) > 1:
        return variable, "a cluster of one task"
    return None


def tf_config_tasks(environ: Mapping[str, str], files: Files) -> tuple[str, str] | None:
    """A ``TF_CONFIG`` whose ``cluster`` holds more than one task (a TFJob pod's)."""
    return _cluster(environ, "TF_CONFIG")


def cluster_spec_tasks(environ: Mapping[str, str], files: Files) -> tuple[str, str] | None:
    """Vertex AI's ``CLUSTER_SPEC`` with more than one task in its pools."""
    return _cluster(environ, "CLUSTER_SPEC")


def _file_list(files: Files, path: str, key: str, one: str
               ) -> tuple[str, str, str] | str | None:
    """``(f"{key} in {path}", the list as JSON, one)`` when the list has more than one
    entry."""
    document = json_value(files.get(path))
    found = document.get(key) if isinstance(document, dict) else None
    if not isinstance(found, list) or not found:
        return UNKNOWN
    if len(found) == 1:
        return None
    import json

    return f"{key} in {path}", json.dumps(found), one


def sagemaker_hosts(environ: Mapping[str, str], files: Files
                    ) -> tuple[str, str, str] | str | None:
    """The ``hosts`` of SageMaker's resource config (the platform's file)."""
    return _file_list(files, SAGEMAKER_CONFIG, "hosts", "a list of one host")


def determined_containers(environ: Mapping[str, str], files: Files
                          ) -> tuple[str, str, str] | str | None:
    """The ``container_addrs`` of Determined's rendezvous file."""
    return _file_list(files, DETERMINED_RENDEZVOUS, "container_addrs",
                      "a list of one address")


def volcano_pods(environ: Mapping[str, str], files: Files) -> tuple[str, str] | str | None:
    """The pods of every task of a Volcano Job: the sum of its ``VC_<TASK>_NUM``."""
    counts = {k: v for k, v in environ.items()
              if k.startswith("VC_") and k.endswith("_NUM") and v.strip().isdigit()}
    if not counts:
        return UNKNOWN
    if sum(int(v) for v in counts.values()) <= 1:
        return None
    return max(sorted(counts), key=lambda k: int(counts[k])), "1 pod in all VC_<TASK>_NUM"


def tpu_hosts(environ: Mapping[str, str], files: Files) -> tuple[str, str] | None:
    """More than one host in ``TPU_WORKER_HOSTNAMES`` (a comma list)."""
    hosts = [h for h in environ["TPU_WORKER_HOSTNAMES"].split(",") if h.strip()]
    return None if len(hosts) <= 1 else ("TPU_WORKER_HOSTNAMES", "one host")


def lsf_hosts(environ: Mapping[str, str], files: Files) -> tuple[str, str] | None:
    """More than one host in ``LSB_MCPU_HOSTS`` (``"hostA 4 hostB 4"``)."""
    words = environ["LSB_MCPU_HOSTS"].split()
    return None if len(words) <= 2 else ("LSB_MCPU_HOSTS", "one host and its slots")


def pbs_nodes(environ: Mapping[str, str], files: Files) -> tuple[str, str] | str | None:
    """The distinct hosts of ``PBS_NODEFILE`` (one line per slot)."""
    text = files.get(environ["PBS_NODEFILE"])
    if text is None:
        return UNKNOWN
    if len({line.strip() for line in text.splitlines() if line.strip()}) <= 1:
        return None
    return "PBS_NODEFILE", "a node file of one host"


def pe_hosts(environ: Mapping[str, str], files: Files) -> tuple[str, str] | str | None:
    """The distinct hosts of Grid Engine's ``PE_HOSTFILE`` (``<host> <slots> <queue>
    <processors>``, one line per queue of a host: exec_job.c ``sge_exec_job``)."""
    text = files.get(environ["PE_HOSTFILE"])
    if text is None:
        return UNKNOWN
    if len({line.split()[0] for line in text.splitlines() if line.strip()}) <= 1:
        return None
    return "PE_HOSTFILE", "a PE host file of one host"


def mpi_operator_launcher(environ: Mapping[str, str], files: Files) -> tuple[str, str] | None:
    """The mpi-operator's launcher pod runs mpirun; the ranks run on its workers."""
    if environ["K_MPI_JOB_ROLE"] == "launcher":
        return "K_MPI_JOB_ROLE", "worker (a rank mpirun started)"
    return None


def _more_than(value: str, single: int | None) -> bool:
    """Whether a launcher's ``value`` (``4``, torchrun's ``1:4``) is another than ``single``;
    a value that is no count states nothing here."""
    count = value.strip().rpartition(":")[2]
    if not (count.isascii() and count.isdigit()):
        return False
    return single is None or int(count) != single


def larger_job(environ: Mapping[str, str], files=None) -> str | None:
    """What states a job of more than one node or process, for an image that did not opt in
    (contract section 11): ``"a Backend.AI session states a job of more than one node
    (BACKENDAI_CLUSTER_SIZE='4')"``, or ``None``.

    The table only, by dictionary lookups (``states`` and ``counts``); a line's ``size`` is
    asked only when its marker is complete. Here, not in the table's module, because only
    an image that did not opt in asks it.

    :param files: reads the files a ``size`` needs (cli/), as for the refusals.
    """
    for line in SOURCES:
        if any(environ.get(name) for name in line.unless):
            continue
        complete = all(environ.get(name) for name in line.marker or line.detect)
        if not complete and not line.partial:
            continue
        for name, single in (*states_of(line), *((name, 1) for name in line.counts)):
            value = environ.get(name)
            if value and _more_than(value, single):
                return (f"{line.title} states a job of more than one {line.unit} "
                        f"({name}={value!r})")
        if complete and line.size is not None:
            paths = [environ.get(p[1:], "") if p.startswith("$") else p for p in line.files]
            paths = [p for p in paths if p]
            over = globals()[line.size](
                environ, files(paths) if files is not None and paths else dict.fromkeys(paths))
            if over is not None and over != UNKNOWN:
                return (f"{line.title} states a job of more than one {line.unit} "
                        f"({over[0]}={(environ.get(over[0]) or over[1])!r})")
    return None
