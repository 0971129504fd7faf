"""`make demo`: a simulated 3-container Backend.AI session running `derive-env -- torchrun`.

Each container is a process in its own network namespace (tests/e2e/simcluster.py): its own
``eth0`` on 198.18.0.0/24, ``main1``/``sub1``/``sub2`` resolving through its own
/etc/hosts, its own hostname. Every container gets the ``BACKENDAI_CLUSTER_*`` variables
Backend.AI would give it, with ``BACKENDAI_CLUSTER_HOSTS`` deliberately NOT starting with
``main1``, and the image labels ``frameworks=pytorch``, ``nproc-per-node=2``, a random
``master-port`` and ``socket-ifname=auto``. Then, in every container at once:

    derive-env -- torchrun tests/e2e/torch_allreduce.py

with no torchrun flags: torchrun takes everything from the ``PET_*`` variables derive-env
set. The 6 ranks (3 containers x 2 processes) do a gloo all-reduce. Exit status 0 only when
all 6 agree on the expected sum and each container got the node rank of its canonical
position. Needs root (``ip netns``); every namespace is removed afterwards.

Usable as a library: :func:`run_torch_session` returns a :class:`SessionReport`.
"""

from __future__ import annotations

import json
import random
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from simcluster import (
    HostResult,
    SimulatedCluster,
    backendai_env,
    can_simulate,
    canonical_order,
    scrambled_order,
)

HOSTS = ["main1", "sub1", "sub2"]
NPROC_PER_NODE = 2
SCRIPT = Path(__file__).resolve().parent / "torch_allreduce.py"
#: Seconds for the whole torchrun phase (torch imports ~4 s per process on 2 shared cores).
TORCH_TIMEOUT_S = 240.0
DRY_RUN_TIMEOUT_S = 60.0


