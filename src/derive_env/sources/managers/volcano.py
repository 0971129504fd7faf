"""The Volcano Job source: one node per pod (line ``volcano``, docs/sources/kubernetes.md).
The job plugins (volcano-sh/volcano ``pkg/controllers/job/plugins/``, ``OnPodCreate``):

- ``env/env.go``: ``VC_TASK_INDEX`` = ``VK_TASK_INDEX`` = the pod's index in its task.
- ``svc/svc.go`` ``GenerateHosts``: hostname ``<job>-<task>-<i>``; per task (upper-cased,
  ``-`` as ``_``) ``VC_<TASK>_HOSTS`` (``<hostname>.<subdomain>``, comma-separated),
  ``VC_<TASK>_NUM``, and ``/etc/volcano/<task>.host`` (one per line).
- ``distributed-framework/pytorch/pytorch.go``: ``MASTER_ADDR`` = the master task's first
  host, ``MASTER_PORT``, ``WORLD_SIZE`` = pods, ``RANK`` = pod rank: node values.

Nodes: the master task (``MASTER_ADDR``'s with the pytorch plugin, else ``MASTER``, else the
first by name), then the others by name (with the plugin, only its worker task).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

from derive_env.errors import TopologyError, describe, shorten
from derive_env.hosts import check_hosts, host_problem
from derive_env.sources.report import Report
from derive_env.topology import Node
from derive_env.validation import parse_int, parse_port, variable_int

if TYPE_CHECKING:
    from derive_env.sources import Source

#: Where the svc plugin mounts its ConfigMap (svc/const.go, ConfigMapMountPath).
HOSTS_DIR = "/etc/volcano"
#: The pytorch plugin's pod-level variables.
PYTORCH = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK")

_TASK_VAR = re.compile(r"VC_([A-Z0-9_]+)_(HOSTS|NUM)")
_FIX = ("Volcano's svc and env plugins set it (spec.plugins: {svc: [], env: []}, volcano-sh/"
        "volcano pkg/controllers/job/plugins); do not set it in the task's env")


def _tasks(environ: Mapping[str, str]) -> list[str]:
    """The task keys (``MASTER``, ``WORKER``) that have ``VC_<TASK>_HOSTS`` or ``_NUM``."""
    return sorted({m[1] for k, v in environ.items() if v and (m := _TASK_VAR.fullmatch(k))})


def host_file(task: str) -> str:
    """``/etc/volcano/<task>.host`` (svc.go ``ConfigMapTaskHostFmt``; a lower-case task)."""
    return f"{HOSTS_DIR}/{task.lower()}.host"


def files_needed(environ: Mapping[str, str], name: str) -> tuple[str, ...]:
    """The ``.host`` files of tasks without ``VC_<TASK>_HOSTS`` (``--inject-hosts-env=false``)."""
    return tuple(host_file(t) for t in _tasks(environ) if not environ.get(f"VC_{t}_HOSTS"))


def _hosts(environ: Mapping[str, str], files: Mapping[str, str | None], task: str
           ) -> tuple[list[str], str]:
    """One task's hosts and where they came from; ``VC_<TASK>_NUM`` checked against them."""
    name = f"VC_{task}_HOSTS"
    if environ.get(name):
        hosts, where = [h.strip() for h in environ[name].split(",")], name
    else:
        text = files.get(host_file(task))
        if text is None:
            raise TopologyError(describe(
                f"VC_{task}_NUM", environ.get(f"VC_{task}_NUM", ""),
                f"{name} or a readable {host_file(task)} beside it (the svc plugin's host "
                f"list of task {task.lower()}); {_FIX}"))
        hosts, where = [h.strip() for h in text.splitlines() if h.strip()], host_file(task)
    bad = check_hosts(hosts)
    if not hosts or bad is not None:
        raise TopologyError(describe(
            where, shorten(",".join(hosts)), f"a list of <hostname>.<subdomain> "
            f"({bad[2] if bad else 'not empty'}; svc.go GenerateHosts); {_FIX}"))
    count = environ.get(f"VC_{task}_NUM")
    if count and count.strip() != str(len(hosts)):
        raise TopologyError(describe(
            f"VC_{task}_NUM", count, f"{len(hosts)}, the hosts in {where} (svc.go "
            f"GenerateHosts); {_FIX}"))
    return hosts, where


def _order(environ: Mapping[str, str], lists: dict[str, list[str]], plugin: bool) -> list[str]:
    """The node tasks in canonical order (module docstring)."""
    master = "MASTER" if "MASTER" in lists else sorted(lists)[0]
    if plugin:
        firsts = [t for t in sorted(lists) if lists[t][0] == environ["MASTER_ADDR"]]
        if not firsts:
            raise TopologyError(describe(
                "MASTER_ADDR", environ["MASTER_ADDR"], "the first host of a task (the "
                f"pytorch plugin's master task, pytorch.go generateMasterAddr): "
                f"{', '.join(lists[t][0] for t in sorted(lists))}; {_FIX}"))
        master = firsts[0]
    others = [t for t in sorted(lists) if t != master]
    if plugin and len(others) > 1:
        # pytorch.go counts only --master and --worker (default "worker"), not a ps ...
        others = [t for t in others if t == "WORKER"]
    elif plugin and others and others[0] != "WORKER" and len(lists[master]) + len(
            lists[others[0]]) != _int(environ["WORLD_SIZE"]):
        # one other task WORLD_SIZE leaves out: not its --worker task (a ps, an evaluator)
        others = []
    return [master, *others]


