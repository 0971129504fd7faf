"""Record the environments torchrun (torch.distributed.run) gives its workers, as fixtures.

Runs each scenario of SCENARIOS with the real ``torchrun`` of this venv's torch: every agent
is started in a UTS and a mount namespace of its own (``unshare -u -m``, hostname ``node-a``,
``node-b``, a hosts file naming them 127.0.1.1 and 127.0.1.2 bind-mounted over /etc/hosts)
so ``uname -n`` and torchrun's own ``socket.getfqdn()`` name the agent's node, all on loopback.
Every worker runs ``env -0`` into a file named after its ``RANK``; the recorder keeps only
the variables the torchrun and Kubeflow sources may read (``kept``) and writes
``tests/fixtures/recorded/<scenario>/rank<RANK>.env`` (the dotenv format of record_envs.py)
and its section of ``tests/fixtures/recorded/README.md``.

Run it as root (``unshare -u`` needs it), from the repository root::

    PYTHONPATH=tests .venv/bin/python tests/e2e/record_torchrun.py                  # every scenario
    PYTHONPATH=tests .venv/bin/python tests/e2e/record_torchrun.py torchrun-static  # some of them

Stable across runs: ranks, sizes, host names, MASTER_ADDR. Varying: the rendezvous port
(random per run), MASTER_PORT under c10d (a free port torchrun picks), the run id of the
static scenario (``none``: fixed) and the error-file paths (torchrun's temporary folder).
Under c10d GROUP_RANK is NOT arrival order in torch 2.13: the rendezvous sorts its
participants by (host name, pid, local id) and numbers them in that order
(torch/distributed/elastic/rendezvous/dynamic_rendezvous.py, _mark_rendezvous_complete;
_NodeDesc is socket.getfqdn() or --local-addr), so it is stable across runs;
``torchrun-c10d-sorted`` shows it with hosts ``node-9`` and ``node-10``.

Importable: ``SCENARIOS``, ``NODES``, ``kept``, ``stable``, ``record``, ``readme_section``,
``write``, ``main``.
"""

from __future__ import annotations

import dataclasses
import os
import random
import re
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

from record_envs import FIXTURES, write_fixtures

#: The agents' node names (one UTS namespace each), in start order.
NODES = ("node-a", "node-b")
#: Where torchrun's temporary folders are written in recorded values (they differ per run).
TMP_DIR = "/tmp/derive-torchrun-run"

#: Variables torchrun's agent sets for every worker
#: (torch/distributed/elastic/agent/server/local_elastic_agent.py, _start_workers and
#: _set_local_rank_env) and those its process context adds (TORCHELASTIC_ERROR_FILE:
#: torch/distributed/elastic/multiprocessing/api.py), plus what a source may compare.
KEPT_NAMES = frozenset({
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
    "ROLE_RANK", "ROLE_NAME", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
    "OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES", "HOSTNAME", "NODE_RANK",
})
KEPT_PREFIXES = ("TORCHELASTIC_", "TORCH_", "PET_")


@dataclasses.dataclass(frozen=True)
class Scenario:
    """One recorded run: ``agents`` argv lists (one torchrun per node, in ``nodes`` order;
    ``{port}`` is a random free port of the run, ``{cap}`` the worker's capture command);
    ``about`` says what it shows; ``env`` is added to every agent's environment."""

    agents: tuple[tuple[str, ...], ...]
    about: str
    env: tuple[tuple[str, str], ...] = ()
    nodes: tuple[str, ...] = NODES  # the agents' host names, in start order


_CAP = "env -0 >{out}/rank$RANK.env0; uname -n >{out}/rank$RANK.host"
_WORKER = ("--no-python", "sh", "-c", "{cap}")
_STATIC = ("--nnodes=2", "--nproc-per-node=2", "--master-addr=127.0.0.1",
           "--master-port={port}")
_C10D = ("--nnodes=2", "--nproc-per-node=2", "--rdzv-backend=c10d",
         "--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=derive-c10d")