@dataclass
class SessionReport:
    """What happened in a simulated session.

    :ivar hosts_order: BACKENDAI_CLUSTER_HOSTS as every container got it.
    :ivar expected_rank: host -> node rank it must get (canonical position).
    :ivar derived: host -> the variables derive-env printed for it (``--dry-run --format json``).
    :ivar workers: the JSON line of every torch worker (6 when all went well).
    :ivar results: host -> the result of its ``derive-env -- torchrun`` process.
    :ivar problems: what did not match; empty when the session is correct.
    """

    hosts_order: list[str]
    expected_rank: dict[str, int]
    port: int
    derived: dict[str, dict[str, str]] = field(default_factory=dict)
    workers: list[dict[str, object]] = field(default_factory=list)
    results: dict[str, HostResult] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when every check passed."""
        return not self.problems


def _labels(port: int) -> dict[str, str]:
    return {
        "ai.backend.distributed.frameworks": "pytorch",
        "ai.backend.distributed.nproc-per-node": str(NPROC_PER_NODE),
        "ai.backend.distributed.master-port": str(port),
        "ai.backend.distributed.socket-ifname": "auto",
    }


def run_torch_session(bin_dir: Path, *, port: int | None = None) -> SessionReport:
    """Run the session with the derive-env and torchrun found in ``bin_dir`` (a venv's bin).

    :param port: the master port (TCP); random in 20000-59999 by default.
    :raises simcluster.SimulationError: the namespaces could not be set up.
    """
    port = port or random.randrange(20000, 60000)
    order = scrambled_order(HOSTS)
    canonical = canonical_order(HOSTS)
    report = SessionReport(
        hosts_order=order, expected_rank={h: canonical.index(h) for h in HOSTS}, port=port
    )
    derive_env = str(bin_dir / "derive-env")
    with tempfile.TemporaryDirectory(prefix="derive-env-demo-") as tmp:
        labels_file = Path(tmp) / "labels.json"
        labels_file.write_text(json.dumps(_labels(port)))
        envs = {
            host: {
                **backendai_env(order, host),
                "DERIVE_ENV_LABELS_FILE": str(labels_file),
                # PATH lookup of `torchrun` happens in the exec'd environment: the venv first.
                "PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin",
                "E2E_PG_TIMEOUT_S": "90",
            }
            for host in HOSTS
        }
        with SimulatedCluster(HOSTS, prefix=f"demo{random.randrange(100000)}") as cluster:
            dry = cluster.run_all(
                {h: ([derive_env, "--dry-run", "--format", "json"], envs[h]) for h in HOSTS},
                timeout=DRY_RUN_TIMEOUT_S,
            )
            for host, result in dry.items():
                if not result.ok:
                    report.problems.append(f"{host}: dry-run failed\n{result.describe()}")
                    continue
                report.derived[host] = json.loads(result.stdout)
            if report.problems:
                return report
            report.results = cluster.run_all(
                {h: ([derive_env, "--", "torchrun", str(SCRIPT)], envs[h]) for h in HOSTS},
                timeout=TORCH_TIMEOUT_S,
            )
    _check(report)
    return report


def _check(report: SessionReport) -> None:
    """Fill ``report.problems`` with every mismatch against the expected session."""
    problems = report.problems
    decoder = json.JSONDecoder()
    for host, result in report.results.items():
        for line in result.stdout.splitlines():
            # Tolerate two workers' lines run together: decode every object on the line.
            position = line.find("{")
            while position != -1:
                worker, end = decoder.raw_decode(line, position)
                report.workers.append({**worker, "container": host})
                position = line.find("{", end)
        if not result.ok:
            problems.append(f"{host}: derive-env -- torchrun failed\n{result.describe()}")
    for host, derived in report.derived.items():
        want = {
            "MASTER_ADDR": "main1",
            "MASTER_PORT": str(report.port),
            "NODE_RANK": str(report.expected_rank[host]),
            "PET_NNODES": str(len(HOSTS)),
            "PET_NPROC_PER_NODE": str(NPROC_PER_NODE),
            "GLOO_SOCKET_IFNAME": "eth0",
        }
        for name, value in want.items():
            if derived.get(name) != value:
                problems.append(f"{host}: {name}={derived.get(name)!r}, expected {value!r}")
    world = len(HOSTS) * NPROC_PER_NODE
    expected_sum = world * (world + 1) / 2
    ranks = sorted(int(w["rank"]) for w in report.workers if w.get("rank") is not None)
    if ranks != list(range(world)):
        problems.append(f"worker ranks {ranks}, expected 0..{world - 1}")
    for worker in report.workers:
        host = str(worker["container"])
        if worker.get("result") != expected_sum:
            problems.append(f"{host} rank {worker.get('rank')}: all-reduce gave "
                            f"{worker.get('result')}, expected {expected_sum}")
        if worker.get("group_rank") != report.expected_rank[host]:
            problems.append(f"{host} rank {worker.get('rank')}: node rank "
                            f"{worker.get('group_rank')}, expected {report.expected_rank[host]}")
        if worker.get("hostname") != host or worker.get("master_addr") != "main1":
            problems.append(f"{host} rank {worker.get('rank')}: hostname "
                            f"{worker.get('hostname')}, master {worker.get('master_addr')}")


def summary(report: SessionReport) -> str:
    """A short table for a person: container, node rank, master, ranks, all-reduce."""
    lines = [
        f"BACKENDAI_CLUSTER_HOSTS={','.join(report.hosts_order)} (deliberately not main1 first)",
        "",
        f"{'container':<10} {'node rank':<10} {'MASTER_ADDR':<12} {'MASTER_PORT':<12} "
        f"{'GLOO_SOCKET_IFNAME':<19} worker ranks",
    ]
    for host in HOSTS:
        derived = report.derived.get(host, {})
        ranks = sorted(int(w["rank"]) for w in report.workers
                       if w["container"] == host and w.get("rank") is not None)
        lines.append(
            f"{host:<10} {derived.get('NODE_RANK', '?'):<10} {derived.get('MASTER_ADDR', '?'):<12} "
            f"{derived.get('MASTER_PORT', '?'):<12} {derived.get('GLOO_SOCKET_IFNAME', '-'):<19} "
            f"{','.join(map(str, ranks)) or '-'}"
        )
    world = len(HOSTS) * NPROC_PER_NODE
    agree = sum(1 for w in report.workers if w.get("result") == world * (world + 1) / 2)
    lines += [
        "",
        f"master: main1 (node rank 0), port {report.port} (random per run, from the "
        "master-port label)",
        f"all-reduce of rank+1 over {world} ranks: {agree}/{world} ranks got the expected "
        f"{world * (world + 1) / 2:g} (1+2+...+{world})",
        "RESULT: OK" if report.ok else "RESULT: FAILED",
    ]
    lines += [f"  - {p}" for p in report.problems]
    return "\n".join(lines)


def main() -> int:
    """Run the demo; 0 when all ranks agree, 1 when not, 2 when it cannot run here."""
    ok, reason = can_simulate()
    if not ok:
        print(f"make demo needs root and working `ip netns` to simulate containers: {reason}",
              file=sys.stderr)
        return 2
    bin_dir = Path(sys.executable).parent
    if not (bin_dir / "torchrun").exists() or not (bin_dir / "derive-env").exists():
        print(f"derive-env and torchrun must be installed next to {sys.executable} "
              "(run `make demo`, which builds .venv)", file=sys.stderr)
        return 2
    print("derive-env demo: a 3-container Backend.AI session, one network namespace per "
          f"container, `derive-env -- torchrun` with {NPROC_PER_NODE} processes each ...",
          flush=True)
    report = run_torch_session(bin_dir)
    print(summary(report))
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
