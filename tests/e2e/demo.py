"""`make demo`: the main job as Backend.AI starts it, in a 3-container Backend.AI session.

Backend.AI ignores the image's ENTRYPOINT: each container runs Backend.AI's own
entrypoint.sh, which SOURCES the image's hook /opt/container/bootstrap.sh
(docker/bootstrap.sh: ``eval "$(derive-env --dry-run --format shell)"``) and then execs
Backend.AI's kernel runner, which serves dropbear on port 2200 with its environment; only
``main1``'s runner gets the batch command. tests/e2e/bai_containers.py builds exactly that:
3 containers of the example image (docker/pytorch.Dockerfile, built by tests/e2e/engine.py
on the tests' own Docker engine), Backend.AI's entrypoint, kernel runner, su-exec,
libbaihook and dropbear from its wheels, created as Backend.AI's agent creates them, the
batch command sent over the runner's own sockets. The batch command is what
docs/backendai.md tells users:

    on-every-node torchrun /opt/derive-env/examples/allreduce.py

with no torchrun flags: on-every-node (docker/on-every-node.sh) runs it in main1 and over SSH
in the others; torchrun takes everything from the ``PET_*`` variables the hook exported. The
6 ranks (3 containers x 2 processes) do a gloo all-reduce. Two layouts run: the default
session (``main:1,sub:2``, BACKENDAI_CLUSTER_HOSTS ``sub1,main1,sub2``) and a cluster template
listing its workers first (``main:1,worker:2``, LOCAL_RANK worker1=0, worker2=1, main1=2).
For each container the demo prints what the hook exported, its node rank and its master;
exit status 0 only when all ranks of both sessions agree. Needs root, Debian's docker.io and
mmdebstrap (`make engine`), and network access to PyPI the first time (the image build and
Backend.AI's wheels, cached afterwards).

:func:`run_torch_session` is the ENTRYPOINT path (``derive-env -- torchrun`` as every
container's command: Docker, Compose, Kubernetes) in network namespaces, used by
tests/e2e/test_e2e_torch.py.
"""

from __future__ import annotations

import json
import random
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import bai_session
from bai_containers import TORCH_BATCH, ContainerSession
from bai_runtime import RuntimeMissing, unpacked
from engine import Engine, engine_missing, example_image
from simcluster import (
    HostResult,
    SimulatedCluster,
    backendai_env,
    canonical_order,
    scrambled_order,
)

HOSTS = ["main1", "sub1", "sub2"]
NPROC_PER_NODE = 2
SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "training" / "torch_allreduce.py"
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


def run_backendai_demo(engine: Engine, image: str, layout: bai_session.Layout
                       ) -> tuple[str, bool]:
    """One layout's torch session on Backend.AI's own runtime: (summary for a person, ok)."""
    port = random.randrange(20000, 60000)
    with ContainerSession(engine, image, layout, TORCH_BATCH,
                          bai_session.torch_labels(port, NPROC_PER_NODE),
                          user_env=bai_session.TORCH_USER_ENV) as session:
        result = session.run(timeout=TORCH_TIMEOUT_S)
    problems = bai_session.torch_problems(result, port, NPROC_PER_NODE)
    return bai_session.torch_summary(result, port, problems), not problems


def main() -> int:
    """Run the demo; 0 when all ranks agree in both layouts, 1 when not, 2 when it cannot
    run here."""
    reason = engine_missing()
    if reason is not None:
        print(f"make demo needs the container engine: {reason}", file=sys.stderr)
        return 2
    try:
        unpacked()
    except RuntimeMissing as exc:
        print(f"make demo needs Backend.AI's runtime wheels: {exc}", file=sys.stderr)
        return 2
    engine = Engine().start_daemon()
    try:
        print("derive-env demo: building the example image (docker/pytorch.Dockerfile; "
              "cached after the first run) ...", flush=True)
        image = example_image(engine, "pytorch")
        all_ok = True
        for layout in bai_session.LAYOUTS:
            print(f"derive-env demo ({layout.name} layout): 3 containers started as "
                  "Backend.AI starts them (its entrypoint.sh sources the hook, its kernel "
                  "runner serves dropbear on 2200); main1's runner runs `on-every-node "
                  "torchrun allreduce.py`, 2 processes each ...", flush=True)
            text, ok = run_backendai_demo(engine, image, layout)
            print(text + "\n", flush=True)
            all_ok = all_ok and ok
    finally:
        engine.stop()
    print("ALL RANKS AGREE in both layouts" if all_ok else "FAILED: see above")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
