"""Issue 25: ``derive-env check`` as a Kubernetes init container, without SSH.

Pods are stood in by network namespaces (tests/e2e/simcluster.py): each has its own host name
(the pod's hostname), address (198.18.0.10+i) and ``/etc/hosts`` (the kubelet's line for the
pod itself, the other lines standing in for the cluster's DNS of a headless Service that
publishes not-ready addresses). Every pod runs ``derive-env check --timeout 30`` with the
environment its controller gives it, as the init container of docs/operator-guide.md
section 8 does; nothing connects but the check itself (no SSH, no launcher):

- a Kubeflow PyTorchJob of 3 pods, an image that did not opt in, the check as the first step
  of the trainer's container (the operator's variables reach no init container): the master
  pod (``MASTER_ADDR=localhost``) starts 3 s after the workers, every check passes;
- an Indexed Job of 3 pods, opted in by the manifest (``DERIVE_ENV_FRAMEWORKS``): passes;
- a JobSet of 3 pods with the light env (``JOBSET_NAME``, ``JOBSET_COORDINATOR`` and
  ``DERIVE_ENV_REPLICATED_JOBS``; the rest from the hostname), the coordinator the master:
  passes;
- the same Indexed Job with pod 2 never started (its name unknown to the DNS): the master's
  check fails within the bound naming node 2, the others fail with the master's verdict.

Each pod's check is timed by the shell around it. Needs root and ``ip netns``: skipped
without them, FAILS under CI=true (sessions.require).
"""

from __future__ import annotations

import os
import random
from collections.abc import Mapping

import pytest

from sessions import require_frameworks, venv_bin
from simcluster import NETNS_ETC, HostResult, SimulatedCluster
from timed_check import check_port, elapsed, timed_check

pytestmark = pytest.mark.e2e

#: The init container's bound, and the slack on top of it for the interpreter's start.
BOUND_S = 30.0
SLACK_S = 3.0
#: One pod's init container, timed: ``elapsed HOST MS`` after the check's output. ``$1``:
#: seconds to wait before the check (the pod starts later).
TIMED_CHECK = timed_check("--timeout 30", before='sleep "$1"; ')
#: The pods' names: the kubelet's /etc/hosts line gives the subdomain's whole domain.
FQDN = "train.default.svc.cluster.local"
#: What the kubelet puts in every container.
KUBE = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}


def _prefix() -> str:
    return f"dek8s{os.getpid() % 10000}x{random.randrange(100)}"


def _dns(cluster: SimulatedCluster, names: Mapping[str, str], subdomain: str | None,
         missing: str | None = None) -> None:
    """Each pod's /etc/hosts as the kubelet writes it (its own FQDN when the pod has a
    subdomain), plus every other pod's ``<host>.<subdomain>`` as the headless Service's DNS
    answers it; the ``missing`` pod is in no one's."""
    for host in cluster.hosts:
        lines = ["127.0.0.1 localhost", "::1 localhost"]
        for other, address in cluster.addresses.items():
            if other == missing:
                continue
            if other == host:
                own = (f"{host}.{subdomain}.default.svc.cluster.local {host}" if subdomain
                       else host)
                lines.append(f"{address} {own}")
            else:
                lines.append(f"{address} {names[other]}")
        (NETNS_ETC / cluster.namespace(host) / "hosts").write_text("\n".join(lines) + "\n")


def _run(cluster: SimulatedCluster, envs: Mapping[str, dict[str, str]],
         delays: Mapping[str, float]) -> dict[str, HostResult]:
    path = f"{venv_bin()}:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
    return cluster.run_all(
        {h: (["sh", "-c", TIMED_CHECK, "init", str(delays.get(h, 0))],
             {**KUBE, "PATH": path, "HOME": "/root", **env}) for h, env in envs.items()},
        timeout=BOUND_S + 15)


def _elapsed(result: HostResult) -> float:
    """The seconds of the one check in ``result``'s output."""
    times = elapsed(result.stdout)
    assert len(times) == 1, result.describe()
    return next(iter(times.values()))


def _pytorchjob(port: int) -> dict[str, dict[str, str]]:
    """The training operator's variables of each pod (pkg/controller.v1/pytorch/envvar.go):
    3 pods, one process each; the master pod gets ``localhost``, the others the master's
    Service ``bert-1-master-0``."""
    pods = ["bert-1-master-0", "bert-1-worker-0", "bert-1-worker-1"]
    return {pod: {"MASTER_ADDR": master, "MASTER_PORT": str(port), "RANK": str(rank),
                  "WORLD_SIZE": "3", "PET_NODE_RANK": str(rank), "PET_NNODES": "3",
                  "PET_NPROC_PER_NODE": "1", "PET_MASTER_ADDR": master,
                  "PET_MASTER_PORT": str(port)}
            for rank, pod in enumerate(pods)
            for master in ["localhost" if rank == 0 else pods[0]]}


