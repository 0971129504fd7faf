"""Cost of a 4096-node host list vs a 4-node one for the list-based sources (issue 17, item 9;
a TPU slice: issue 16, item 7).

Each case is the ENTRYPOINT path, ``derive-env -- /bin/true``, of an image opted in for
``pytorch`` (labels file), on node 2 (4 nodes) or node 2048 (4096 nodes) of a task whose
variables are as the tool sets them (sources/managers/launchtools.py): ``SKYPILOT_NODE_IPS`` /
``DSTACK_NODES_IPS`` a newline list of ``10.x.y.z`` addresses, the rank, the count, GPUs;
Determined's rendezvous file (sources/managers/determined.py) with as many ``container_addrs``, at
the path ``DERIVE_ENV_DETERMINED_RENDEZVOUS`` names; or a TPU slice as GKE's webhook sets it
(sources/managers/tpu.py): ``TPU_WORKER_HOSTNAMES`` a comma list of a JobSet's pod names
``tpu-s-0-<i>.tpu`` (short names: 4096 of GKE's usual ``<jobset>-<job>-0-<i>.<jobset>``
exceed Linux's 128 KiB limit of one environment string, so no slice that large can be set
that way), ``TPU_WORKER_ID``;
- PBS (sources/managers/pbs.py): a ``pbsdsh -u`` TM task (``PBS_NODENUM``, hexadecimal
  ``PBS_TASKNUM``) whose ``PBS_NODEFILE`` lists each host once per slot (8 slots);
- LSF (sources/managers/lsf.py): a jsrun task, one per compute host, with ``LSB_MCPU_HOSTS`` (the
  launch node, then each host with 8 slots) and ``LSB_DJOB_RANKFILE`` (the launch node,
  then each compute host once per slot);
- Grid Engine (sources/managers/gridengine.py): a ``qrsh -inherit -V`` task whose ``PE_HOSTFILE`` (a
  file in the temporary folder) lists the hosts ``<host> 8 all.q@<host> UNDEFINED``.

Method: the round-robin timing of benchmarks/startup.py (fresh ``posix_spawn`` per run,
clean environment, stdio on /dev/null, warm-up rounds first), medians and the median of
per-round paired ratios. Target: 4096 / 4 <= 1.1 for each tool.

Usage::

    python benchmarks/iplists.py [--rounds 30] [--warmup 3] [--json] [--check]

Exit status: 0; with ``--check``, 1 when a target is missed; 2 when a case misbehaves.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from startup import (
    CLEAN_PATH,
    DUMP,
    BenchmarkError,
    Case,
    capture,
    find_console_script,
    machine,
    run_rounds,
)

TARGET = 1.1
SIZES = (4, 4096)
TOOLS = ("skypilot", "dstack", "determined", "gke-tpu", "pbs", "lsf", "gridengine")
SLOTS = 8


def ips(nodes: int) -> list[str]:
    """``nodes`` distinct private addresses, 10.0.0.1 upwards."""
    return [f"10.{i >> 16}.{(i >> 8) & 255}.{i & 255}" for i in range(1, nodes + 1)]


def names(nodes: int) -> list[str]:
    """``nodes`` short host names, as batch schedulers list them."""
    return [f"c{i:05d}" for i in range(1, nodes + 1)]


def scheduler_env(tool: str, nodes: int, folder: Path) -> dict[str, str]:
    """Node ``nodes // 2`` of a PBS or LSF job of ``nodes`` hosts; its file in ``folder``."""
    hosts, rank = names(nodes), nodes // 2
    per_slot = "".join(f"{host}\n" * SLOTS for host in hosts)
    if tool == "pbs":
        path = folder / f"pbs-{nodes}"
        path.write_text(per_slot)
        return {"PBS_JOBID": f"{nodes}.pbs-server", "PBS_NODEFILE": str(path),
                "PBS_ENVIRONMENT": "PBS_BATCH", "PBS_NODENUM": str(rank),
                "PBS_TASKNUM": f"{rank + 1:08X}", "NCPUS": str(SLOTS)}
    path = folder / f"lsf-{nodes}"
    path.write_text("launch1\n" + per_slot)
    return {"LSB_JOBID": str(nodes), "LSB_DJOB_RANKFILE": str(path),
            "LSB_MCPU_HOSTS": " ".join(["launch1 1", *(f"{h} {SLOTS}" for h in hosts)]),
            "JSM_NAMESPACE_RANK": str(rank), "JSM_NAMESPACE_LOCAL_RANK": "0",
            "JSM_NAMESPACE_SIZE": str(nodes), "JSM_NAMESPACE_LOCAL_SIZE": "1"}


