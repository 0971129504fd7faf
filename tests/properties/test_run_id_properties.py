"""DERIVE_ENV_RUN_ID over whole jobs (issue 28): every process of one job gets one run id,
another job, step or session another; a start without a manager a fresh one; a set value is
kept by every process.

The jobs come from the generators the other properties use: Slurm steps and MPI launchers
in an allocation (tests/sources/test_slurm.py, checked against recordings of real Slurm and
MPI runs), Backend.AI sessions (tests/properties/test_properties.py), and the recorded
torchrun and MPI-over-SSH jobs (tests/fixtures/recorded).
"""

from __future__ import annotations

import sys
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from derive_env.cli import new_run_id
from derive_env.merge import RUN_ID, run_id_problem
from derive_env.pipeline import derive
from support.backendai import replica_sessions as sessions
from support.recorded import FIXTURES, load_fixture
from support.slurm import job_envs, mpi_in_allocation, slurm_jobs, with_mpi

LABELS = {"ai.backend.distributed.frameworks": "pytorch,jax"}
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
#: Values a whole job may be given: 1-64 of letters, digits, . _ -, the first alphanumeric.
SET_VALUES = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", fullmatch=True)


def run_ids(envs: list[dict[str, str]], fresh: str | None = None) -> list[str]:
    """The run id every process of a job derives (each its own start: ``fresh`` per call)."""
    out = []
    for env in envs:
        derivation = derive(env, LABELS, None, fresh_run_id=fresh or new_run_id())
        assert derivation is not None
        (var,) = [v for v in derivation.variables if v.name == RUN_ID]
        out.append(var.value)
    return out


def one_id(envs: list[dict[str, str]]) -> str:
    ids = set(run_ids(envs))
    assert len(ids) == 1, ids
    (value,) = ids
    assert len(value) == 16 and set(value) <= set("0123456789abcdef")
    return value


@SETTINGS
@given(slurm_jobs(), st.integers(1, 999))
def test_every_task_of_an_srun_step_gets_one_id_and_another_step_another(job, other) -> None:
    job_hosts, hosts, tpn, dist, order = job
    envs = [env for _h, env in job_envs(job_hosts, hosts, tpn, dist, order)]
    if order:  # srun -m arbitrary: the hostfile is read through files; not needed here
        return
    mine = one_id(envs)
    step = one_id([{**env, "SLURM_STEP_ID": str(other)} for env in envs])
    job_id = str(42 + other)
    again = one_id([{**env, "SLURM_JOB_ID": job_id, "SLURM_JOBID": job_id} for env in envs])
    assert len({mine, step, again}) == 3


@SETTINGS
@given(st.integers(1, 9), st.lists(st.integers(1, 4), min_size=2, max_size=5),
       st.sampled_from(["ompi-in-sbatch", "ompi-in-salloc", "mpich-in-sbatch",
                        "mpich-in-salloc"]))
def test_every_rank_of_mpirun_in_an_allocation_gets_one_id(first, per_node, kind) -> None:
    hosts = [f"node-{first + i:03d}" for i in range(len(per_node))]
    envs = [env for _h, env in with_mpi(mpi_in_allocation(hosts, per_node, kind), per_node,
                                         kind)]
    mine = one_id(envs)
    other = [env for _h, env in with_mpi(mpi_in_allocation(hosts, per_node, kind, job="43"),
                                          per_node, kind)]
    assert one_id(other) != mine


@SETTINGS
@given(session=sessions(), other=st.text("abcdef0123456789-", min_size=1, max_size=12))
def test_every_container_of_a_session_gets_one_id_and_another_session_another(
        backendai_env, session, other) -> None:
    pairs, hosts = session
    envs = [backendai_env(hosts, host, pairs) for host in hosts]
    mine = one_id(envs)
    if other != "sess-0123":
        assert one_id([backendai_env(hosts, host, pairs, session_id=other)
                       for host in hosts]) != mine


