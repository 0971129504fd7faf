"""Startup cost of both paths of a container start (issue 2, item 12; issue 6, item 3).

Measures the wall time of a container start through the shim, side by side on its two
paths, each the way it really runs (the console-script wrapper next to the interpreter,
labels from the labels file named by ``DERIVE_ENV_LABELS_FILE``):

* ``entrypoint``: ``derive-env -- /bin/true``, as Docker runs the exec-form
  ``ENTRYPOINT ["derive-env", "--"]``;
* ``hook``: ``derive-env --dry-run --format shell``, what Backend.AI's sourced
  ``/opt/container/bootstrap.sh`` runs (docker/bootstrap.sh) on every container start;

for five cases:

* ``opted-in/4``: an opted-in image (frameworks ``pytorch,tensorflow``) in a 4-node
  Backend.AI session (HOSTS deliberately not starting with ``main1``);
* ``not-opted-in``: an image whose labels file has no ``frameworks`` label;
* ``opted-in/4096``: the same opted-in image in a 4096-node session (``main1`` plus
  ``sub1..sub4095`` in a shuffled order, ``REPLICAS=main:1,sub:4095``);
* ``slurm/4`` and ``slurm/4096``: an image opted in for ``pytorch,jax`` (one process per
  task: TensorFlow's ``TF_CONFIG`` for 32768 tasks would be over the kernel's 128 KiB
  limit for one variable) in a task of an ``srun`` step of 4 and of 4096 nodes
  (``n[0001-4096]``), 8 tasks per node, the task in the middle (node 2048 of 4096, local
  rank 3), the other ``SLURM_*`` variables as recorded from a real ``srun``
  (tests/fixtures/recorded/srun-block/task3.env);

against two floors on the same interpreter: ``python -I -c pass`` (the bare interpreter)
and ``python -I -c "from pydantic import BaseModel"`` (the cost of the mandated dependency).
``python -I -m derive_env ...`` is measured too, for information.

Method: every case runs once per round, round-robin (each round starts one case later, so
no case always follows the same one), after a few warm-up rounds; each run is a fresh
``posix_spawn`` with a clean, explicit environment, stdin/stdout/stderr on ``/dev/null``,
timed with ``perf_counter`` around spawn + ``wait4`` (and the child's user+system CPU time
from ``wait4``'s rusage). Reported: medians, the ratios of medians against the targets,
and for each ratio the median of the per-round ratios (paired within one round, so it is
less sensitive to a shared machine's load drifting between rounds). Before timing, every
shim case is checked once: the ENTRYPOINT path with a command that dumps its environment,
the hook path by eval'ing its output in ``sh`` and dumping the shell's environment; each
must have derived what it should (an error path exits early and would look fast).
``--instructions`` adds instruction counts (valgrind's callgrind, deterministic: a
cross-check that the machine's load cannot move; the ENTRYPOINT path then runs a command
that is not found, so the same work runs up to the exec).

Targets, per path (ENTRYPOINT: issue 2, item 12; hook: issue 6, item 3):

==================================  ==========  =====
ratio                               entrypoint  hook
==================================  ==========  =====
opted-in / pydantic floor           1.5         1.3
not-opted-in / bare interpreter     2.0         2.0
4096 nodes / 4 nodes                1.2         1.1
Slurm 4096 nodes / 4 nodes          1.1         -
==================================  ==========  =====

(issue 9, item 10; the hook's Slurm ratio is measured for information.)

Plus an import check: the not-opted-in path, on both paths, must import neither pydantic
nor click (``-X importtime``); the opted-in path's heaviest imports are listed.

Usage::

    python benchmarks/startup.py [--rounds 30] [--warmup 3] [--path entrypoint|hook|both]
                                 [--entry script|module|both] [--instructions] [--json]
                                 [--check]

Run it with the interpreter of the environment under test: the console script is looked
up next to ``sys.executable``. Exit status: 0; with ``--check``, 1 when a target (or the
import check) is missed; 2 when the benchmark cannot run or a case does not behave.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

PREFIX = "ai.backend.distributed."
CLEAN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: modules that must not be imported on the not-opted-in path (and their submodules).
FORBIDDEN_ON_PLAIN_PATH = ("pydantic", "pydantic_core", "click")

BARE, PYDANTIC = "floor: python -I -c pass", "floor: python -I -c 'from pydantic ...'"
#: informational: what pydantic costs once a model is defined and used (no target).
ONE_MODEL = "floor: one pydantic model"
ONE_MODEL_CODE = "from pydantic import BaseModel\nclass M(BaseModel):\n    x: int\nM(x=1)"
OPTED_4, PLAIN, OPTED_4096 = "opted-in/4", "not-opted-in", "opted-in/4096"
SLURM_4, SLURM_4096 = "slurm/4", "slurm/4096"
#: a real srun task's variables (tests/e2e/record_envs.py), scaled by :func:`slurm_env`.
RECORDED_TASK = (Path(__file__).resolve().parent.parent
                 / "tests" / "fixtures" / "recorded" / "srun-block" / "task3.env")
ENTRIES = ("script", "module")
ENTRYPOINT, HOOK = "entrypoint", "hook"
PATHS = (ENTRYPOINT, HOOK)
#: the shim's arguments on each path (the ENTRYPOINT path's command comes after ``--``).
PATH_ARGS = {ENTRYPOINT: ["--", "/bin/true"], HOOK: ["--dry-run", "--format", "shell"]}

#: (name, numerator case, denominator case, {path: target}; no target: for information only)
RATIOS: tuple[tuple[str, str, str, dict[str, float]], ...] = (
    ("opted-in / pydantic floor", OPTED_4, PYDANTIC, {ENTRYPOINT: 1.5, HOOK: 1.3}),
    ("not-opted-in / bare interpreter", PLAIN, BARE, {ENTRYPOINT: 2.0, HOOK: 2.0}),
    ("4096 nodes / 4 nodes", OPTED_4096, OPTED_4, {ENTRYPOINT: 1.2, HOOK: 1.1}),
    ("Slurm 4096 nodes / 4 nodes", SLURM_4096, SLURM_4, {ENTRYPOINT: 1.1}),
    ("opted-in / one-model floor", OPTED_4, ONE_MODEL, {}),
)


class BenchmarkError(Exception):
    """The benchmark cannot run, or a case does not do what it should (exit 2)."""


@dataclass
class Case:
    """One command to time: a floor, or the shim on one input (entry ``script``/``module``,
    path ``entrypoint``/``hook``)."""

    key: str
    label: str
    argv: list[str]
    env: dict[str, str]
    entry: str = ""
    path: str = ""
    expected: dict[str, str] = field(default_factory=dict)
    instructions: int | None = None
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)


# -- inputs ----------------------------------------------------------------------------------


def backendai_env(nodes: int, own_sub: int, seed: int) -> dict[str, str]:
    """The ``BACKENDAI_CLUSTER_*`` variables of container ``sub<own_sub>`` of a session.

    HOSTS is ``main1`` plus ``sub1..sub<nodes-1>`` shuffled (never starting with ``main1``),
    LOCAL_RANK is the own host's position in the canonical order (main1 = 0, subN = N).
    """
    hosts = ["main1", *(f"sub{i}" for i in range(1, nodes))]
    rng = random.Random(seed)
    rng.shuffle(hosts)
    if hosts[0] == "main1":
        hosts.append(hosts.pop(0))
    return {
        "BACKENDAI_CLUSTER_SIZE": str(nodes),
        "BACKENDAI_CLUSTER_HOSTS": ",".join(hosts),
        "BACKENDAI_CLUSTER_HOST": f"sub{own_sub}",
        "BACKENDAI_CLUSTER_ROLE": "sub",
        "BACKENDAI_CLUSTER_IDX": str(own_sub),
        "BACKENDAI_CLUSTER_LOCAL_RANK": str(own_sub),
        "BACKENDAI_CLUSTER_REPLICAS": f"main:1,sub:{nodes - 1}",
        "BACKENDAI_SESSION_ID": "3f2a9c1e-bench-session",
        "GPU_COUNT": "0",
    }


def slurm_env(nodes: int, tasks_per_node: int = 8) -> tuple[dict[str, str], dict[str, str]]:
    """The ``SLURM_*`` variables of a task in the middle of an ``srun`` step, and what it
    must derive.

    The step (and the job) is ``n[0001-<nodes>]`` with ``tasks_per_node`` tasks on every
    node (``--ntasks-per-node``, block distribution); the task is local rank 3 on node
    index ``nodes // 2``. Every other variable is the recorded task's (:data:`RECORDED_TASK`,
    a real ``srun`` of Slurm 22.05), so the source reads what a real task holds.
    """
    try:
        lines = RECORDED_TASK.read_text().splitlines()
    except OSError as exc:
        raise BenchmarkError(f"cannot read the recorded srun task {RECORDED_TASK}: {exc}") from None
    env = dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))
    node, local = nodes // 2, 3
    rank, world = node * tasks_per_node + local, nodes * tasks_per_node
    host, hosts = f"n{node + 1:04d}", f"n[0001-{nodes:04d}]"
    per_node = f"{tasks_per_node}(x{nodes})"
    env.update({
        "SLURMD_NODENAME": host, "SLURM_TOPOLOGY_ADDR": host,
        "SLURM_CPUS_ON_NODE": str(tasks_per_node),
        "SLURM_JOB_CPUS_PER_NODE": per_node, "SLURM_TASKS_PER_NODE": per_node,
        "SLURM_STEP_TASKS_PER_NODE": per_node, "SLURM_NTASKS_PER_NODE": str(tasks_per_node),
        "SLURM_GTIDS": ",".join(str(node * tasks_per_node + i) for i in range(tasks_per_node)),
        "SLURM_JOB_NODELIST": hosts, "SLURM_NODELIST": hosts, "SLURM_STEP_NODELIST": hosts,
        "SLURM_JOB_NUM_NODES": str(nodes), "SLURM_NNODES": str(nodes),
        "SLURM_STEP_NUM_NODES": str(nodes), "SLURM_NODEID": str(node),
        "SLURM_NTASKS": str(world), "SLURM_NPROCS": str(world),
        "SLURM_STEP_NUM_TASKS": str(world), "SLURM_PROCID": str(rank),
        "SLURM_LOCALID": str(local),
    })
    expected = {"MASTER_ADDR": "n0001", "NODE_RANK": str(node), "RANK": str(rank),
                "LOCAL_RANK": str(local), "WORLD_SIZE": str(world),
                "LOCAL_WORLD_SIZE": str(tasks_per_node), "JAX_NUM_PROCESSES": str(world),
                "JAX_PROCESS_ID": str(rank)}
    return env, expected


def write_labels(directory: Path) -> tuple[Path, Path, Path]:
    """Write an opted-in, a not-opted-in and a per-process (``pytorch,jax``, for the Slurm
    cases) labels file; returns their paths."""
    other = {
        "org.opencontainers.image.title": "training-image",
        "org.opencontainers.image.version": "1.0",
        "maintainer": "ml-platform@example.org",
    }
    opted = directory / "labels-opted-in.json"
    opted.write_text(json.dumps({**other, PREFIX + "frameworks": "pytorch,tensorflow"}))
    plain = directory / "labels-not-opted-in.json"
    plain.write_text(json.dumps(other))
    tasks = directory / "labels-pytorch-jax.json"
    tasks.write_text(json.dumps({**other, PREFIX + "frameworks": "pytorch,jax"}))
    return opted, plain, tasks


def find_console_script() -> Path:
    """The ``derive-env`` console script installed next to this interpreter."""
    script = Path(sys.executable).parent / "derive-env"
    if not (script.is_file() and os.access(script, os.X_OK)):
        raise BenchmarkError(
            f"no executable derive-env next to {sys.executable} ({script}); run this with the "
            "python of the environment where derive-env is installed"
        )
    return script


def build_cases(
    script: Path, labels: tuple[Path, Path, Path], entries: Sequence[str],
    paths: Sequence[str]
) -> list[Case]:
    """The floors and, for each path and entry form, the five shim cases."""
    python = sys.executable
    base = {"PATH": CLEAN_PATH, "LANG": "C.UTF-8"}
    opted_file, plain_file, tasks_file = labels
    slurm = {key: slurm_env(nodes) for key, nodes in ((SLURM_4, 4), (SLURM_4096, 4096))}
    inputs = {
        OPTED_4: {**base, "DERIVE_ENV_LABELS_FILE": str(opted_file),
                  **backendai_env(4, own_sub=2, seed=4)},
        PLAIN: {**base, "DERIVE_ENV_LABELS_FILE": str(plain_file)},
        OPTED_4096: {**base, "DERIVE_ENV_LABELS_FILE": str(opted_file),
                     **backendai_env(4096, own_sub=2048, seed=4096)},
        **{key: {**base, "DERIVE_ENV_LABELS_FILE": str(tasks_file), **env}
           for key, (env, _) in slurm.items()},
    }
    cases = [
        Case(BARE, "python -I -c pass", [python, "-I", "-c", "pass"], dict(base)),
        Case(PYDANTIC, "python -I -c 'from pydantic import BaseModel'",
             [python, "-I", "-c", "from pydantic import BaseModel"], dict(base)),
        Case(ONE_MODEL, "python -I -c 'from pydantic ...; class M(BaseModel) ...; M(x=1)'",
             [python, "-I", "-c", ONE_MODEL_CODE], dict(base)),
    ]
    for path in paths:
        for entry in entries:
            prefix = [str(script)] if entry == "script" else [python, "-I", "-m", "derive_env"]
            shown = "derive-env" if entry == "script" else "python -I -m derive_env"
            args = PATH_ARGS[path]
            for key, env in inputs.items():
                cases.append(Case(key, f"{shown} {' '.join(args)}  [{key}]",
                                  [*prefix, *args], env, entry, path,
                                  slurm[key][1] if key in slurm else {}))
    return cases


# -- running ---------------------------------------------------------------------------------


def spawn(argv: Sequence[str], env: dict[str, str]) -> tuple[float, float, int]:
    """Run ``argv`` once with stdio on /dev/null; returns (wall s, child CPU s, exit status)."""
    devnull = os.open(os.devnull, os.O_RDWR)
    try:
        actions = [(os.POSIX_SPAWN_DUP2, devnull, fd) for fd in (0, 1, 2)]
        start = time.perf_counter()
        pid = os.posix_spawn(argv[0], list(argv), env, file_actions=actions)
        _, status, usage = os.wait4(pid, 0)
        wall = time.perf_counter() - start
    finally:
        os.close(devnull)
    return wall, usage.ru_utime + usage.ru_stime, os.waitstatus_to_exitcode(status)


def capture(
    argv: Sequence[str], env: dict[str, str], stderr: bool = False, stdin: str | None = None
) -> tuple[int, str]:
    """Run ``argv`` once (``stdin`` as its input, else /dev/null); returns (exit status,
    stdout or stderr text)."""
    proc = subprocess.run(list(argv), env=env, input=stdin, capture_output=True, text=True,
                          check=False, stdin=None if stdin is not None else subprocess.DEVNULL)
    return proc.returncode, proc.stderr if stderr else proc.stdout


DUMP = [sys.executable, "-I", "-c", "import json, os; print(json.dumps(dict(os.environ)))"]
#: Source the hook's output as Backend.AI's entrypoint (#!/bin/sh) would, then dump.
EVAL_IN_SH = 'eval "$(cat)" && exec "$@"'


def environment_after(case: Case) -> tuple[dict[str, str], dict[str, str]]:
    """The command's environment after the shim, and the one it would have without it.

    ENTRYPOINT path: the shim execs the dump. Hook path: its output is eval'd by ``sh``,
    which then execs the dump; the baseline is the same ``sh`` eval'ing nothing (``sh``
    adds ``PWD`` and the like of its own).
    """
    if case.path == ENTRYPOINT:
        status, out = capture([*case.argv[: case.argv.index("--") + 1], *DUMP], case.env)
        if status != 0:
            raise BenchmarkError(f"{case.label}: exit {status}, expected 0 (run it by hand)")
        return json.loads(out), case.env
    status, exports = capture(case.argv, case.env)
    if status != 0:
        raise BenchmarkError(f"{case.label}: exit {status}, expected 0 (run it by hand)")
    if case.key == PLAIN and exports:
        raise BenchmarkError(f"{case.label}: printed {exports[:200]!r}, expected nothing")
    shell = ["sh", "-c", EVAL_IN_SH, "sh", *DUMP]
    status, out = capture(shell, case.env, stdin=exports)
    status_base, base = capture(shell, case.env, stdin="")
    if status != 0 or status_base != 0:
        raise BenchmarkError(f"{case.label}: sh could not eval the output (exit {status})")
    return json.loads(out), json.loads(base)


def validate(case: Case) -> None:
    """Run a shim case once as its path runs, and check the environment its command gets."""
    got, before = environment_after(case)
    added = {k: v for k, v in got.items() if before.get(k) != v}
    if case.key == PLAIN:
        if added or got.keys() != before.keys():
            raise BenchmarkError(f"{case.label}: environment changed: {sorted(added)}")
        return
    if case.expected:  # a Slurm task: the process layer, and no per-node torchrun defaults
        wrong = {k: added.get(k) for k, v in case.expected.items() if added.get(k) != v}
        pet = sorted(k for k in added if k.startswith("PET_"))
        if wrong or pet or "TF_CONFIG" in added:
            raise BenchmarkError(f"{case.label}: did not derive the expected variables: "
                                 f"{wrong or pet or 'TF_CONFIG set'}")
        return
    nodes = int(case.env["BACKENDAI_CLUSTER_SIZE"])
    rank = case.env["BACKENDAI_CLUSTER_LOCAL_RANK"]
    expected = {"MASTER_ADDR": "main1", "NODE_RANK": rank, "PET_NNODES": str(nodes)}
    wrong = {k: added.get(k) for k, v in expected.items() if added.get(k) != v}
    tf_config = json.loads(added.get("TF_CONFIG", "null") or "null")
    workers = (tf_config or {}).get("cluster", {}).get("worker", [])
    if wrong or len(workers) != nodes or workers[:1] != ["main1:2222"]:
        raise BenchmarkError(f"{case.label}: did not derive the expected variables: "
                             f"{wrong or 'TF_CONFIG ' + str(tf_config)[:200]}")


def run_rounds(cases: list[Case], rounds: int, warmup: int) -> None:
    """Time every case once per round, round-robin, rotating the starting case."""
    for number in range(warmup + rounds):
        shift = number % len(cases)
        for case in cases[shift:] + cases[:shift]:
            wall, cpu, status = spawn(case.argv, case.env)
            if status != 0:
                raise BenchmarkError(f"{case.label}: exit {status} in round {number}")
            if number >= warmup:
                case.wall.append(wall)
                case.cpu.append(cpu)


# -- import check ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Import:
    """One line of ``-X importtime`` output (microseconds)."""

    name: str
    self_us: int
    cumulative_us: int
    depth: int


def parse_importtime(text: str) -> list[Import]:
    """Parse ``-X importtime`` stderr: ``import time: self | cumulative | <indent>name``."""
    result = []
    for line in text.splitlines():
        if not line.startswith("import time:"):
            continue
        parts = line[len("import time:"):].split("|")
        if len(parts) != 3 or not parts[0].strip().isdigit():
            continue  # the header line
        name = parts[2].rstrip()
        depth = (len(name) - len(name.lstrip()) - 1) // 2
        result.append(Import(name.strip(), int(parts[0]), int(parts[1]), depth))
    return result


def package_of(module: str) -> str:
    return module.split(".", 1)[0]


def importtime_runs(argv: Sequence[str], env: dict[str, str], runs: int) -> list[list[Import]]:
    """``-X importtime`` output of ``runs`` runs (the first one, to warm caches, dropped)."""
    results = []
    for _ in range(runs + 1):
        status, err = capture(argv, env, stderr=True)
        if status != 0:
            raise BenchmarkError(f"{' '.join(argv[:4])}...: exit {status}: {err[-500:]}")
        results.append(parse_importtime(err))
    return results[1:]


def median_by_name(runs: list[list[Import]]) -> dict[str, Import]:
    """Per module: median self and cumulative time over runs, depth of the first run."""
    names: dict[str, list[Import]] = {}
    for run in runs:
        for item in run:
            names.setdefault(item.name, []).append(item)
    return {
        name: Import(name, int(statistics.median(i.self_us for i in items)),
                     int(statistics.median(i.cumulative_us for i in items)), items[0].depth)
        for name, items in names.items()
    }


def import_check(cases: list[Case], runs: int, top: int, path: str) -> dict:
    """Which modules ``path`` imports beyond the bare interpreter, and the heaviest ones."""
    by_key = {c.key: c for c in cases if c.entry == "script" and c.path == path}
    bare = {i.name for run in importtime_runs(
        [sys.executable, "-X", "importtime", "-c", "pass"], by_key[PLAIN].env, 1) for i in run}
    floor = median_by_name(importtime_runs(
        [sys.executable, "-I", "-X", "importtime", "-c", "from pydantic import BaseModel"],
        by_key[PLAIN].env, runs))
    report: dict = {"runs": runs}
    for key in (PLAIN, OPTED_4):
        case = by_key[key]
        argv = [sys.executable, "-X", "importtime", *case.argv]
        modules = median_by_name(importtime_runs(argv, case.env, runs))
        extra = {n: m for n, m in modules.items() if n not in bare}
        by_package: dict[str, int] = {}
        for m in extra.values():
            by_package[package_of(m.name)] = by_package.get(package_of(m.name), 0) + m.self_us
        heaviest = sorted(extra.values(), key=lambda m: -m.cumulative_us)[:top]
        entry = {
            "modules_beyond_interpreter": len(extra),
            "self_us_beyond_interpreter": sum(m.self_us for m in extra.values()),
            "top_cumulative": [
                {"module": m.name, "cumulative_us": m.cumulative_us, "self_us": m.self_us,
                 "depth": m.depth} for m in heaviest
            ],
            "self_us_by_package": dict(sorted(by_package.items(), key=lambda kv: -kv[1])[:top]),
        }
        if key == PLAIN:
            forbidden = sorted(n for n in modules if package_of(n) in FORBIDDEN_ON_PLAIN_PATH)
            entry["forbidden_imported"] = forbidden
            entry["passed"] = not forbidden
            entry["modules"] = sorted(extra)
        else:
            beyond_floor = {n: m for n, m in extra.items() if n not in floor}
            entry["modules_beyond_pydantic_floor"] = len(beyond_floor)
            entry["self_us_beyond_pydantic_floor"] = sum(m.self_us for m in beyond_floor.values())
            entry["top_self_beyond_pydantic_floor"] = [
                {"module": m.name, "self_us": m.self_us, "cumulative_us": m.cumulative_us}
                for m in sorted(beyond_floor.values(), key=lambda m: -m.self_us)[:top]
            ]
        report[key] = entry
    return report


# -- instruction counts ----------------------------------------------------------------------


def count_instructions(case: Case) -> int:
    """Instructions the case executes (valgrind's callgrind, ``PYTHONHASHSEED=0``).

    The ENTRYPOINT path runs a command that is not found instead of ``/bin/true``, so that
    what is counted is derive-env's work up to the exec, not ``/bin/true``'s.
    """
    argv = list(case.argv)
    if case.path == ENTRYPOINT:
        argv[-1] = "/nonexistent/derive-env-benchmark"
    env = {**case.env, "PYTHONHASHSEED": "0"}
    proc = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
                           *argv], env=env, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, check=False)
    found = re.search(r"Collected : (\d+)", proc.stderr)
    if found is None:
        raise BenchmarkError(f"{case.label}: valgrind failed: {proc.stderr[-300:]}")
    return int(found.group(1))


# -- results ---------------------------------------------------------------------------------


def summary(case: Case) -> dict:
    def quantile(values: list[float], q: float) -> float:
        ordered = sorted(values)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    return {
        "case": case.key, "path": case.path or "floor", "entry": case.entry or "floor",
        "command": case.label,
        "median_wall_ms": round(statistics.median(case.wall) * 1000, 2),
        "p10_wall_ms": round(quantile(case.wall, 0.1) * 1000, 2),
        "p90_wall_ms": round(quantile(case.wall, 0.9) * 1000, 2),
        "median_cpu_ms": round(statistics.median(case.cpu) * 1000, 2),
        "instructions": case.instructions,
    }


def ratios(cases: list[Case], entry: str, path: str) -> list[dict]:
    """Every ratio of :data:`RATIOS` for one entry form of one path."""
    floors = {c.key: c for c in cases if not c.entry}
    shim = {c.key: c for c in cases if c.entry == entry and c.path == path}
    everything = {**floors, **shim}
    result = []
    for name, num_key, den_key, targets in RATIOS:
        num, den = everything[num_key], everything[den_key]
        target = targets.get(path)
        wall = statistics.median(num.wall) / statistics.median(den.wall)
        paired = [a / b for a, b in zip(num.wall, den.wall, strict=True)]
        cpu = statistics.median(num.cpu) / statistics.median(den.cpu)
        quartiles = statistics.quantiles(paired, n=4) if len(paired) > 1 else [paired[0]] * 3
        instructions = (round(num.instructions / den.instructions, 3)
                        if num.instructions and den.instructions else None)
        result.append({
            "path": path, "entry": entry, "ratio": name, "target": target,
            "wall": round(wall, 3), "paired_median": round(statistics.median(paired), 3),
            "paired_iqr": [round(quartiles[0], 3), round(quartiles[2], 3)],
            "cpu": round(cpu, 3), "instructions": instructions,
            "passed": None if target is None else wall <= target,
        })
    return result


def machine() -> dict:
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {
        "python": sys.version.split()[0], "executable": sys.executable,
        "implementation": platform.python_implementation(), "platform": platform.platform(),
        "cpus": os.cpu_count(), "loadavg": [round(x, 2) for x in load] if load else None,
        "processor": platform.processor() or platform.machine(),
    }


def print_imports(path: str, imports: dict) -> None:
    plain, opted = imports[PLAIN], imports[OPTED_4]
    print()
    print(f"imports of the {path} path (-X importtime, median of {imports['runs']} runs, "
          "beyond `python -c pass`):")
    verdict = "pass" if plain["passed"] else "MISS: " + ", ".join(plain["forbidden_imported"])
    print(f"  not-opted-in: {plain['modules_beyond_interpreter']} modules, "
          f"{plain['self_us_beyond_interpreter'] / 1000:.1f} ms self; "
          f"no pydantic/click: {verdict}")
    print("    " + ", ".join(plain["modules"]))
    print(f"  opted-in/4: {opted['modules_beyond_interpreter']} modules, "
          f"{opted['self_us_beyond_interpreter'] / 1000:.1f} ms self; "
          f"{opted['modules_beyond_pydantic_floor']} modules "
          f"({opted['self_us_beyond_pydantic_floor'] / 1000:.1f} ms self) beyond the pydantic "
          "floor's")
    print("    top by cumulative time:")
    for item in opted["top_cumulative"]:
        print(f"      {'  ' * item['depth']}{item['module']:<{44 - 2 * item['depth']}} "
              f"{item['cumulative_us'] / 1000:>7.1f} ms cum {item['self_us'] / 1000:>6.1f} ms self")
    print("    self time by top-level package:")
    for name, us in opted["self_us_by_package"].items():
        print(f"      {name:<44} {us / 1000:>7.1f} ms")
    print("    heaviest (self) not imported by the pydantic floor:")
    for item in opted["top_self_beyond_pydantic_floor"]:
        print(f"      {item['module']:<44} {item['self_us'] / 1000:>7.1f} ms")


def print_report(result: dict) -> None:
    m = result["machine"]
    print(f"derive-env startup: {m['implementation']} {m['python']} ({m['executable']}), "
          f"{m['cpus']} CPUs, load {m['loadavg']}, {result['rounds']} rounds "
          f"(+{result['warmup']} warm-up), round-robin")
    print()
    print(f"{'case':<72} {'median':>9} {'p10':>9} {'p90':>9} {'cpu':>9} {'instr':>7}")
    for row in result["cases"]:
        instr = f"{row['instructions'] / 1e6:.0f}M" if row["instructions"] else "-"
        print(f"{row['command']:<72} {row['median_wall_ms']:>7.1f}ms {row['p10_wall_ms']:>7.1f}ms"
              f" {row['p90_wall_ms']:>7.1f}ms {row['median_cpu_ms']:>7.1f}ms {instr:>7}")
    print()
    print(f"{'ratio (median wall / median wall)':<34} {'path':<10} {'entry':<7} {'value':>6} "
          f"{'target':>7}  {'paired (IQR)':<18} {'cpu':>5} {'instr':>6}  result")
    for r in result["ratios"]:
        if r["passed"] is None:
            verdict, target = "(info)", "-"
        else:
            verdict = ("pass" if r["passed"] else "MISS") + (
                "" if r["entry"] == "script" else " (info)")
            target = f"<= {r['target']}"
        iqr = f"{r['paired_median']:.2f} ({r['paired_iqr'][0]:.2f}-{r['paired_iqr'][1]:.2f})"
        instr = f"{r['instructions']:.2f}" if r["instructions"] else "-"
        print(f"{r['ratio']:<34} {r['path']:<10} {r['entry']:<7} {r['wall']:>6.2f} {target:>7}"
              f"  {iqr:<18} {r['cpu']:>5.2f} {instr:>6}  {verdict}")
    for path, imports in (result.get("imports") or {}).items():
        print_imports(path, imports)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=30, help="timed rounds (default 30)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed rounds first (default 3)")
    parser.add_argument("--path", choices=(*PATHS, "both"), default="both",
                        help="the ENTRYPOINT path, the hook path, or both (default)")
    parser.add_argument("--entry", choices=(*ENTRIES, "both"), default="both",
                        help="console script, python -I -m derive_env, or both (default)")
    parser.add_argument("--importtime-runs", type=int, default=5,
                        help="-X importtime runs per path, medians taken (default 5; 0: skip)")
    parser.add_argument("--instructions", action="store_true",
                        help="also count instructions (valgrind --tool=callgrind, one run "
                             "per case: slow)")
    parser.add_argument("--top", type=int, default=12, help="modules listed (default 12)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when a console-script target or the import check is missed")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.warmup < 0 or args.importtime_runs < 0:
        parser.error("--rounds must be >= 1, --warmup and --importtime-runs >= 0")
    entries = ENTRIES if args.entry == "both" else (args.entry,)
    paths = PATHS if args.path == "both" else (args.path,)
    if args.instructions and shutil.which("valgrind") is None:
        parser.error("--instructions needs valgrind (apt-get install valgrind)")
    try:
        with tempfile.TemporaryDirectory(prefix="derive-env-bench-") as tmp:
            script = find_console_script()
            cases = build_cases(script, write_labels(Path(tmp)), entries, paths)
            for case in cases:
                if case.entry:
                    validate(case)
            imports = {path: import_check(cases, args.importtime_runs, args.top, path)
                       for path in paths} if (args.importtime_runs and "script" in entries) else {}
            if args.instructions:
                for case in cases:
                    if case.entry in ("", "script"):
                        case.instructions = count_instructions(case)
            run_rounds(cases, args.rounds, args.warmup)
    except BenchmarkError as exc:
        print(f"startup.py: error: {exc}", file=sys.stderr)
        return 2
    result = {
        "machine": machine(), "rounds": args.rounds, "warmup": args.warmup,
        "cases": [summary(c) for c in cases],
        "ratios": [r for path in paths for entry in entries for r in ratios(cases, entry, path)],
        "imports": imports,
    }
    checked = [r["passed"] for r in result["ratios"]
               if r["entry"] == "script" and r["passed"] is not None]
    checked += [report[PLAIN]["passed"] for report in imports.values()]
    result["passed"] = all(checked)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_report(result)
        print()
        print("all targets met" if result["passed"] else "target(s) MISSED")
    return 1 if args.check and not result["passed"] else 0


if __name__ == "__main__":
    sys.exit(main())