#: Scenario name -> Scenario, in recording order.
SCENARIOS: dict[str, Scenario] = {
    "torchrun-static": Scenario(
        tuple(("torchrun", *_STATIC, f"--node-rank={r}", *_WORKER) for r in (0, 1)),
        "torchrun, static rendezvous (the default): 2 agents (node-a node rank 0, node-b node "
        "rank 1), 2 workers each; MASTER_PORT is --master-port, the agent's store",
    ),
    "torchrun-c10d": Scenario(
        tuple(("torchrun", *_C10D, *_WORKER) for _ in NODES),
        "torchrun, c10d rendezvous on node-a's endpoint: 2 agents, 2 workers each; "
        "GROUP_RANK is the sorted order of the agents' host names; MASTER_ADDR/MASTER_PORT "
        "are the store of group rank 0",
    ),
    "torchrun-c10d-sorted": Scenario(
        tuple(("torchrun", *_C10D, *_WORKER) for _ in NODES),
        "as torchrun-c10d with hosts node-9 (started first, the rendezvous endpoint's) and "
        "node-10: node-10 sorts first, so it is GROUP_RANK 0 and MASTER_ADDR, not the "
        "endpoint's host (pytorch#137402)",
        nodes=("node-9", "node-10"),
    ),
    "torchrun-standalone": Scenario(
        (("torchrun", "--standalone", "--nproc-per-node=2", *_WORKER),),
        "torchrun --standalone (one node, c10d on a free local port): 2 workers",
    ),
    "torchrun-virtual": Scenario(
        tuple(("torchrun", *_STATIC, f"--node-rank={r}", "--virtual-local-rank", *_WORKER)
              for r in (0, 1)),
        "as torchrun-static with --virtual-local-rank: every worker has LOCAL_RANK=0 and "
        "CUDA_VISIBLE_DEVICES naming its own device (local_elastic_agent.py, "
        "_set_local_rank_env)",
    ),
    "torchrun-identical": Scenario(
        tuple(("torchrun", *_STATIC, f"--node-rank={r}", *_WORKER) for r in (0, 1)),
        "as torchrun-static with TORCH_ELASTIC_WORKER_IDENTICAL=1 (ranks computed as "
        "GROUP_RANK * LOCAL_WORLD_SIZE + LOCAL_RANK without the store; agent/server/api.py)",
        env=(("TORCH_ELASTIC_WORKER_IDENTICAL", "1"),),
    ),
}


#: Names whose values change per run: the ports, torchrun's temporary files (error file), and
#: the run id of --standalone (a fresh uuid).
VARYING = re.compile(r"^MASTER_PORT$|^TORCHELASTIC_ERROR_FILE$")


def stable(name: str, env: Mapping[str, str]) -> dict[str, str]:
    """``env`` of scenario ``name`` without the values that differ from run to run: what two
    recordings must agree on exactly."""
    return {k: v for k, v in env.items() if not VARYING.search(k)
            and not (name == "torchrun-standalone" and k == "TORCHELASTIC_RUN_ID")}


def kept(env: Mapping[str, str]) -> dict[str, str]:
    """The variables of ``env`` the torchrun and Kubeflow sources may read, sorted."""
    return {k: env[k] for k in sorted(env) if k in KEPT_NAMES or k.startswith(KEPT_PREFIXES)}


def _torchrun() -> str:
    """torchrun next to this interpreter (the venv's torch)."""
    exe = Path(sys.executable).parent / "torchrun"
    if not exe.exists():
        raise SystemExit(f"no torchrun next to {sys.executable}")
    return str(exe)


def record(name: str, timeout: float = 120.0) -> dict[str, tuple[str, dict[str, str]]]:
    """Run scenario ``name``; return task name (``rank<RANK>``) -> (the node it ran on, the
    kept variables). Raises RuntimeError naming the scenario and the agents' output when an
    agent fails or times out, or no worker wrote its environment."""
    sc = SCENARIOS[name]
    port = random.randint(20000, 29999)
    with tempfile.TemporaryDirectory(prefix="derive-torchrun-") as tmp:
        out = Path(tmp) / "out"
        out.mkdir()
        cap = _CAP.replace("{out}", str(out))
        hosts = Path(tmp) / "hosts"
        hosts.write_text("127.0.0.1 localhost\n" + "".join(
            f"127.0.1.{i} {node}\n" for i, node in enumerate(sc.nodes, 1)))
        base = {"PATH": os.environ["PATH"], "HOME": "/root", "LANG": "C.UTF-8", "TMPDIR": tmp,
                **dict(sc.env)}
        procs = []
        for node, argv in zip(sc.nodes, sc.agents, strict=False):
            args = [a.replace("{port}", str(port)).replace("{cap}", cap) for a in argv]
            args[0] = _torchrun()
            # The node's name must resolve, as on a real node (c10d's agent publishes
            # socket.getfqdn() as MASTER_ADDR and connects to it): a hosts file of our own,
            # bind-mounted in a mount namespace of the agent's, never the machine's.
            shell = (f"mount --bind {hosts} /etc/hosts && hostname {node} && "
                     f"exec {shlex.join(args)}")
            procs.append(subprocess.Popen(
                ["unshare", "-u", "-m", "--propagation", "private", "sh", "-c", shell],
                env=base, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, text=True))
        logs = []
        for p in procs:
            try:
                logs.append(p.communicate(timeout=timeout)[0])
            except subprocess.TimeoutExpired:
                for q in procs:
                    q.kill()
                    q.wait()
                raise RuntimeError(f"scenario {name}: timed out after {timeout} s\n"
                                   + "\n".join(logs)) from None
        if any(p.returncode for p in procs):
            raise RuntimeError(f"scenario {name}: agents exited {[p.returncode for p in procs]}"
                               + "\n" + "\n".join(logs))
        tasks = {}
        for f in sorted(out.glob("*.env0")):
            raw = f.read_bytes().decode("utf-8", errors="replace")
            env = dict(item.split("=", 1) for item in raw.split("\0") if "=" in item)
            host = f.with_suffix(".host").read_text().strip()
            tasks[f.stem] = (host, {k: v.replace(tmp, TMP_DIR) for k, v in kept(env).items()})
    if not tasks:
        raise RuntimeError(f"scenario {name}: no worker wrote its environment")
    return tasks