@SETTINGS
@given(session=sessions(), value=SET_VALUES)
def test_a_value_set_for_the_whole_job_is_kept_by_every_process(backendai_env, session,
                                                                 value) -> None:
    pairs, hosts = session
    envs = [{**backendai_env(hosts, host, pairs), RUN_ID: value} for host in hosts]
    for env in envs:
        derivation = derive(env, LABELS, None, fresh_run_id=new_run_id())
        (var,) = [v for v in derivation.variables if v.name == RUN_ID]
        assert (var.value, var.kept) == (value, True)
        assert RUN_ID not in derivation.changes()  # never replaced


@SETTINGS
@given(value=st.text(min_size=1, max_size=80))
def test_a_set_value_is_accepted_exactly_when_it_is_a_safe_word(value) -> None:
    safe = (len(value) <= 64 and value.isascii() and value[0].isalnum()
            and all(c.isalnum() or c in "._-" for c in value))
    assert (run_id_problem(value) is None) == safe


def test_two_starts_without_a_manager_get_two_ids() -> None:
    ids = {run_ids([{}])[0] for _ in range(50)}
    assert len(ids) == 50
    assert all(len(i) == 16 and set(i) <= set("0123456789abcdef") for i in ids)


def _recorded(scenario: str) -> list[dict[str, str]]:
    return [load_fixture(path)[1] for path in sorted((FIXTURES / scenario).glob("*.env"))]


def test_every_recorded_job_gets_one_id_per_job() -> None:
    """Real torchrun, Open MPI and MPICH jobs (tests/fixtures/recorded): one id per job, a
    different one for each job, whatever each process draws as its fresh id."""
    found = {}
    for scenario in ("torchrun-c10d", "torchrun-static", "torchrun-standalone", "ompi-ssh",
                     "mpich-ssh", "srun-block", "srun-cyclic", "ompi-in-salloc"):
        envs = _recorded(scenario)
        extra = {"MASTER_ADDR": "gpu-a100-09"} if scenario.endswith("-ssh") else {}
        found[scenario] = one_id([{**env, **extra} for env in envs])
    assert len(set(found.values())) == len(found), found


#: The command derive-env execs: its own run id, then a child's (a DDP or dataloader worker
#: inherits the environment the same way).
_CHILD = ("import os, subprocess, sys; print(os.environ['DERIVE_ENV_RUN_ID']); "
          "sys.stdout.flush(); subprocess.run([sys.executable, '-c', "
          "\"import os; print(os.environ['DERIVE_ENV_RUN_ID'])\"], check=True)")


def _exec_path(tmp_path: Path, extra: dict[str, str]) -> list[str]:
    """``derive-env -- python -c _CHILD`` (the ENTRYPOINT path, the real console script):
    the ids the command and its child see."""
    import subprocess

    from helpers import console_script

    labels = tmp_path / "labels.json"
    labels.write_text('{"ai.backend.distributed.frameworks": "pytorch"}')
    env = {"PATH": "/usr/bin:/bin", "DERIVE_ENV_LABELS_FILE": str(labels), **extra}
    out = subprocess.run([console_script(), "--", sys.executable, "-c", _CHILD], env=env,
                         capture_output=True, text=True, timeout=60, check=True)
    return out.stdout.split()


def test_the_exec_path_gives_each_start_its_id_and_every_child_inherits_it(
        tmp_path: Path) -> None:
    first, second = _exec_path(tmp_path, {}), _exec_path(tmp_path, {})
    assert first[0] == first[1] and second[0] == second[1]  # the child inherits it
    assert first[0] != second[0]  # two starts without a manager: two ids
    assert all(len(i) == 16 and set(i) <= set("0123456789abcdef") for i in first + second)
    # an outer derive-env's (or a launcher's) value: kept by the inner start, never replaced
    assert _exec_path(tmp_path, {"DERIVE_ENV_RUN_ID": first[0]}) == [first[0], first[0]]
    # inside a Slurm step: the hash of the step's identity, whatever the start
    import hashlib

    task = load_fixture(FIXTURES / "srun-block" / "task3.env")[1]
    facts = "\0".join(("job", "slurm", task["SLURM_JOB_ID"], task["SLURM_STEP_ID"],
                       task["SLURM_JOB_ID"]))
    step_id = hashlib.blake2b(facts.encode(), digest_size=8,
                              person=b"derive-env.run").hexdigest()
    assert _exec_path(tmp_path, task) == _exec_path(tmp_path, task) == [step_id, step_id]
