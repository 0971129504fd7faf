"""Record the environments real managers give their tasks, as fixtures for the sources.

Runs each scenario of SCENARIOS on a real :class:`slurmcluster.SlurmCluster` (Slurm 22.05,
Open MPI 4.1 ``mpirun``, MPICH 4.0 Hydra ``mpiexec``); every task of a scenario runs
``env -0`` into a file named after its rank; the recorder keeps only the variables a source
may read (``kept``) and writes ``tests/fixtures/recorded/<scenario>/<task>.env`` (dotenv:
sorted ``KEY=value`` lines, quoted when needed, read back by :func:`load_env`) plus
``tests/fixtures/recorded/README.md`` (versions, the exact command of every scenario).

Run it as root (it needs network namespaces), from the repository root::

    PYTHONPATH=tests .venv/bin/python tests/e2e/record_envs.py            # every scenario
    PYTHONPATH=tests .venv/bin/python tests/e2e/record_envs.py srun-block # some of them

Stable across runs: job ids (a fresh slurmctld numbers jobs from 1 and the scenarios run in
a fixed order, one after the other), node names, addresses, task layout. The cluster's
temporary folder (in SLURM_CONF, SLURM_HOSTFILE) is replaced by RUN_DIR; ports (srun's,
mpirun's URIs) and pids vary per run and are kept as recorded.

Importable: ``record_all``, ``stable``, ``kept``, ``SCENARIOS``; the fixtures' loaders
(``load_fixture``, ``load_env``, ``dump_env``, ``FIXTURES``) live in tests/support/recorded.py
and are re-exported here.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping

from slurmcluster import NODES, SSH_PORT, SlurmCluster, SlurmError, find_program

# The fixtures' format and loaders (tests/support/recorded.py), re-exported for the
# recorders that import them from here.
from support.recorded import (
    FIXTURES,
    RAN_ON,
    RUN_DIR,
    Recorded,
    dump_env,
    load_env,
    load_fixture,
)

__all__ = [
    "FIXTURES",
    "RAN_ON",
    "RUN_DIR",
    "SCENARIOS",
    "VARYING",
    "Scenario",
    "dump_env",
    "kept",
    "load_env",
    "load_fixture",
    "record_all",
    "stable",
]

#: Prefixes of the variables a source may read (sources.md 3.1-3.4).
KEPT_PREFIXES = (
    "SLURM_", "SLURMD_", "OMPI_", "PMI_", "PMIX_", "PRTE_", "MPI_LOCAL", "MV2_", "PALS_",
    "HYDRA_",
)
#: Single variables kept as well: HOSTNAME (shows whose it is), ENVIRONMENT (=BATCH in a batch
#: script, env.c:1255).
KEPT_NAMES = frozenset({"HOSTNAME", "ENVIRONMENT"})
#: Open MPI's MCA variables that are not about the job (left out: they only repeat our
#: command line's --allow-run-as-root).
_DROPPED = frozenset({"OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"})

def kept(env: Mapping[str, str]) -> dict[str, str]:
    """The variables of ``env`` a source may read (KEPT_PREFIXES, KEPT_NAMES), sorted."""
    return {
        k: env[k]
        for k in sorted(env)
        if (k.startswith(KEPT_PREFIXES) or k in KEPT_NAMES) and k not in _DROPPED
    }


@dataclasses.dataclass(frozen=True)
class Scenario:
    """One recorded run: ``argv`` run on the login node (``{cap}`` in it stands for the
    capture command, ``{out}`` for the scenario's output folder), ``about`` says what it
    shows. ``batch``: argv submits a batch job (sbatch); the recorder waits for it. ``ssh``:
    run over the nodes' sshd, outside Slurm (these come last: they make no job)."""

    argv: tuple[str, ...]
    about: str
    batch: bool = False
    needs: str = ""  # a program the scenario needs besides Slurm (skipped without it)
    ssh: bool = False  # needs the nodes' sshd; ``{ssh}`` in argv is the ssh wrapper


def _cap(name: str) -> str:
    """Shell text that writes this process's ``env -0`` to ``{out}/<name>.env0`` and the
    node it really runs on (``uname -n``: the namespace's own hostname) to
    ``{out}/<name>.host``; ``name`` may use the task's variables (expanded by the task's own
    shell). No double quotes inside, so it nests in the job scripts' single quotes."""
    return f"env -0 >{{out}}/{name}.env0; uname -n >{{out}}/{name}.host"


def _srun(*options: str) -> tuple[str, ...]:
    """argv of an srun step with ``options`` whose every task records itself as
    task<SLURM_PROCID>."""
    return ("srun", *options, "sh", "-c", _cap("task$SLURM_PROCID"))


_OMPI = ("mpirun.openmpi", "--allow-run-as-root")
_OMPI_TASK = "rank$OMPI_COMM_WORLD_RANK"
_MPICH = ("mpiexec.mpich", "-launcher", "slurm")
_HOSTS_2 = ",".join(f"{n}:2" for n in NODES)  # 2 slots per node, for the ssh launches
_ORDER = ",".join([NODES[2], NODES[0], NODES[1], NODES[2]])  # rank 0 on the LAST node

#: Scenario name -> Scenario, in recording order (job ids depend on it).
SCENARIOS: dict[str, Scenario] = {
    "srun-block": Scenario(
        _srun("-N3", "--ntasks-per-node=2"),
        "srun step, block distribution (default), 2 tasks on each of 3 nodes",
    ),
    "srun-cyclic": Scenario(
        _srun("-N3", "--ntasks-per-node=2", "-m", "cyclic"),
        "srun step, cyclic distribution: rank r on node r mod 3",
    ),
    "srun-uneven": Scenario(
        _srun("-N3", "-n5"),
        "srun step, 5 tasks on 3 nodes: block fills the first node's 4 CPUs first (3,1,1)",
    ),
    "srun-arbitrary": Scenario(
        ("env", "SLURM_HOSTFILE={out}/hostfile", *_srun("-m", "arbitrary", "-n4")),
        f"srun -m arbitrary, SLURM_HOSTFILE lines {_ORDER}: rank 0 on the last node",
    ),
    "sbatch-3node": Scenario(
        ("sbatch", "-N3", "--ntasks-per-node=1", "-o", "{out}/slurm-%j.out", "{out}/job.sh"),
        "batch script of a 3-node job (runs once, on the first node), then an srun step "
        "inside it (files step-task<rank>)",
        batch=True,
    ),
    "sbatch-1node": Scenario(
        ("sbatch", "-N1", "-o", "{out}/slurm-%j.out", "{out}/job.sh"),
        "batch script of a 1-node job",
        batch=True,
    ),
    "salloc-shell": Scenario(
        ("salloc", "-N2", "sh", "-c", _cap("shell")),
        "the command salloc runs (on the login node, not in a step) for a 2-node allocation",
    ),
    "srun-pty": Scenario(
        ("script", "-qec", "srun -N1 --pty sh -c " + "'" + _cap("task$SLURM_PROCID") + "'",
         "/dev/null"),
        "interactive srun --pty (one task), under script(1) for a pseudo-terminal",
        needs="script",
    ),
    "srun-pmi2": Scenario(
        _srun("--mpi=pmi2", "-N3", "--ntasks-per-node=2"),
        "srun --mpi=pmi2 step: Slurm's PMI2 variables besides the step's",
    ),
    "ompi-in-salloc": Scenario(
        ("salloc", "-N3", "--ntasks-per-node=2", *_OMPI, "sh", "-c", _cap(_OMPI_TASK)),
        "Open MPI mpirun in salloc's shell (on the login node): mpirun starts orted with one "
        "srun step, one task per node, so SLURM_STEP_* describe that 3-task step, OMPI_* "
        "the 6 ranks",
        needs="mpirun.openmpi",
    ),
    "ompi-in-sbatch": Scenario(
        ("sbatch", "-N3", "--ntasks-per-node=2", "-o", "{out}/slurm-%j.out", "{out}/job.sh"),
        "Open MPI mpirun in a 3-node batch script (on the first node): the ranks there are "
        "mpirun's own children (no step variables), orted runs in a 2-node srun step on the "
        "others",
        batch=True,
        needs="mpirun.openmpi",
    ),
    "mpich-in-salloc": Scenario(
        ("salloc", "-N3", "--ntasks-per-node=2", *_MPICH, "sh", "-c", _cap("rank$PMI_RANK")),
        "MPICH Hydra mpiexec in salloc's shell, its Slurm launcher (one srun step of "
        "hydra_pmi_proxy per node)",
        needs="mpiexec.mpich",
    ),
    "mpich-in-sbatch": Scenario(
        ("sbatch", "-N3", "--ntasks-per-node=2", "-o", "{out}/slurm-%j.out", "{out}/job.sh"),
        "MPICH Hydra mpiexec in a 3-node batch script, its Slurm launcher",
        batch=True,
        needs="mpiexec.mpich",
    ),
    "srun-pmix": Scenario(
        _srun("--mpi=pmix", "-N3", "--ntasks-per-node=2"),
        "srun --mpi=pmix step (Slurm's PMIx v4 plugin; needs libpmix-dev for libpmix.so)",
    ),
    "srun-cray-shasta": Scenario(
        _srun("--mpi=cray_shasta", "-N3", "--ntasks-per-node=2"),
        "srun --mpi=cray_shasta step (Slurm's Cray PALS plugin)",
    ),
    "ompi-ssh": Scenario(
        (*_OMPI, "--mca", "plm_rsh_agent", "{ssh}", "-H", _HOSTS_2, "-np", "6",
         "sh", "-c", _cap(_OMPI_TASK)),
        "Open MPI mpirun on the login node over SSH (sshd on port 2200 on every node), no "
        "Slurm job: ranks know nothing of Slurm",
        needs="mpirun.openmpi",
        ssh=True,
    ),
    "mpich-ssh": Scenario(
        ("mpiexec.mpich", "-launcher", "ssh", "-launcher-exec", "{ssh}", "-hosts", _HOSTS_2,
         "-n", "6", "sh", "-c", _cap("rank$PMI_RANK")),
        "MPICH Hydra mpiexec on the login node over SSH, no Slurm job (Hydra copies "
        "mpiexec's environment, so SLURM_CONF and HOSTNAME=login reach every rank)",
        needs="mpiexec.mpich",
        ssh=True,
    ),
}

_JOB_SCRIPTS = {
    "sbatch-3node": "#!/bin/sh\n" + _cap("batch")
    + "\nsrun sh -c '" + _cap("step-task$SLURM_PROCID") + "'\n",
    "sbatch-1node": "#!/bin/sh\n" + _cap("batch") + "\n",
    "ompi-in-sbatch": "#!/bin/sh\n" + " ".join(_OMPI) + " sh -c '" + _cap(_OMPI_TASK) + "'\n",
    "mpich-in-sbatch": "#!/bin/sh\n" + " ".join(_MPICH) + " sh -c '" + _cap("rank$PMI_RANK")
    + "'\n",
}


def _versions() -> dict[str, str]:
    """Version lines of the managers used (first line of each ``--version``)."""
    out = {}
    for prog in ("slurmctld", "munged", "mpirun.openmpi", "mpiexec.mpich", "sshd"):
        path = find_program(prog)
        if path:  # slurmctld -V needs no slurm.conf (srun -V does)
            cmd = [path, "-V" if prog in ("slurmctld", "sshd") else "--version"]
            try:
                res = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                continue
            text = (res.stdout or res.stderr).strip().splitlines()
            lines = [x for x in text if "Version:" in x] or text[:1]
            out[prog] = " ".join(lines[0].split())
    return out


def record(slurm: SlurmCluster, name: str, timeout: float = 60.0) -> dict[str, Recorded]:
    """Run scenario ``name`` on ``slurm``; return task name -> (the node it ran on, the kept
    variables).

    Raises SlurmError naming the scenario and the output when the run fails, times out, or
    no task wrote its environment."""
    sc = SCENARIOS[name]
    out = slurm.tmp / "shared" / name
    out.mkdir()
    (out / "hostfile").write_text("\n".join(_ORDER.split(",")) + "\n")
    if name in _JOB_SCRIPTS:
        script = out / "job.sh"
        script.write_text(_JOB_SCRIPTS[name].replace("{out}", str(out)))
        script.chmod(0o755)
    ssh = str(slurm.ssh_wrapper or "{ssh}")
    argv = [a.replace("{out}", str(out)).replace("{ssh}", ssh) for a in sc.argv]
    res = slurm.run(argv, timeout=timeout)
    if not res.ok:
        raise SlurmError(f"scenario {name}: {res.describe()}\n{slurm.log_tail('slurmctld.log')}")
    if sc.batch:
        slurm.wait_jobs_done(timeout=timeout)
    tasks = {}
    for f in sorted(out.glob("*.env0")):
        raw = f.read_bytes().decode("utf-8", errors="replace")
        env = dict(item.split("=", 1) for item in raw.split("\0") if "=" in item)
        host = f.with_suffix(".host").read_text().strip()
        tasks[f.stem] = (host, {
            k: v.replace(str(slurm.tmp), RUN_DIR) for k, v in kept(env).items()
        })
    if not tasks:
        raise SlurmError(f"scenario {name}: no task wrote its environment\n{res.describe()}")
    return tasks


def write_fixtures(results: Mapping[str, Mapping[str, Recorded]]) -> None:
    """Replace tests/fixtures/recorded/<scenario>/ for every recorded scenario; each file
    starts with the comment ``# ran on: <node>`` (the task's real host)."""
    for name, tasks in results.items():
        d = FIXTURES / name
        if d.exists():
            shutil.rmtree(d)
        d.mkdir(parents=True)
        for task, (host, env) in tasks.items():
            (d / f"{task}.env").write_text(f"{RAN_ON}{host}\n" + dump_env(env))


def write_readme(names: list[str], skipped: Mapping[str, str]) -> None:
    """tests/fixtures/recorded/README.md: versions, cluster, every scenario's command, then
    the torchrun scenarios' section (record_torchrun.py records those)."""
    from record_torchrun import readme_section
    vers = "\n".join(f"- `{k}`: {v}" for k, v in _versions().items())
    rows = []
    for name, sc in SCENARIOS.items():
        cmd = shlex.join(sc.argv).replace("{out}", "$OUT").replace("{ssh}", "$RUN/ssh/ssh")
        state = "recorded" if name in names else f"NOT recorded: {skipped.get(name, 'not run')}"
        rows.append(f"### {name}\n\n{sc.about}. {state}.\n\n```\n{cmd}\n```\n")
        if name in _JOB_SCRIPTS:
            rows.append("job.sh:\n\n```\n" + _JOB_SCRIPTS[name].replace("{out}", "$OUT")
                        + "```\n")
    FIXTURES.mkdir(parents=True, exist_ok=True)
    (FIXTURES / "README.md").write_text(README.format(
        versions=vers, nodes=", ".join(NODES), run_dir=RUN_DIR, ssh_port=SSH_PORT,
        scenarios="\n".join(rows)) + "\n" + readme_section())


README = """\
# Environments recorded from real managers

Written by `tests/e2e/record_envs.py` (do not edit by hand; re-record with
`PYTHONPATH=tests .venv/bin/python tests/e2e/record_envs.py` as root). Checked by
`tests/properties/test_recorded_envs.py`. One folder per scenario, one `<task>.env` per process
(`task<SLURM_PROCID>`, `rank<MPI rank>`, `batch`, `shell`), dotenv, sorted, after a first
line `# ran on: <node>` (the task's `uname -n`, i.e. where it really ran); only the
variables a source may read: `SLURM_*`, `SLURMD_*`, `OMPI_*`, `PMI_*`, `PMIX_*`, `PRTE_*`,
`MPI_LOCAL*`, `MV2_*`, `PALS_*`, `HYDRA_*`, `HOSTNAME`, `ENVIRONMENT`.

Versions:

{versions}

Cluster (`tests/e2e/slurmcluster.py`): nodes `gpu-a100-[09-11]` =
{nodes}, each a network namespace with address 198.18.0.10-12,
one slurmd each; munged, slurmctld and every client on a login node outside the
allocation (`login`, 198.18.0.13); `CPUs=4` per node, `select/cons_tres`, `CR_CPU`,
`proctrack/linuxproc`, `task/none`, fresh state (job ids from 1, in this order).
Clients start with only PATH, HOME, LANG, SLURM_CONF and HOSTNAME=login (what a login
shell exports), in `$RUN/shared`: tasks inherit that HOSTNAME, which is NOT their node's
name. The cluster's temporary folder (`$RUN`) is written as `{run_dir}`; ports and pids
are as recorded.
`$RUN/ssh/ssh` runs `ssh -F $RUN/ssh/ssh_config` (port {ssh_port}, root, a key made for the
run, no host key checks). `$OUT` below is the scenario's output folder, substituted before
the run (commands are argv, quoted as by `shlex.join`); each task runs
`env -0 >$OUT/<task>.env0; uname -n >$OUT/<task>.host`.

## What the recordings show (pinned by tests/properties/test_recorded_envs.py)

- `HOSTNAME` in a task is the submitting shell's (`login`), never the task's node; in a batch
  script it is the batch node's, and every step started there copies that.
- `ENVIRONMENT=BATCH` is inherited by the tasks of an `srun` inside a batch script.
- `-N3 -n5` gives `SLURM_STEP_TASKS_PER_NODE=3,1(x2)` (block fills the first node), not 2,2,1.
- `-m arbitrary`: `SLURM_NODEID` is the position in the sorted step node list, so rank 0 is
  on `SLURM_NODEID=2` (`gpu-a100-11`); the node whose `SLURM_GTIDS` holds 0 is the master.
- Open MPI `mpirun` in `salloc` (on the login node): ranks see the orted step
  (`SLURM_STEP_NUM_TASKS=3`, one per node) beside `OMPI_COMM_WORLD_SIZE=6`. In a batch
  script, the ranks on the batch node are mpirun's own children (no `SLURM_STEP_*`), the
  others are in a 2-node step whose `SLURM_NODEID` is 0 on `gpu-a100-10`.
- MPICH 4.0 Hydra in a batch script copies mpiexec's `SLURMD_NODENAME` and `SLURM_GTIDS`
  into every rank (its Slurm bootstrap withholds only a fixed list of `SLURM_*` names,
  pmodels/mpich `src/pm/hydra/tools/bootstrap/external/slurm_env.c`), so
  `SLURMD_NODENAME == hosts[SLURM_NODEID]` fails on the other nodes.
- `--mpi=pmi2`: `PMI_RANK`, `PMI_SIZE`, `PMI_FD`, `PMI_JOBID=<job>.<step>`; no local rank
  and no `SLURM_PMI2_PROC_MAPPING` variable.
- `--mpi=pmix`: `PMIX_RANK`, `PMIX_NAMESPACE=slurm.pmix.<job>.<step>`,
  `SLURM_PMIX_MAPPING_SERV=(vector,(0,3,2))`, a loopback `PMIX_SERVER_URI*`; no size.
- `--mpi=cray_shasta`: only `PALS_APID`, `PALS_RANKID`, `PALS_NODEID`, `PALS_SPOOL_DIR`,
  `PALS_APINFO` (no `PMI_*`, no `PALS_LOCAL_RANKID`: Slurm's
  `src/plugins/mpi/cray_shasta/mpi_cray_shasta.c` sets no more).
- Open MPI over SSH: no `SLURM_*`, no `HOSTNAME`; `OMPI_UNIVERSE_SIZE=8` although `-H`
  lists 6 slots and `OMPI_COMM_WORLD_SIZE=6`: never a process count.
- `srun --pty`: `SLURM_PTY_PORT` set, one task (`SLURM_STEP_NUM_TASKS=1`).

## Scenarios

{scenarios}
"""


def record_all(
    names: list[str], log: bool = True
) -> tuple[dict[str, dict[str, Recorded]], dict[str, str]]:
    """Record ``names`` (in SCENARIOS order) on one fresh cluster. Returns (scenario -> task ->
    Recorded, scenario -> why it was not recorded). A scenario whose program is missing or
    whose run fails is reported in the second dict, the others still run."""
    results: dict[str, dict[str, Recorded]] = {}
    skipped: dict[str, str] = {}
    ssh = any(SCENARIOS[n].ssh for n in names) and find_program("sshd") is not None
    with SlurmCluster(ssh=ssh) as slurm:
        for name in SCENARIOS:  # always in order: job ids depend on it
            if name not in names:
                continue
            need = SCENARIOS[name].needs
            if need and not shutil.which(need):
                skipped[name] = f"`{need}` not installed"
                continue
            if SCENARIOS[name].ssh and not ssh:
                skipped[name] = "`sshd` not installed (openssh-server)"
                continue
            try:
                results[name] = record(slurm, name)
            except SlurmError as exc:
                skipped[name] = str(exc).splitlines()[0][:200]
                if log:
                    print(exc, file=sys.stderr)
                continue
            if log:
                print(f"{name}: {len(results[name])} task(s)", flush=True)
    return results, skipped


def stable(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` without the variables whose values differ from run to run (VARYING): what two
    recordings of the same scenario must agree on exactly."""
    return {k: v for k, v in env.items() if not VARYING.search(k)}


#: Names whose values change per run (found by diffing two recordings): ports, pids, the
#: controller's port in SLURM_WORKING_CLUSTER, Open MPI/PMIx job ids, URIs, session paths.
VARYING = re.compile(
    r"_PORT$|^SLURM_TASK_PID$|^SLURM_WORKING_CLUSTER$|_uri$|^PMIX_SERVER_(URI|TMPDIR)|"
    r"^PMIX_(NAMESPACE|ID)$|^PMIX_DSTORE_|^OMPI_MCA_orte_(precondition_transports|"
    r"jobfam_session_dir)$|^OMPI_MCA_ess_base_jobid$|^OMPI_FILE_LOCATION$"
)


def main(argv: list[str]) -> int:
    """Record the scenarios named in ``argv`` (default: all) into FIXTURES (README.md too when
    all are recorded); 0 when all of them worked, 1 when some were not, 2 on a bad name."""
    names = argv or list(SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        print(f"unknown scenario(s) {unknown}; known: {list(SCENARIOS)}", file=sys.stderr)
        return 2
    results, skipped = record_all(names)
    write_fixtures(results)
    if set(names) == set(SCENARIOS):
        write_readme(list(results), skipped)
    return 0 if not skipped else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
