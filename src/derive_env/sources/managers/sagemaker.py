"""Amazon SageMaker: lines ``sagemaker-platform`` (``TRAINING_JOB_*``) and ``sagemaker`` (the
training toolkit's ``SM_*``), docs/sources/clouds.md; rules of aws/sagemaker-training-toolkit
``src/sagemaker_training/``. This container is resourceconfig.json's ``current_host`` (the
toolkit preloads a ``gethostname`` that returns it, ``c/gethostname.c``); without the file,
``SM_HOSTS`` (never sorted), ``SM_CURRENT_HOST``, ``SM_CURRENT_INSTANCE_GROUP``,
``SM_INSTANCE_GROUPS_DICT`` (``mapping.py`` ``to_env_vars``). The nodes: the distribution
groups' hosts in file order (``environment.py`` ``get_distribution_hosts``; the groups:
``SM_DISTRIBUTION_INSTANCE_GROUPS``, else the hyperparameter :data:`KEY`, else the current
group), the master the first (``get_master_hostname``). In an MPI rank mpirun ``-x`` copied
the master's ``SM_*`` (``mpi.py`` ``MasterRunner._create_command``, ``smdataparallel.py``,
toolkit issue #158): they are only checked, the host is the file's ``current_host``, and
every rank reports the toolkit's line, its job named by the first host.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING

from derive_env.errors import TopologyError, describe, shorten
from derive_env.hosts import check_hosts, repeated_host
from derive_env.sources import SAGEMAKER_CONFIG_VARIABLE as CONFIG_VARIABLE
from derive_env.sources.lists import json_value
from derive_env.sources.report import Report
from derive_env.topology import nodes_of
from derive_env.validation import PER_NODE, variable_int

if TYPE_CHECKING:
    from derive_env.sources import Source

#: The hyperparameter naming the groups that train (the toolkit's environment.py).
KEY = "sagemaker_distribution_instance_groups"
#: The training toolkit's default group name (environment.py).
HOMOGENEOUS = "homogeneousCluster"
_FIX = ("SageMaker writes it for every host of the training job; run derive-env in the "
        "training container SageMaker starts")
_OUTSIDE_FIX = ("run the command without derive-env on the hosts of this group (or choose "
                "--source none, or DERIVE_ENV_SOURCE=none), or name the group in the "
                "estimator's instance_groups of the distribution")


def _paths(environ: Mapping[str, str]) -> tuple[str, str]:
    """The resource config (``DERIVE_ENV_SAGEMAKER_RESOURCE_CONFIG`` or the platform's) and
    ``hyperparameters.json`` beside it (the platform writes both to /opt/ml/input/config/)."""
    from derive_env.sources import BY_NAME, file_path

    path = file_path(BY_NAME["sagemaker-platform"].roles["hosts"][0], environ)
    folder = path.rpartition("/")[0]
    return path, f"{folder}/hyperparameters.json" if folder else "hyperparameters.json"


def files_needed(environ: Mapping[str, str], name: str) -> tuple[str, ...]:
    """:func:`_paths`, for the platform's line and an MPI rank (whose host is the file's)."""
    return _paths(environ) if name == "sagemaker-platform" or mpi_rank(environ) else ()


def _config_from_sm(environ: Mapping[str, str]) -> dict[str, object]:
    """The toolkit's ``SM_*`` as a resource config (its ``to_env_vars`` inverted)."""
    config: dict[str, object] = {"current_host": environ.get("SM_CURRENT_HOST"),
                                 "hosts": json_value(environ.get("SM_HOSTS"))}
    if not isinstance(config["hosts"], list):
        raise TopologyError(describe("SM_HOSTS", environ.get("SM_HOSTS", ""),
                                     "a JSON list of host names (the training toolkit's)"))
    groups = json_value(environ.get("SM_INSTANCE_GROUPS_DICT"))
    if isinstance(groups, dict) and groups:
        config["instance_groups"] = list(groups.values())
    if environ.get("SM_CURRENT_INSTANCE_GROUP"):
        config["current_group_name"] = environ["SM_CURRENT_INSTANCE_GROUP"]
    return config


def _strings(value: object) -> list[str] | None:
    return (value if isinstance(value, list) and value and all(isinstance(v, str) for v in value)
            else None)


def _distribution_groups(environ: Mapping[str, str], current: str,
                         hyperparameters: str | None) -> tuple[list[str], str]:
    """The distribution instance groups and where they came from (module docstring); a
    hyperparameter's value is JSON text (the toolkit's ``read_hyperparameters``)."""
    named = _strings(json_value(environ.get("SM_DISTRIBUTION_INSTANCE_GROUPS")))
    if named is not None:
        return named, "SM_DISTRIBUTION_INSTANCE_GROUPS"
    document = json_value(hyperparameters)
    value = document.get(KEY) if isinstance(document, dict) else None
    named = _strings(json_value(value) if isinstance(value, str) else value)
    if named is not None:
        return named, f"hyperparameter {KEY}"
    return [current], "the current group"


