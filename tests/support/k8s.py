"""Kubernetes workloads' pods as their controllers and the kubelet set them: the manifests
of docs/sources (parsed), an Indexed Job pod and its /etc/hosts, a LeaderWorkerSet pod, a
Volcano Job pod (env and svc plugins), a TFJob replica's TF_CONFIG.
"""

from __future__ import annotations

import json
import re

from support import REPO


def manifest(kind: str, name: str | None = None, page: str = "kubernetes.md") -> dict:
    """The YAML manifest of ``kind`` (named ``name``, when the page has several of that kind)
    in docs/sources/``page`` (kubernetes.md, kubeflow.md), parsed (exactly one must match;
    every block of the page must parse, multi-document ones included)."""
    import yaml

    path = REPO / "docs" / "sources" / page
    found = [doc for block in re.findall(r"```yaml\n(.*?)```",
                                         path.read_text(encoding="utf-8"), re.S)
             for doc in yaml.safe_load_all(block)]
    matches = [m for m in found if isinstance(m, dict) and m.get("kind") == kind
               and (name is None or (m.get("metadata") or {}).get("name") == name)]
    assert len(matches) == 1, (kind, name)
    return matches[0]



def indexed_job_pod(job: str, index: int, nnodes: int | None = None, subdomain: str | None = None,
        **extra: str) -> dict[str, str]:
    """One pod of Indexed Job ``job`` as the controller (manageJob,
    addCompletionIndexEnvVariable) and the kubelet set it, plus the manifest's inputs."""
    env = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443",
           "HOSTNAME": f"{job}-{index}", "JOB_COMPLETION_INDEX": str(index)}
    if nnodes is not None:
        env["DERIVE_ENV_NNODES"] = str(nnodes)
    if subdomain is not None:
        env["DERIVE_ENV_SUBDOMAIN"] = subdomain
    return {**env, **extra}


def etc_hosts(hostname: str, fqdn: str | None, ip: str = "10.244.1.7") -> str:
    """The kubelet's managedHostsFileContent for a non-hostNetwork pod (kubelet_pods.go)."""
    text = ("# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost "
            "ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\n"
            "fe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n")
    return text + (f"{ip}\t{fqdn}\t{hostname}\n" if fqdn else f"{ip}\t{hostname}\n")



def lws_pod(name: str, group: int, worker: int, size: int, namespace: str = "default",
        subdomain: str | None = None) -> dict[str, str]:
    """The environment AddLWSVariables gives pod ``worker`` of group ``group`` (subdomain: the
    set's name under the Shared policy), with the hostname the StatefulSet gives it."""
    leader = f"{name}-{group}"
    return {"LWS_LEADER_ADDRESS": f"{leader}.{subdomain or name}.{namespace}",
            "LWS_GROUP_SIZE": str(size), "LWS_WORKER_INDEX": str(worker),
            "HOSTNAME": leader if worker == 0 else f"{leader}-{worker}",
            "KUBERNETES_SERVICE_HOST": "10.96.0.1"}



def generate_hosts(job: str, tasks: dict[str, int]) -> dict[str, str]:
    """svc.go GenerateHosts: the env keys and ConfigMap files of every task."""
    out = {}
    for task, replicas in tasks.items():
        hosts = [f"{job}-{task}-{i}.{job}" for i in range(replicas)]
        key = task.replace("-", "_")
        out[f"/etc/volcano/{key}.host"] = "\n".join(hosts)
        out[f"VC_{key.upper()}_HOSTS"] = ",".join(hosts)
        out[f"VC_{key.upper()}_NUM"] = str(len(hosts))
    return out


def volcano_pod(job: str, tasks: dict[str, int], task: str, index: int, pytorch: bool = False,
        env_hosts: bool = True) -> tuple[dict[str, str], dict[str, str]]:
    """One pod (env, files) with the env and svc plugins (and the pytorch plugin)."""
    generated = generate_hosts(job, tasks)
    env = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "HOSTNAME": f"{job}-{task}-{index}",
           "VK_TASK_INDEX": str(index), "VC_TASK_INDEX": str(index)}
    env.update({k: v for k, v in generated.items() if k.startswith("VC_")
                and (env_hosts or k.endswith("_NUM"))})
    if pytorch:
        env.update(MASTER_ADDR=f"{job}-master-0.{job}", MASTER_PORT="23456",
                   WORLD_SIZE=str(tasks.get("master", 0) + tasks.get("worker", 0)),
                   RANK="0" if task == "master" else str(index + 1))
    files = {k: v for k, v in generated.items() if k.startswith("/")}
    return env, files



def tfjob(job: str, replicas: dict[str, int], task: str, index: int, ns: str = "default",
          port: int = 2222) -> str:
    """The TF_CONFIG genTFConfigJSONStr writes for replica ``task`` ``index``."""
    cluster = {t: [f"{job}-{t}-{i}.{ns}.svc:{port}" for i in range(n)]
               for t, n in replicas.items()}
    return json.dumps({"cluster": cluster, "task": {"type": task, "index": index},
                       "environment": "cloud"}, separators=(",", ":"))