def _version() -> str:
    import torch

    return torch.__version__


def readme_section() -> str:
    """The README section of these scenarios (record_envs.write_readme appends it)."""
    rows = []
    for name, sc in SCENARIOS.items():
        cmds = "\n".join(
            " ".join(f"{k}={v}" for k, v in sc.env) + (" " if sc.env else "")
            + "unshare -u -m sh -c 'mount --bind $HOSTS /etc/hosts && "
            + f"hostname {node} && exec ...' "
            + shlex.join(argv).replace("{cap}", _CAP.replace("{out}", "$OUT"))
            .replace("{port}", "$PORT")
            for node, argv in zip(sc.nodes, sc.agents, strict=False))
        rows.append(f"### {name}\n\n{sc.about}.\n\n```\n{cmds}\n```\n")
    return TORCHRUN_README.format(version=_version(), tmp=TMP_DIR, scenarios="\n".join(rows))


TORCHRUN_README = """\
## torchrun scenarios (tests/e2e/record_torchrun.py)

Written by `tests/e2e/record_torchrun.py` (re-record with
`PYTHONPATH=tests .venv/bin/python tests/e2e/record_torchrun.py` as root). Checked by
`tests/sources/test_torchrun.py` and `tests/sources/test_kubeflow.py`. torch {version}'s
`torchrun`, every agent on loopback in a UTS and mount namespace of its own (`unshare -u -m`,
hostname `node-a` or `node-b` (or as named), `$HOSTS` naming them 127.0.1.1, 127.0.1.2,
mounted over /etc/hosts;
`uname -n` is the `# ran on` line), started with only PATH, HOME, LANG
and TMPDIR; one `rank<RANK>.env` per worker; only the variables torchrun sets for a worker
(`RANK`, `LOCAL_RANK`, `WORLD_SIZE`, `LOCAL_WORLD_SIZE`, `GROUP_*`, `ROLE_*`, `MASTER_*`,
`TORCHELASTIC_*`, `TORCH_*`, `PET_*`, `OMP_NUM_THREADS`, `CUDA_VISIBLE_DEVICES`) and
`HOSTNAME`, `NODE_RANK`. torchrun's temporary folder is written as `{tmp}`; `$PORT` is
random per run.

What the recordings show (pinned by tests/sources/test_torchrun.py):

- static: `MASTER_ADDR`/`MASTER_PORT` are `--master-addr`/`--master-port` (the agent's
  store, `TORCHELASTIC_USE_AGENT_STORE=True`), `TORCHELASTIC_RUN_ID=none`, `GROUP_RANK` is
  `--node-rank`.
- c10d: `MASTER_ADDR` is group rank 0's host name (`socket.getfqdn()`), not the rendezvous
  endpoint, and `MASTER_PORT` a port torchrun picked; `TORCHELASTIC_RUN_ID` is `--rdzv-id`.
  `GROUP_RANK` is the agents' host names sorted as strings (then pid), not arrival order
  (dynamic_rendezvous.py, `_mark_rendezvous_complete`): `node-10` is group rank 0 before
  `node-9`, the endpoint's host.
- `--virtual-local-rank`: `LOCAL_RANK=0` on every worker, `CUDA_VISIBLE_DEVICES` its own
  device (0 or 1) instead.
- `OMP_NUM_THREADS=1` is set by torchrun itself when a node runs more than one worker
  (torch/distributed/run.py), and no `PET_*` reaches a worker unless the agent had it.

{scenarios}"""


def write(results: Mapping[str, Mapping[str, tuple[str, dict[str, str]]]]) -> None:
    """Replace tests/fixtures/recorded/<scenario>/ for every recorded scenario, and this
    section of the README (everything from its heading on)."""
    write_fixtures(results)
    readme = FIXTURES / "README.md"
    text = readme.read_text() if readme.exists() else ""
    head = re.split(r"^## torchrun scenarios", text, maxsplit=1, flags=re.M)[0].rstrip("\n")
    readme.write_text(head + "\n\n" + readme_section())


def main(argv: list[str]) -> int:
    """Record the scenarios named in ``argv`` (default: all); 0 when all worked, 1 when some
    failed, 2 on a bad name."""
    names = argv or list(SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        print(f"unknown scenario(s) {unknown}; known: {list(SCENARIOS)}", file=sys.stderr)
        return 2
    results, failed = {}, 0
    for name in names:
        try:
            results[name] = record(name)
        except RuntimeError as exc:
            print(exc, file=sys.stderr)
            failed += 1
            continue
        print(f"{name}: {len(results[name])} worker(s)", flush=True)
    write(results)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