def _distribution_hosts(config: Mapping[str, object], groups: list[str], where: str
                        ) -> tuple[list[str], dict[str, str]]:
    """``get_distribution_hosts`` (module docstring), and the group of every host."""
    listed = config.get("instance_groups")
    if listed is not None and not isinstance(listed, list):
        raise TopologyError(f"{where}: expected instance_groups, a list of objects with an "
                            "instance_group_name and a list of hosts, got "
                            f"{json.dumps(listed)[:200]}; {_FIX}")
    if not listed:
        return list(config["hosts"]), {}  # local mode: every host
    hosts: list[str] = []
    group_of: dict[str, str] = {}
    for group in listed:
        name = group.get("instance_group_name") if isinstance(group, dict) else None
        members = _strings(group.get("hosts")) if isinstance(group, dict) else None
        if not isinstance(name, str) or members is None:
            raise TopologyError(f"{where}: expected instance_groups entries with an "
                                f"instance_group_name and a list of hosts, got {group!r}; {_FIX}")
        group_of.update(dict.fromkeys(members, name))
        if name in groups:
            hosts.extend(members)
    return hosts, group_of


def _checked(config: object, where: str) -> tuple[str, list[str]]:
    if not isinstance(config, dict):
        raise TopologyError(f"{where}: expected a JSON object (SageMaker's resource config); "
                            f"{_FIX}")
    current, hosts = config.get("current_host"), _strings(config.get("hosts"))
    if hosts is None:
        raise TopologyError(f"{where}: expected hosts, a list of host names; {_FIX}")
    bad = check_hosts(hosts)
    if bad is not None:
        raise TopologyError(f"{where}: expected host names in hosts: entry {bad[0]} "
                            f"({bad[1]!r}): {bad[2]}; {_FIX}")
    repeated = repeated_host(hosts)
    if repeated is not None:
        raise TopologyError(f"{where}: expected distinct hosts: {repeated!r} is listed twice; "
                            f"{_FIX}")
    if not isinstance(current, str) or current not in hosts:
        raise TopologyError(f"{where}: expected current_host to be one of hosts "
                            f"{json.dumps(hosts)}, got {current!r}; {_FIX}")
    return current, hosts


def _config(environ: Mapping[str, str], line: Source,
            files: Mapping[str, str | None] | None) -> tuple[object, str, str]:
    """The resource config, where it came from (for messages) and the rule's name."""
    if line.name == "sagemaker-platform" or mpi_rank(environ):
        path = _paths(environ)[0]
        text = (files or {}).get(path)
        if text is not None:
            return _parsed(text, path), path, path
        if line.name == "sagemaker-platform" and not (
                environ.get("SM_HOSTS") and environ.get("SM_CURRENT_HOST")):
            # TRAINING_JOB_ARN tells the platform's job from the toolkit's SM_* alone.
            raise TopologyError(describe(
                "TRAINING_JOB_ARN", environ["TRAINING_JOB_ARN"],
                f"SageMaker's resource config at {path} (readable JSON; another path: "
                f"{CONFIG_VARIABLE}), or the training toolkit's SM_HOSTS and SM_CURRENT_HOST: "
                "TRAINING_JOB_ARN and TRAINING_JOB_NAME state a SageMaker training job, but "
                "neither is there, so the job's hosts are unknown; " + _FIX))
    return _config_from_sm(environ), "SM_HOSTS/SM_CURRENT_HOST", "SM_HOSTS"


def _parsed(text: str, where: str) -> object:
    """The resource config's JSON (``None``: not JSON, refused by :func:`_checked`).
    TopologyError: a key twice in one object (readers keep the last: this host may move)."""
    twice: list[str] = []

    def unique(pairs: list[tuple[str, object]]) -> dict[str, object]:
        document = dict(pairs)
        if len(document) != len(pairs) and not twice:
            keys = [key for key, _ in pairs]
            twice.append(next(k for i, k in enumerate(keys) if k in keys[:i]))
        return document

    try:
        document = json.loads(text, object_pairs_hook=unique)
    except (ValueError, RecursionError):
        return None
    if twice:
        raise TopologyError(f"{where}: expected each key once in a JSON object, got "
                            f"{shorten(twice[0], 80)!r} twice (which value is meant?); {_FIX}")
    return document


def mpi_rank(environ: Mapping[str, str]) -> str | None:
    """The rank variable set of the table's MPI launchers (``OMPI_COMM_WORLD_RANK`` ...)."""
    from derive_env.sources import SOURCES

    names = (other.roles["rank"] if other.roles else other.detect[0]
             for other in SOURCES if other.depth == 1)
    return next((name for name in names if environ.get(name)), None)


