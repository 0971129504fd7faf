"""The Volcano Job source (sources/managers/volcano.py).

No Volcano runs here: the pods' environments are TYPED from the job plugins' code
(volcano-sh/volcano ``pkg/controllers/job/plugins/``):

- ``env/env.go`` ``OnPodCreate``: ``VK_TASK_INDEX`` = ``VC_TASK_INDEX`` = the pod's index in
  its task (``helpers.GetPodIndexUnderTask``: the last ``-`` field of the pod name);
- ``svc/svc.go`` ``OnPodCreate`` (hostname = pod name ``<job>-<task>-<i>``, ``MakePodName``;
  subdomain = job name) and ``GenerateHosts`` (``VC_<TASK>_HOSTS`` = comma list of
  ``<hostname>.<subdomain>``, ``VC_<TASK>_NUM`` = its length, ``<task>.host`` = the list one
  per line, task names upper-cased in env keys with ``-`` as ``_``; one entry for a task whose
  template sets a hostname);
- ``distributed-framework/pytorch/pytorch.go`` ``OnPodCreate``: ``MASTER_ADDR`` =
  ``generateMasterAddr`` (``<job>-master-0.<job>``), ``MASTER_PORT`` = 23456 (DefaultPort),
  ``WORLD_SIZE`` = master + worker replicas (``getTotalReplicas``), ``RANK`` = 0 on the master,
  worker index + 1.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from derive_env.errors import TopologyError
from derive_env.sources import BY_NAME
from derive_env.sources.managers import volcano
from derive_env.sources.report import Report
from support.k8s import volcano_pod as pod

LINE = BY_NAME["volcano"]


def read(env: dict[str, str], files: dict[str, str] | None = None) -> Report:
    needed = volcano.files_needed(env, LINE.name)
    return volcano.read(env, LINE, {p: (files or {}).get(p) for p in needed})


def error(env: dict[str, str], files: dict[str, str] | None = None) -> str:
    with pytest.raises(TopologyError) as caught:
        read(env, files)
    return str(caught.value)


def test_a_pytorch_worker_pod() -> None:
    env, files = pod("pt", {"master": 1, "worker": 3}, "worker", 1, pytorch=True)
    report = read(env, files)
    assert [(n.host, n.role, n.index) for n in report.nodes] == [
        ("pt-master-0.pt", "master", 1), ("pt-worker-0.pt", "worker", 1),
        ("pt-worker-1.pt", "worker", 2), ("pt-worker-2.pt", "worker", 3)]
    assert (report.node_rank, report.master_port, report.processes, report.job) == (
        2, 23456, None, ("volcano", "pt-master-0.pt", "4"))
    assert report.preset == frozenset({"MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE"})
    assert report.inputs["nodes"] == ("VC_MASTER_HOSTS", "VC_WORKER_HOSTS")


def test_the_host_files_when_the_env_is_not_injected() -> None:
    """--inject-hosts-env=false (41f1cdaf5) drops VC_<TASK>_HOSTS; the files remain."""
    env, files = pod("j", {"master": 1, "worker": 2}, "worker", 0, env_hosts=False)
    assert volcano.files_needed(env, LINE.name) == (
        "/etc/volcano/master.host", "/etc/volcano/worker.host")
    report = read(env, files)
    assert [n.host for n in report.nodes] == ["j-master-0.j", "j-worker-0.j", "j-worker-1.j"]
    assert report.node_rank == 1
    assert error(env, {}) == (
        "VC_MASTER_NUM='1': expected VC_MASTER_HOSTS or a readable /etc/volcano/master.host "
        "beside it (the svc plugin's host list of task master); " + volcano._FIX)


def test_tasks_without_a_master_go_by_name_and_dashes_become_underscores() -> None:
    env, files = pod("x", {"trainer-b": 2, "trainer-a": 1}, "trainer-b", 1)
    report = read(env, files)
    assert [n.host for n in report.nodes] == ["x-trainer-a-0.x", "x-trainer-b-0.x",
                                               "x-trainer-b-1.x"]
    assert report.node_rank == 2


def test_pytorch_plugin_counts_only_master_and_worker() -> None:
    """Pitfall 9: other tasks are no training nodes (getTotalReplicas, ae092898e)."""
    env, files = pod("p", {"master": 1, "worker": 2, "ps": 2}, "worker", 1, pytorch=True)
    report = read(env, files)
    assert [n.host for n in report.nodes] == ["p-master-0.p", "p-worker-0.p", "p-worker-1.p"]
    ps_env, _ = pod("p", {"master": 1, "worker": 2, "ps": 2}, "ps", 0, pytorch=True)
    assert error(ps_env).startswith("HOSTNAME='p-ps-0': expected the hostname of a pod of "
                                    "the training tasks (master, worker)")


def test_rank_and_world_size_are_node_values_checked() -> None:
    env, _ = pod("pt", {"master": 1, "worker": 3}, "worker", 1, pytorch=True)
    assert error({**env, "WORLD_SIZE": "32"}) == (
        "WORLD_SIZE='32': expected 4, the pods of the master and worker tasks: the pytorch "
        "plugin sets pod values, not process ranks (pytorch.go OnPodCreate); " + volcano._FIX)
    assert error({**env, "RANK": "1"}).startswith(
        "RANK='1': expected 2, this pod's node rank (master 0, worker i: i + 1)")


def test_a_user_set_index_and_missing_lists_are_refused() -> None:
    env, _ = pod("pt", {"master": 1, "worker": 3}, "worker", 1)
    assert error({**env, "VC_TASK_INDEX": "2", "VK_TASK_INDEX": "2"}).startswith(
        "VC_TASK_INDEX='2': expected 1, the place of HOSTNAME='pt-worker-1' in "
        "VC_WORKER_HOSTS")
    assert error({**env, "VK_TASK_INDEX": "0"}).startswith(
        "VK_TASK_INDEX='0': expected VC_TASK_INDEX='1' (env.go sets both)")
    bare = {"VC_TASK_INDEX": "0", "VK_TASK_INDEX": "0", "HOSTNAME": "j-worker-0"}
    assert error(bare) == (
        "VC_TASK_INDEX='0': expected VC_<TASK>_HOSTS and VC_<TASK>_NUM beside it: a Volcano "
        "Job states its pods only through the svc plugin; add `svc: []` to the job's "
        "spec.plugins (and do not set --inject-hosts-env=false); the same on every pod")
    assert error({**env, "VC_WORKER_NUM": "4"}).startswith(
        "VC_WORKER_NUM='4': expected 3, the hosts in VC_WORKER_HOSTS")


# -- properties ---------------------------------------------------------------------------

TASKS = st.dictionaries(st.sampled_from(["master", "worker", "ps", "eval-a"]),
                        st.integers(1, 6), min_size=1)


@settings(max_examples=100, deadline=None)
@given(tasks=TASKS, pytorch=st.booleans(), env_hosts=st.booleans())
def test_every_pod_of_a_job_derives_one_job(tasks: dict[str, int], pytorch: bool,
                                            env_hosts: bool) -> None:
    from derive_env.digest import digest_of, facts_of
    from derive_env.pipeline import derive

    pytorch = pytorch and "master" in tasks and tasks["master"] == 1
    # the plugin's WORLD_SIZE counts the master and worker tasks only (pod() sets it so)
    training = {"master", "worker"} & set(tasks) if pytorch else set(tasks)
    digests, ranks = set(), []
    for task, replicas in sorted(tasks.items()):
        for i in range(replicas):
            env, files = pod("job", tasks, task, i, pytorch, env_hosts)
            if task not in training:
                assert error(env, files).startswith("HOSTNAME=")
                continue
            ranks.append(read(env, files).node_rank)
            derivation = derive(env, {"ai.backend.distributed.frameworks": "pytorch"},
                                files=lambda paths, f=files: {p: f.get(p) for p in paths})
            assert derivation is not None
            digests.add(digest_of(facts_of(derivation.topology, derivation)))
    assert sorted(ranks) == list(range(sum(tasks[t] for t in training)))
    assert len(digests) == 1


TEXT = st.text(st.characters(codec="utf-8"), max_size=12) | st.sampled_from(
    ["0", "1", "2", "-1", "01", "j-worker-0", "j-worker-0.j,j-worker-1.j", "j-master-0.j",
     "23456", ""])


@settings(max_examples=300, deadline=None)
@given(values=st.fixed_dictionaries(
    {n: TEXT for n in ("VC_TASK_INDEX", "VK_TASK_INDEX", "HOSTNAME", "VC_WORKER_HOSTS",
                       "VC_WORKER_NUM", "VC_MASTER_HOSTS", "MASTER_ADDR", "MASTER_PORT",
                       "WORLD_SIZE", "RANK")}), text=TEXT)
def test_arbitrary_text_gives_a_report_or_a_topology_error(values: dict[str, str],
                                                           text: str) -> None:
    try:
        report = read(values, {"/etc/volcano/worker.host": text,
                               "/etc/volcano/master.host": text})
    except TopologyError:
        return
    assert 0 <= report.node_rank < len(report.nodes)


def test_the_svc_plugins_lists_without_the_index_are_refused() -> None:
    """VC_WORKER_HOSTS and VC_WORKER_NUM=3 without VC_TASK_INDEX (no env plugin): a partial
    set stating three pods, refused (exit 3), never a job of one pod."""
    from support.dry_run import dry_run

    hosts = "vj-worker-0.vj,vj-worker-1.vj,vj-worker-2.vj"
    assert dry_run([f"VC_WORKER_HOSTS={hosts}", "VC_WORKER_NUM=3", "HOSTNAME=vj-worker-1"]) == (
        3, "", "derive-env: error: VC_WORKER_NUM='3': expected 1 or unset: a Volcano Job "
        "states a job of more than one pod, but only part of its variables are set (not set: "
        "VC_TASK_INDEX), and a partial set is never used: it may be left over from another "
        "job. Run derive-env in the launcher's own process (the launcher sets all of them), or "
        "set label ai.backend.distributed.on-error=warn to run the command with the "
        "environment unchanged\n")