def gridengine_env(nodes: int, folder: Path) -> dict[str, str]:
    """A qrsh -inherit -V task on host ``nodes // 2`` of a PE job (exec_job.c: NHOSTS and
    NSLOTS of its own part), its PE_HOSTFILE written in ``folder``."""
    hosts = [f"node{i:05d}" for i in range(nodes)]
    path = folder / f"pe_hostfile.{nodes}"
    path.write_text("".join(f"{h} 8 all.q@{h} UNDEFINED\n" for h in hosts))
    me = hosts[nodes // 2]
    return {"JOB_ID": "17", "PE": "mpi", "PE_HOSTFILE": str(path), "NHOSTS": "1",
            "NSLOTS": "8", "HOSTNAME": me, "SGE_TASK_ID": "undefined",
            "SGE_JOB_SPOOL_DIR": f"/var/spool/sge/{me}/active_jobs/17.1/1.{me}"}


def tpu_host(i: int) -> str:
    """Host ``i`` of slice 0 of JobSet ``tpu``, replicated job ``s`` (GKE's pod names in
    its subdomain)."""
    return f"tpu-s-0-{i}.tpu"


def master(tool: str) -> str:
    """Node 0's host, the MASTER_ADDR every case must derive."""
    if tool in ("pbs", "lsf"):
        return "c00001"
    if tool == "gridengine":
        return "node00000"
    return tpu_host(0) if tool == "gke-tpu" else "10.0.0.1"


def tool_env(tool: str, nodes: int, folder: Path) -> dict[str, str]:
    """Node ``nodes // 2`` of a task of ``nodes`` nodes, as the tool sets it (Determined's
    file written to ``folder``)."""
    listed, rank = "\n".join(ips(nodes)), nodes // 2
    if tool in ("pbs", "lsf"):
        return scheduler_env(tool, nodes, folder)
    if tool == "gridengine":
        return gridengine_env(nodes, folder)
    if tool == "gke-tpu":
        return {"TPU_WORKER_HOSTNAMES": ",".join(tpu_host(i) for i in range(nodes)),
                "TPU_WORKER_ID": str(rank), "HOSTNAME": tpu_host(rank).partition(".")[0],
                "JOB_COMPLETION_INDEX": str(rank), "KUBERNETES_SERVICE_HOST": "10.96.0.1"}
    if tool == "determined":
        path = folder / f"rendezvous-{nodes}.json"
        path.write_text(json.dumps({"container_addrs": ips(nodes), "container_rank": rank,
                                    "container_slot_counts": [8] * nodes}))
        return {"DET_MASTER": "http://det:8080", "DET_ALLOCATION_ID": "bench.1",
                "DET_SLOT_IDS": "[0,1,2,3,4,5,6,7]", "DET_TASK_TYPE": "TRIAL",
                "DET_RESOURCES_TYPE": "k8s-job", "C10D_PORT": "29400",
                "DERIVE_ENV_DETERMINED_RENDEZVOUS": str(path)}
    if tool == "skypilot":
        return {"SKYPILOT_NODE_IPS": listed, "SKYPILOT_NODE_RANK": str(rank),
                "SKYPILOT_NUM_NODES": str(nodes), "SKYPILOT_NUM_GPUS_PER_NODE": "8",
                "SKYPILOT_TASK_ID": "sky-2026-12-02-01-00-00-000000_bench_1"}
    return {"DSTACK_NODES_IPS": listed, "DSTACK_MASTER_NODE_IP": "10.0.0.1",
            "DSTACK_NODE_RANK": str(rank), "DSTACK_NODES_NUM": str(nodes),
            "DSTACK_GPUS_PER_NODE": "8", "DSTACK_GPUS_NUM": str(8 * nodes),
            "DSTACK_RUN_ID": "bench-run"}


def build_cases(script: Path, labels: Path) -> list[Case]:
    base = {"PATH": CLEAN_PATH, "LANG": "C.UTF-8", "DERIVE_ENV_LABELS_FILE": str(labels)}
    return [Case(f"{tool}/{nodes}", f"derive-env -- /bin/true  [{tool}, {nodes} nodes]",
                 [str(script), "--", "/bin/true"],
                 {**base, **tool_env(tool, nodes, labels.parent)}, "script", "entrypoint")
            for tool in TOOLS for nodes in SIZES]


def validate(case: Case) -> None:
    """Run once through a dump: the source must have derived the node layer."""
    tool, nodes = case.key.split("/")[0], int(case.key.split("/")[1])
    status, out = capture([case.argv[0], "--", *DUMP], case.env)
    got = json.loads(out) if status == 0 and out.startswith("{") else {}
    # the dump is a python process: under jsrun (one task per host) it is the process itself,
    # so it gets the process layer (RANK, WORLD_SIZE), not torchrun's node layer
    want = ({"MASTER_ADDR": master(tool), "WORLD_SIZE": str(nodes), "RANK": str(nodes // 2)}
            if tool == "lsf" else
            {"MASTER_ADDR": master(tool), "PET_NNODES": str(nodes), "NODE_RANK": str(nodes // 2)})
    if {k: got.get(k) for k in want} != want:
        raise BenchmarkError(f"{case.label}: exit {status}, expected {want}, got "
                             f"{ {k: got.get(k) for k in want} }")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=30, help="timed rounds (default 30)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed rounds first (default 3)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.warmup < 0:
        parser.error("--rounds must be >= 1 and --warmup >= 0")
    with tempfile.TemporaryDirectory() as tmp:
        labels = Path(tmp) / "labels.json"
        labels.write_text(json.dumps({"ai.backend.distributed.frameworks": "pytorch"}))
        try:
            cases = build_cases(find_console_script(), labels)
            for case in cases:
                validate(case)
            run_rounds(cases, args.rounds, args.warmup)
        except BenchmarkError as exc:
            print(f"iplists.py: error: {exc}", file=sys.stderr)
            return 2
    by_key = {case.key: case for case in cases}
    ratios = {}
    for tool in TOOLS:
        small, large = by_key[f"{tool}/4"], by_key[f"{tool}/4096"]
        paired = [a / b for a, b in zip(large.wall, small.wall, strict=True)]
        ratios[tool] = {
            "median_ms": {"4": round(statistics.median(small.wall) * 1e3, 2),
                          "4096": round(statistics.median(large.wall) * 1e3, 2)},
            "ratio": round(statistics.median(large.wall) / statistics.median(small.wall), 3),
            "paired_median": round(statistics.median(paired), 3),
            "cpu_ratio": round(statistics.median(large.cpu) / statistics.median(small.cpu), 3)}
        ratios[tool]["passed"] = ratios[tool]["ratio"] <= TARGET
    result = {"machine": machine(), "rounds": args.rounds, "warmup": args.warmup,
              "target": TARGET, "tools": ratios}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for tool, r in ratios.items():
            print(f"{tool:>8}: median {r['median_ms']['4']} ms (4 nodes), "
                  f"{r['median_ms']['4096']} ms (4096 nodes); 4096 / 4: {r['ratio']} (paired "
                  f"median {r['paired_median']}; child CPU time {r['cpu_ratio']}), target <= "
                  f"{TARGET}: {'met' if r['passed'] else 'MISSED'}")
    return 1 if args.check and not all(r["passed"] for r in ratios.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
