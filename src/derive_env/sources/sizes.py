"""The job sizes no single variable states, for the refusals and for the note of an image
that did not opt in: :func:`over` reads a line's ``hosts`` role (a variable, or a file read
in cli/) leniently, or calls the line's ``size``: TF_CONFIG's and Vertex AI's ``cluster``
(docs/sources/README.md sections 7 and 11), Volcano's ``VC_<TASK>_NUM`` (section 5), the
mpi-operator's launcher pod (section 6).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from derive_env.errors import shorten
from derive_env.sources import SOURCES, Source, file_path, has_size, states_of

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing
if TYPE_CHECKING:
    from derive_env.topology import FileReader

#: The answer when the job's size cannot be told.
UNKNOWN = "unknown"

#: The lines whose own variables configure the framework's launcher without derive-env: an
#: image that did not opt in is not alone there, so it is not told so. torch.distributed's
#: ``env://`` and torchrun read ``MASTER_ADDR``, ``MASTER_PORT``, ``RANK``, ``WORLD_SIZE``
#: and ``PET_*`` (torch/distributed/run.py ``env`` defaults, rendezvous.py
#: ``_env_rendezvous_handler``), which torchrun and the Kubeflow operators set
#: (training-operator pkg/controller.v1/pytorch/envvar.go, trainer plugins/torch/torch.go);
#: TensorFlow reads ``TF_CONFIG`` (TFConfigClusterResolver); JAX reads the TPU's
#: ``TPU_WORKER_*`` (its cloud_tpu_cluster); Ray Train sets every torch variable itself.
CONFIGURED = frozenset({"torchrun", "kubeflow-pytorchjob", "kubeflow-trainjob",
                        "kubeflow-elastic", "kubeflow-pytorchjob-classic", "tf-config",
                        "gke-tpu", "ray-train"})


def _json(text: str | None) -> object:
    from derive_env.sources.lists import json_value  # only a size that reads JSON

    return json_value(text)


#: A host list's form -> (its entries as a person counts them, what a job of one holds).
_FORMS: dict[str, tuple[Callable[[str], object], str]] = {
    "ips": (lambda text: [line for line in text.split("\n") if line.strip()], "one IP"),
    "comma": (lambda text: [host for host in text.split(",") if host.strip()], "one host"),
    "pairs": (lambda text: text.split()[::2], "one host and its slots"),
    "json": (_json, "a JSON list of one host"),
    "slots": (lambda text: {line.strip() for line in text.splitlines() if line.strip()},
              "a node file of one host"),
    "pe_hostfile": (lambda text: {line.split()[0] for line in text.splitlines()
                                  if line.strip()}, "a PE host file of one host"),
}


def over(line: Source, environ: Mapping[str, str], files: FileReader | None
         ) -> tuple[str, str] | tuple[str, str, str] | str | None:
    """Whether ``line`` (its marker complete) states more than one ``unit`` by its host list
    or its ``size`` (``files``: cli/'s reader): ``None`` (a job of one), ``(variable, what a
    job of one holds)``, ``(what, value, expected)`` for a file's entry, or :data:`UNKNOWN`
    (the size cannot be told: the line is refused as one that does not say it)."""
    hosts = line.roles.get("hosts") if line.roles else None
    if hosts is None:
        return globals()[line.size](environ)
    where, form, *key = hosts
    entries, one = _FORMS[form]
    if not where.startswith("$"):  # a variable
        found = entries(environ[where])
        if isinstance(found, list | set) and len(found) <= 1 and (found or form != "json"):
            return None
        return where, one
    path = file_path(where, environ)
    text = (files([path]) if files is not None and path else {}).get(path)
    if text is None:
        return UNKNOWN
    found = entries(text)
    if key:  # the list at ``key`` of a JSON object
        found = found.get(key[0]) if isinstance(found, dict) else None
        if not isinstance(found, list) or not found:
            return UNKNOWN
        if len(found) == 1:
            return None
        import json

        return f"{key[0]} in {path}", json.dumps(found), "a list of one host"
    return None if len(found) <= 1 else (where[1:].partition(":")[0], one)


def tasks(spec: object) -> int:
    """The tasks of a ``TF_CONFIG`` / ``CLUSTER_SPEC`` ``cluster`` (lists of ``host:port``,
    or the sparse ``{"index": "host:port"}`` map of a TFJob); 0 when it is not one."""
    cluster = spec.get("cluster") if isinstance(spec, dict) else None
    if not isinstance(cluster, dict):
        return 0
    return sum(len(entries) for entries in cluster.values() if isinstance(entries, list | dict))


def tf_config_tasks(environ: Mapping[str, str], variable: str = "TF_CONFIG"
                    ) -> tuple[str, str] | None:
    """A ``TF_CONFIG`` (a TFJob pod's) whose ``cluster`` holds more than one task."""
    return (variable, "a cluster of one task") if tasks(_json(environ[variable])) > 1 else None


def cluster_spec_tasks(environ: Mapping[str, str]) -> tuple[str, str] | None:
    """Vertex AI's ``CLUSTER_SPEC`` with more than one task in its pools."""
    return tf_config_tasks(environ, "CLUSTER_SPEC")


def volcano_pods(environ: Mapping[str, str]) -> tuple[str, str] | str | None:
    """The pods of every task of a Volcano Job: the sum of its ``VC_<TASK>_NUM``."""
    counts = {k: v for k, v in environ.items()
              if k.startswith("VC_") and k.endswith("_NUM") and v.strip().isdigit()}
    if not counts:
        return UNKNOWN
    if sum(int(v) for v in counts.values()) <= 1:
        return None
    return max(sorted(counts), key=lambda k: int(counts[k])), "1 pod in all VC_<TASK>_NUM"


def mpi_operator_launcher(environ: Mapping[str, str]) -> tuple[str, str] | None:
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
    """What states a larger job, for an image that did not opt in (docs/behaviour.md section
    11): ``"a Backend.AI session states ... (BACKENDAI_CLUSTER_SIZE='4')"``, or ``None`` (also
    with a complete line of :data:`CONFIGURED`); :func:`over` only with a complete marker."""
    if any(line.name in CONFIGURED and all(environ.get(name) for name in line.detect)
           and not any(environ.get(name) for name in line.unless) for line in SOURCES):
        return None
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
        if complete and has_size(line):
            stated = over(line, environ, files)
            if stated is not None and stated != UNKNOWN:
                return (f"{line.title} states a job of more than one {line.unit} "
                        f"({stated[0]}={(environ.get(stated[0]) or stated[1])!r})")
    return None


def not_opted_in(environ: Mapping[str, str], image: bool, opt_in: tuple[str, str],
                 files=None) -> str | None:
    """The warning of a start that did not opt in inside a larger job, or ``None``; it names
    the image's label first when ``image`` (a labels file was read), else the job's opt-in;
    ``opt_in``: the label's name and its ``DERIVE_ENV_<NAME>`` variable."""
    label, variable = opt_in
    job = larger_job(environ, files)
    if job is None:
        return None
    but = f"but {shorten(job, 300)}, so every node runs the command as a job of its own"
    if image:
        return (f"nothing derived: the image did not opt in (label {label} is not set), {but}. "
                f"To opt in, set the label {label}=pytorch (or tensorflow, jax) in the image, "
                f"{variable}=pytorch for the job, or derive-env --frameworks pytorch")
    return (f"nothing derived: the job did not opt in (no --frameworks, no {variable}, no "
            f"labels file), {but}. To opt in, run derive-env --frameworks pytorch (or "
            f"tensorflow, jax), or export {variable}=pytorch for the job")
