"""Every node's (or process's) environment of a job of random size, per source line: the
builders of the conformance suite (tests/sources/test_conformance.py). ``JOBS[name]`` is a
hypothesis strategy of ``[(environ, files), ...]``, one item per node or process of one
job, ``files`` the text of each file the line asks for (path -> text, ``None``: unreadable).
A line without a builder here is skipped by that property, visibly.
"""

from __future__ import annotations

import random

from hypothesis import strategies as st

from support.backendai import hosts_by_index, make_backendai_env, sessions
from support.k8s import etc_hosts, indexed_job_pod, lws_pod, tfjob, volcano_pod
from support.kubeflow import pytorchjob_pod, trainjob_node
from support.slurm import job_envs, slurm_jobs

Job = list[tuple[dict[str, str], dict[str, "str | None"]]]


@st.composite
def _backendai(draw) -> Job:
    pairs, group_order = draw(sessions())
    rnd = random.Random(draw(st.integers(0, 2**32 - 1)))
    names = [f"{role}{i}" for role, count in pairs for i in range(1, count + 1)]
    return [(make_backendai_env(hosts_by_index(pairs, rnd), host, pairs,
                                group_order=group_order), {}) for host in names]


@st.composite
def _slurm_step(draw) -> Job:
    job_hosts, hosts, tpn, dist, order = draw(slurm_jobs())
    files = {"/h": "\n".join(order) + "\n"} if order else {}
    return [(env, files) for _host, env in job_envs(job_hosts, hosts, tpn, dist, order)]


@st.composite
def _pytorchjob(draw) -> Job:
    workers, port = draw(st.integers(0, 12)), draw(st.integers(1024, 65535))
    nproc = draw(st.sampled_from(["1", "2", "auto", "gpu"]))
    return [(pytorchjob_pod("job-1", workers, pod, nproc, port), {})
            for pod in range(workers + 1)]


@st.composite
def _trainjob(draw) -> Job:
    nodes = draw(st.integers(1, 32))
    nproc = draw(st.sampled_from(["1", "2", "auto", "gpu"]))
    return [(trainjob_node("t", nodes, i, nproc), {}) for i in range(nodes)]


@st.composite
def _indexed_job(draw) -> Job:
    count, fqdn = draw(st.integers(1, 24)), draw(st.booleans())
    out: Job = []
    for index in range(count):
        hosts = etc_hosts(f"job-{index}", f"job-{index}.job.default.svc.cluster.local")
        out.append((indexed_job_pod("job", index, count, None if fqdn else "job"),
                    {"/etc/hosts": hosts if fqdn else None}))
    return out


@st.composite
def _lws(draw) -> Job:
    size, group, unique = draw(st.integers(1, 24)), draw(st.integers(0, 99)), draw(st.booleans())
    return [(lws_pod("set", group, i, size, "ns", f"set-{group}" if unique else None), {})
            for i in range(size)]


@st.composite
def _tf_config(draw) -> Job:
    chief, workers, ps = draw(st.booleans()), draw(st.integers(0, 12)), draw(st.integers(0, 3))
    workers = workers or (0 if chief else 1)
    replicas = {"chief": int(chief), "worker": workers, "ps": ps}
    tasks = [("chief", 0)] * chief + [("worker", i) for i in range(workers)]
    return [({"TF_CONFIG": tfjob("j", replicas, t, i)}, {}) for t, i in tasks]


@st.composite
def _volcano(draw) -> Job:
    workers = draw(st.integers(1, 12))
    tasks = {"master": 1, "worker": workers} if draw(st.booleans()) else {"worker": workers}
    pytorch = "master" in tasks and draw(st.booleans())
    return [volcano_pod("job", tasks, task, i, pytorch)
            for task, replicas in sorted(tasks.items()) for i in range(replicas)]


JOBS = {
    "backendai": _backendai(),
    "slurm-step": _slurm_step(),
    "kubeflow-pytorchjob": _pytorchjob(),
    "kubeflow-trainjob": _trainjob(),
    "kubernetes-indexed-job": _indexed_job(),
    "lws": _lws(),
    "tf-config": _tf_config(),
    "volcano": _volcano(),
}