def _copied(environ: Mapping[str, str], config: Mapping[str, object], where: str,
            rank: str) -> str:
    """Check the ``SM_*`` mpirun copied from the master: ``SM_CURRENT_HOST`` one of the
    hosts, ``SM_HOSTS`` the resource config's; say so."""
    hosts = list(config["hosts"])  # a list of names: _checked
    copied = environ.get("SM_CURRENT_HOST", "")
    why = (f"in an MPI rank ({rank} set) it is the value mpirun copied from the host that "
           "ran it (mpirun -x, the training toolkit's mpi.py)")
    if copied and copied not in hosts:
        raise TopologyError(describe("SM_CURRENT_HOST", copied,
                                     f"one of the hosts {json.dumps(hosts)}: {why}; {_FIX}"))
    listed = json_value(environ.get("SM_HOSTS")) if environ.get("SM_HOSTS") else hosts
    if listed != hosts:
        raise TopologyError(describe("SM_HOSTS", environ["SM_HOSTS"],
                                     f"the hosts of {where}, {json.dumps(hosts)}: {why}; {_FIX}"))
    return (f"SM_CURRENT_HOST={copied} is the value mpirun copied to every rank ({rank} "
            "set): not this host" if copied else f"an MPI rank ({rank} set)")


def read(environ: Mapping[str, str], line: Source,
         files: Mapping[str, str | None] | None = None) -> Report:
    """The distribution hosts, ``current_host``'s place among them (:func:`_report`).

    :raises TopologyError: no file nor ``SM_*``, a malformed one, ``current_host`` not in
        ``hosts`` or not ``SM_CURRENT_HOST``, a host outside the distribution groups.
    """
    config, where, rule = _config(environ, line, files)
    current, _hosts = _checked(config, where)
    group = str(config.get("current_group_name") or HOMOGENEOUS)
    hyper = (files or {}).get(_paths(environ)[1]) if rule != "SM_HOSTS" else None
    groups, named_by = _distribution_groups(environ, group, hyper)
    nodes, group_of = _distribution_hosts(config, groups, where)
    rank = mpi_rank(environ)
    copy_note = _copied(environ, config, where, rank) if rank else None
    shared = bool(copy_note and environ.get("SM_HOSTS"))  # the toolkit's MPI mode
    if copy_note and rule == "SM_HOSTS":  # no file: nothing states this rank's host
        return _report(environ, rule, shared, Report(
            line.name, line.title, nodes_of(nodes), notes=(
                f"{copy_note}; without {_paths(environ)[0]} ({CONFIG_VARIABLE}) no variable "
                "states this rank's host: the MPI launcher gives the ranks",)))
    if not copy_note and environ.get("SM_CURRENT_HOST") not in (None, "", current):
        raise TopologyError(describe(
            "SM_CURRENT_HOST", environ["SM_CURRENT_HOST"],
            f"current_host of {where} ({current!r}): the training toolkit copies it; {_FIX}"))
    if current not in nodes:
        raise TopologyError(
            f"{where}: current_host {current!r} is in instance group "
            f"{group_of.get(current, group)!r}, not in a distribution instance group "
            f"({', '.join(groups)}): this host is not part of the training job; "
            + _OUTSIDE_FIX)
    notes = [f"host {current} (current_host), group {group!r}; distribution groups: "
             f"{', '.join(groups)} ({named_by})", *([copy_note] if copy_note else [])]
    return _report(environ, rule, shared, Report(
        line.name, line.title, nodes_of(nodes), nodes.index(current), notes=tuple(notes)))


def _report(environ: Mapping[str, str], rule: str, shared: bool, placed: Report) -> Report:
    """``placed`` with the GPUs, the job and the inputs; ``shared`` (an MPI rank): the
    toolkit's line's job, named by the first host (only mpirun's keeps TRAINING_JOB_NAME)."""
    gpus = (variable_int(environ, "SM_NUM_GPUS", 0, " (the training toolkit's GPU count)",
                         PER_NODE) if environ.get("SM_NUM_GPUS") else None)
    job_name = "" if shared else environ.get("TRAINING_JOB_NAME", "")
    first = placed.nodes[0].host
    inputs = {"nodes": (rule,), "num_nodes": (rule,), "master": (rule,),
              "ports": ("TRAINING_JOB_NAME", rule) if job_name else (rule,),
              **({"node_rank": (rule,)} if placed.node_rank is not None else {}),
              **({"gpus": ("SM_NUM_GPUS",)} if gpus else {})}
    if shared and placed.source != "sagemaker":
        from derive_env.sources import BY_NAME

        placed = placed._replace(
            source="sagemaker", title=BY_NAME["sagemaker"].title, notes=(
                *placed.notes, "TRAINING_JOB_NAME is not this job's name in an MPI rank: "
                "mpirun copies only the SM_* to the ranks on the other hosts (the training "
                f"toolkit's mpi.py), so every rank names the job by its first host ({first}), "
                "as source sagemaker"))
    return placed._replace(
        gpus=gpus or None, session_id=job_name or None, job=("sagemaker", job_name, first),
        inputs=inputs, order="the distribution instance groups' hosts in file order (the "
        "training toolkit's get_distribution_hosts)")