def _indexed_job(port: int) -> dict[str, dict[str, str]]:
    """An Indexed Job ``train`` of 3 pods (subdomain ``train``), opted in by the manifest."""
    return {f"train-{i}": {"JOB_COMPLETION_INDEX": str(i), "HOSTNAME": f"train-{i}",
                           "DERIVE_ENV_NNODES": "3", "DERIVE_ENV_FRAMEWORKS": "pytorch",
                           "DERIVE_ENV_MASTER_PORT": str(port)}
            for i in range(3)}


def test_pytorchjob_every_pod_checks_before_its_trainer() -> None:
    require_frameworks()
    port = check_port()
    envs = _pytorchjob(port)
    with SimulatedCluster(list(envs), prefix=_prefix()) as cluster:
        _dns(cluster, {h: h for h in envs}, None)
        results = _run(cluster, envs, {"bert-1-master-0": 3.0})
    master = results["bert-1-master-0"]
    assert master.returncode == 0, master.describe()
    assert master.stdout.startswith(
        f"derive-env check: 3 tasks, master bert-1-master-0:{port}, within 30 s\n"
        "rank  host             name         peers  port       iface\n"
        "0     bert-1-master-0  198.18.0.10  -      listening  eth0\n"
        "1     bert-1-worker-0  198.18.0.11  ok     connected  eth0\n"
        "2     bert-1-worker-1  198.18.0.12  ok     connected  eth0\n"
        "all checks pass on 3 tasks\n"), master.describe()
    # The image did not opt in: checked as pytorch, and said so.
    assert master.stderr == ("derive-env: note: not opted in (label "
            "ai.backend.distributed.frameworks: --frameworks, DERIVE_ENV_FRAMEWORKS or the "
            "image's label): checked as if frameworks=pytorch\n"), master.describe()
    for rank, pod in ((1, "bert-1-worker-0"), (2, "bert-1-worker-1")):
        worker = results[pod]
        assert worker.returncode == 0, worker.describe()
        assert (f"{rank}     {pod}  198.18.0.{10 + rank}  ok     connected  eth0\n"
                "master bert-1-master-0: all checks pass on 3 tasks\n") in worker.stdout
        # the workers waited for the master pod, which started 3 s later
        assert 2.5 < _elapsed(worker) < BOUND_S + SLACK_S, worker.describe()
    print("PyTorchJob, seconds per pod:", {h: _elapsed(r) for h, r in results.items()})


def test_indexed_job_every_pod_checks_in_its_init_container() -> None:
    require_frameworks()
    port = check_port()
    envs = _indexed_job(port)
    with SimulatedCluster(list(envs), prefix=_prefix()) as cluster:
        _dns(cluster, {h: f"{h}.{FQDN}" for h in envs}, "train")
        results = _run(cluster, envs, {"train-2": 2.0})
    master = results["train-0"]
    assert master.returncode == 0, master.describe()
    assert master.stdout.startswith(
        f"derive-env check: 3 nodes, master train-0.{FQDN}:{port}, within 30 s\n"
        "node  host                                     name         peers  port       iface\n"
        f"0     train-0.{FQDN}  198.18.0.10  ok     listening  eth0\n"
        f"1     train-1.{FQDN}  198.18.0.11  ok     connected  eth0\n"
        f"2     train-2.{FQDN}  198.18.0.12  ok     connected  eth0\n"
        "all checks pass on 3 nodes\n"), master.describe()
    assert master.stderr == "", master.describe()
    for pod in ("train-1", "train-2"):
        assert results[pod].returncode == 0, results[pod].describe()
        assert (f"master train-0.{FQDN}: all checks pass on 3 nodes\n"
                in results[pod].stdout), results[pod].describe()
        assert _elapsed(results[pod]) < BOUND_S + SLACK_S, results[pod].describe()
    print("Indexed Job, seconds per pod:", {h: _elapsed(r) for h, r in results.items()})