def _int(text: str) -> int:
    """``text`` as an integer >= 0, or -1 when it is none (the plugin check then names it)."""
    try:
        return parse_int(text, minimum=0)
    except ValueError:
        return -1


def _own(environ: Mapping[str, str], lists: dict[str, list[str]], order: list[str],
         index: int) -> tuple[int, str]:
    """This pod's node rank and task: ``HOSTNAME``'s place, checked against the index."""
    host = environ.get("HOSTNAME", "")
    for task in order:
        names = [h.split(".", 1)[0] for h in lists[task]]
        if host in names:
            place = names.index(host)
            if place != index:
                raise TopologyError(describe(
                    "VC_TASK_INDEX", environ["VC_TASK_INDEX"],
                    f"{place}, the place of HOSTNAME={host!r} in VC_{task}_HOSTS (env.go "
                    f"sets the pod's index within its task); {_FIX}"))
            return sum(len(lists[t]) for t in order[:order.index(task)]) + place, task
    raise TopologyError(describe(
        "HOSTNAME", host, f"the hostname of a pod of the training tasks "
        f"({', '.join(t.lower() for t in order)}): svc.go gives each pod its name "
        f"<job>-<task>-<index> as hostname; a pod of another task is no training node"))


def _plugin_checks(environ: Mapping[str, str], count: int, rank: int) -> int:
    """The pytorch plugin's ``WORLD_SIZE``, ``RANK`` against the nodes; its ``MASTER_PORT``."""
    for name, expected, what in (("WORLD_SIZE", count, "the pods of the master and worker "
                                  "tasks"), ("RANK", rank, "this pod's node rank (master 0, "
                                             "worker i: i + 1)")):
        if _int(environ[name]) != expected:
            raise TopologyError(describe(
                name, environ[name], f"{expected}, {what}: the pytorch plugin sets pod "
                f"values, not process ranks (pytorch.go OnPodCreate); {_FIX}"))
    try:
        return parse_port(environ["MASTER_PORT"])
    except ValueError as exc:
        raise TopologyError(describe("MASTER_PORT", environ["MASTER_PORT"],
                                     f"{exc}; {_FIX}")) from None


def read(environ: Mapping[str, str], line: Source,
         files: Mapping[str, str | None] | None = None) -> Report:
    """The nodes (module docstring), the node rank (``HOSTNAME``'s place, checked against
    ``VC_TASK_INDEX``), the plugin's ``MASTER_PORT``. TopologyError: no svc plugin's lists,
    a malformed value or one that disagrees."""
    raw = environ["VC_TASK_INDEX"]
    index = variable_int(environ, "VC_TASK_INDEX", 0, f"; {_FIX}")
    if environ.get("VK_TASK_INDEX", raw) != raw:
        raise TopologyError(describe("VK_TASK_INDEX", environ["VK_TASK_INDEX"],
                                     f"VC_TASK_INDEX={raw!r} (env.go sets both); {_FIX}"))
    tasks = _tasks(environ)
    if not tasks:
        raise TopologyError(describe(
            "VC_TASK_INDEX", raw, "VC_<TASK>_HOSTS and VC_<TASK>_NUM beside it: a Volcano "
            "Job states its pods only through the svc plugin; add `svc: []` to the job's "
            "spec.plugins (and do not set --inject-hosts-env=false); the same on every pod"))
    found = {t: _hosts(environ, files or {}, t) for t in tasks}
    lists = {t: hosts for t, (hosts, _) in found.items()}
    plugin = all(environ.get(n) for n in PYTORCH) and not environ.get("TORCHELASTIC_RUN_ID")
    if plugin and host_problem(environ["MASTER_ADDR"]) is not None:
        raise TopologyError(describe("MASTER_ADDR", environ["MASTER_ADDR"],
                                     f"{host_problem(environ['MASTER_ADDR'])}; {_FIX}"))
    order = _order(environ, lists, plugin)
    nodes = tuple(Node(h, t.lower(), i + 1) for t in order for i, h in enumerate(lists[t]))
    rank, task = _own(environ, lists, order, index)
    port = _plugin_checks(environ, len(nodes), rank) if plugin else None
    wheres = tuple(found[t][1] for t in order)
    inputs = {"nodes": wheres, "node_rank": ("HOSTNAME", "VC_TASK_INDEX"),
              "master": wheres[:1], "ports": wheres}
    if port is not None:
        inputs["master_port"] = ("MASTER_PORT",)
    return Report(
        source=line.name,
        title=line.title,
        nodes=nodes,
        node_rank=rank,
        master_port=port,
        job=(line.name, nodes[0].host, str(len(nodes))),
        preset=frozenset(PYTORCH) if plugin else frozenset(),
        inputs=inputs,
        order=("tasks " + ", ".join(t.lower() for t in order) + " (the master task first, "
               "then by name), pods in each task's list order"),
        notes=(f"pod {index} of task {task.lower()} (VC_TASK_INDEX, HOSTNAME)",
               *(("RANK and WORLD_SIZE are the pytorch plugin's pod rank and pod count "
                  "(node values), not process ranks",) if plugin else ())),
    )
