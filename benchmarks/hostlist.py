"""Cost of Slurm's grammar for a 4096-node step vs a 4-node one (issue 9, item 10).

Each case is a full interpreter start, ``python -I -c CODE``, where CODE loads
``derive_env/sources/managers/slurm_hostlist.py`` by file path (so the package's other
imports do not
hide the grammar's cost: the ratio is the strictest one, against the smallest denominator),
then does what the Slurm source will do per task: expand ``SLURM_STEP_NODELIST`` and
``SLURM_STEP_TASKS_PER_NODE`` and parse ``SLURM_STEP_RESV_PORTS``:

* ``4 nodes``: ``n[1-4]``, ``8(x4)``;
* ``4096 nodes``: ``n[0001-4096]``, ``8(x4096)`` (8 tasks per node: 32768 tasks).

Method: the round-robin timing of benchmarks/startup.py (fresh ``posix_spawn`` per run,
clean environment, stdio on /dev/null, warm-up rounds first), medians and the median of
per-round paired ratios (wall time; the child's CPU time too, less sensitive to a shared
machine's load). Also printed: the in-process time of the expansion alone
(``timeit``, best of 5) for both inputs. Target: 4096 / 4 <= 1.1 (item 10 is about the whole
ENTRYPOINT path; the grammar is the only part whose work grows with the node list).

Usage::

    python benchmarks/hostlist.py [--rounds 30] [--warmup 3] [--json] [--check]

Exit status: 0; with ``--check``, 1 when the target is missed; 2 when a case misbehaves.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from startup import CLEAN_PATH, BenchmarkError, Case, capture, machine, run_rounds

SRC = Path(__file__).resolve().parents[1] / "src"
GRAMMAR = SRC / "derive_env" / "sources" / "slurm_hostlist.py"
TARGET = 1.1
CASES = {"4 nodes": ("n[1-4]", "8(x4)", 4), "4096 nodes": ("n[0001-4096]", "8(x4096)", 4096)}

CHILD = """\
import importlib.util, sys
spec = importlib.util.spec_from_file_location("slurm_hostlist", {path!r})
grammar = importlib.util.module_from_spec(spec)
spec.loader.exec_module(grammar)
hosts = grammar.expand_hostlist({nodelist!r})
tasks = grammar.expand_tasks_per_node({tasks!r})
port = grammar.parse_resv_ports("12000-12003")[0]
print(len(hosts), hosts[-1], len(tasks), sum(tasks), port)
"""


def build_cases() -> list[Case]:
    cases = []
    for label, (nodelist, tasks, _) in CASES.items():
        code = CHILD.format(path=str(GRAMMAR), nodelist=nodelist, tasks=tasks)
        argv = [sys.executable, "-I", "-c", code]
        cases.append(Case(key=label, label=label, argv=argv, env={"PATH": CLEAN_PATH}))
    return cases


def validate(case: Case) -> None:
    """Run once with output captured: the expansion must have really happened."""
    nodes = CASES[case.key][2]
    last = "n4" if nodes == 4 else "n4096"
    expected = f"{nodes} {last} {nodes} {8 * nodes} 12000\n"
    status, out = capture(case.argv, case.env)
    if status != 0 or out != expected:
        raise BenchmarkError(f"{case.label}: exit {status}, output {out!r}, expected {expected!r}")


def in_process() -> dict[str, float]:
    """Microseconds per call of the expansions alone, best of 5."""
    sys.path.insert(0, str(SRC))
    from derive_env.sources.managers.slurm_hostlist import expand_hostlist, expand_tasks_per_node

    result = {}
    for label, (nodelist, tasks, _) in CASES.items():
        timer = timeit.Timer(lambda n=nodelist, t=tasks: (expand_hostlist(n),
                                                          expand_tasks_per_node(t)))
        result[label] = round(min(timer.repeat(5, 200)) / 200 * 1e6, 1)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=30, help="timed rounds (default 30)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed rounds first (default 3)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    parser.add_argument("--check", action="store_true", help="exit 1 when the target is missed")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.warmup < 0:
        parser.error("--rounds must be >= 1 and --warmup >= 0")
    cases = build_cases()
    try:
        for case in cases:
            validate(case)
        run_rounds(cases, args.rounds, args.warmup)
    except BenchmarkError as exc:
        print(f"hostlist.py: error: {exc}", file=sys.stderr)
        return 2
    small, large = cases
    paired = [a / b for a, b in zip(large.wall, small.wall, strict=True)]
    ratio = statistics.median(large.wall) / statistics.median(small.wall)
    cpu = statistics.median(large.cpu) / statistics.median(small.cpu)
    result = {
        "machine": machine(), "rounds": args.rounds, "warmup": args.warmup,
        "median_ms": {c.label: round(statistics.median(c.wall) * 1e3, 2) for c in cases},
        "ratio": round(ratio, 3), "paired_median": round(statistics.median(paired), 3),
        "cpu_ratio": round(cpu, 3),
        "target": TARGET, "passed": ratio <= TARGET, "in_process_us": in_process(),
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for label, ms in result["median_ms"].items():
            print(f"{label:>10}: python -I start + expansion, median {ms} ms; "
                  f"expansion alone {result['in_process_us'][label]} us")
        print(f"4096 nodes / 4 nodes: {result['ratio']} (paired median "
              f"{result['paired_median']}; child CPU time {result['cpu_ratio']}), "
              f"target <= {TARGET}: "
              f"{'met' if result['passed'] else 'MISSED'}")
    return 1 if args.check and not result["passed"] else 0


if __name__ == "__main__":
    sys.exit(main())