def test_a_pod_that_never_starts_is_named_by_the_master_within_the_bound() -> None:
    """train-2 never starts (and so its name never resolves): the master's init container
    fails before its bound, naming node 2; train-1's fails with the master's verdict."""
    require_frameworks()
    port = check_port()
    envs = _indexed_job(port)
    with SimulatedCluster(list(envs), prefix=_prefix()) as cluster:
        _dns(cluster, {h: f"{h}.{FQDN}" for h in envs}, "train", missing="train-2")
        del envs["train-2"]
        results = _run(cluster, envs, {})
    master = results["train-0"]
    assert master.returncode == 1, master.describe()
    t0, t1, t2 = (f"train-{i}.{FQDN}" for i in range(3))
    assert master.stdout.startswith(
        f"derive-env check: 3 nodes, master {t0}:{port}, within 30 s\n"
        "node  host                                     name         peers  port       iface\n"
        f"0     {t0}  198.18.0.10  FAIL   listening  eth0\n"
        f"1     {t1}  198.18.0.11  FAIL   connected  eth0\n"
        f"2     {t2}  -            -      FAIL       -\n"
        f"{t0} peers: {t2} does not resolve on {t0}\n"
        f"{t1} peers: {t2} does not resolve on {t1}\n"
        f"{t2} port: {t2} did not report to the master (not started, or it cannot connect)\n"
        f"FAILED: {t0} (peers), {t1} (peers), {t2} (port)\n"), master.describe()
    worker = results["train-1"]
    assert worker.returncode == 1, worker.describe()
    assert worker.stdout.endswith(
        f"{t1} peers: {t2} does not resolve on {t1}\n"
        f"master {t0}: FAILED: {t0} (peers), {t1} (peers), {t2} (port)\n"
        f"elapsed train-1 {round(_elapsed(worker) * 1000)}\n"), worker.describe()
    # within the bound, and only after waiting for node 2 until shortly before it
    assert BOUND_S * 0.8 < _elapsed(master) < BOUND_S + SLACK_S, master.describe()
    assert _elapsed(worker) < BOUND_S + SLACK_S, worker.describe()
    print("pod 2 missing, seconds per pod:", {h: _elapsed(r) for h, r in results.items()})


def test_jobset_with_one_downward_entry_checks_in_its_init_containers() -> None:
    """JobSet pt: workers (1 job of 2 pods), then leader (1 of 1), spec.coordinator
    leader/0/0. The Job controller's JOB_COMPLETION_INDEX and hostname, the manifest's
    JOBSET_NAME, JOBSET_COORDINATOR (downward API) and DERIVE_ENV_REPLICATED_JOBS only."""
    require_frameworks()
    port = check_port()
    fqdn = "pt.default.svc.cluster.local"
    pods = {"pt-workers-0-0": "0", "pt-workers-0-1": "1", "pt-leader-0-0": "0"}
    envs = {host: {"JOB_COMPLETION_INDEX": index, "HOSTNAME": host, "JOBSET_NAME": "pt",
                   "JOBSET_COORDINATOR": "pt-leader-0-0.pt",
                   "DERIVE_ENV_REPLICATED_JOBS": "workers:1x2,leader:1x1",
                   "DERIVE_ENV_FRAMEWORKS": "pytorch", "DERIVE_ENV_MASTER_PORT": str(port)}
            for host, index in pods.items()}
    with SimulatedCluster(list(envs), prefix=_prefix()) as cluster:
        _dns(cluster, {h: f"{h}.{fqdn}" for h in envs}, "pt")
        results = _run(cluster, envs, {"pt-leader-0-0": 2.0})
    master = results["pt-leader-0-0"]
    assert master.returncode == 0, master.describe()
    # the coordinator first (node rank 0), named as the kubelet names the pods
    assert master.stdout.startswith(
        f"derive-env check: 3 nodes, master pt-leader-0-0.{fqdn}:{port}, within 30 s\n"
        "node  host                                         name         peers  port       "
        "iface\n"
        f"0     pt-leader-0-0.{fqdn}   198.18.0.12  ok     listening  eth0\n"
        f"1     pt-workers-0-0.{fqdn}  198.18.0.10  ok     connected  eth0\n"
        f"2     pt-workers-0-1.{fqdn}  198.18.0.11  ok     connected  eth0\n"
        "all checks pass on 3 nodes\n"), master.describe()
    for pod in ("pt-workers-0-0", "pt-workers-0-1"):
        assert results[pod].returncode == 0, results[pod].describe()
        assert (f"master pt-leader-0-0.{fqdn}: all checks pass on 3 nodes\n"
                in results[pod].stdout), results[pod].describe()
    print("JobSet, seconds per pod:", {h: _elapsed(r) for h, r in results.items()})
