"""digest.py: the job digest (contract section 8, issue 14 item 1).

Every node of a consistent job gives the same digest (hypothesis, over the session and job
models of tests/properties/ and tests/sources/); one job-wide fact changed on one node
changes it; node-local facts do not. The command line: ``--format digest`` and
``--format digest-facts`` exactly, an error with nothing on stdout.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from derive_env import cli
from derive_env.digest import (
    ADDRESS,
    HOST,
    canonical,
    digest_of,
    escape,
    explain_lines,
    facts_of,
    facts_text,
    render_digest,
)
from derive_env.frameworks.context import HostFacts
from derive_env.pipeline import derive
from derive_env.sources.compose import topology_from
from support.backendai import hosts_by_index, sessions
from support.kubeflow import pytorchjob_pod, trainjob_node
from support.slurm import job_envs, mpi_in_allocation, slurm_jobs, with_mpi

PREFIX = "ai.backend.distributed."
FW = PREFIX + "frameworks"
ALL = {FW: "pytorch,tensorflow,jax"}
SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
HOSTS = ["sub2", "main1", "sub1"]


def digest(env: dict[str, str], labels: dict[str, str] | None = None,
           facts: HostFacts | None = None, files=None) -> str:
    """The digest line of one node (``<digest> <node_rank> <host>``)."""
    labels = ALL if labels is None else labels
    derivation = derive(env, labels, facts, files=files)
    if derivation is None:
        return render_digest(topology_from(env, None, files), None, "digest")
    return render_digest(derivation.topology, derivation, "digest")


def digests(envs: list[dict[str, str]], labels: dict[str, str] | None = None,
            files=None) -> set[str]:
    """The digests (first field) of every node."""
    return {digest(env, labels, files=files).split()[0] for env in envs}


def session(backendai_env, **changes: str) -> list[dict[str, str]]:
    """The three containers of a Backend.AI session, ``changes`` set in every one."""
    return [{**backendai_env(HOSTS, host), **changes} for host in ("main1", "sub1", "sub2")]


# ---------------------------------------------------------------------------- exact values


SUB1_FACTS = """\
source: backendai
session: sess-0123
job: -
nodes: 3
node.0: main1 (main 1)
node.1: sub1 (sub 1)
node.2: sub2 (sub 2)
master: main1
master_port: -
reserved_ports: -
processes.world_size: -
processes.per_node: -
label.frameworks: pytorch,tensorflow,jax
label.master-port: 29500
label.tensorflow-port: 2222
label.jax-port: 1234
label.pytorch-mode: torchrun
label.nproc-per-node: -
label.tensorflow-roles: -
label.socket-ifname: -
label.on-error: fail
var.MASTER_ADDR: main1
var.MASTER_PORT: 29500
var.PET_NNODES: 3
var.PET_MASTER_ADDR: main1
var.PET_MASTER_PORT: 29500
var.TF_CONFIG.cluster: {"worker":["main1:2222","sub1:2222","sub2:2222"]}
var.JAX_COORDINATOR_ADDRESS: main1:1234
var.JAX_NUM_PROCESSES: 3
var.DERIVE_ENV_RUN_ID: 4710a43c645d3cb2
"""


def test_facts_of_a_backendai_container_exactly(backendai_env) -> None:
    derivation = derive(backendai_env(HOSTS, "sub1"), ALL)
    assert derivation is not None
    assert render_digest(derivation.topology, derivation, "digest-facts") == SUB1_FACTS
    expected = hashlib.sha256(SUB1_FACTS.encode()).hexdigest()[:32]
    assert render_digest(derivation.topology, derivation, "digest") == f"{expected} 1 sub1\n"


def test_not_opted_in_is_the_topology_alone(backendai_env) -> None:
    env = backendai_env(HOSTS, "sub2")
    text = render_digest(topology_from(env), None, "digest-facts")
    assert text == SUB1_FACTS.partition("label.frameworks")[0] + "label.frameworks: -\n"
    line = render_digest(topology_from(env), None, "digest")
    assert line == f"{hashlib.sha256(text.encode()).hexdigest()[:32]} 2 sub2\n"


def test_unknown_node_rank_and_host_are_dashes() -> None:
    env = pytorchjob_pod("job-1", 2, 1, "2")  # no host list: the node's host is unknown
    assert digest(env, {FW: "pytorch"}).split()[1:] == ["1", "-"]
    derivation = derive({"OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_RANK": "3",
                         "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
                         "MASTER_ADDR": "n1"}, {FW: "pytorch"})
    assert derivation is not None and derivation.topology.node_rank is None
    assert render_digest(derivation.topology, derivation, "digest").split()[1:] == ["-", "-"]


def test_unknown_format_is_a_value_error(backendai_env) -> None:
    with pytest.raises(ValueError, match="unknown digest format 'env'"):
        render_digest(topology_from(backendai_env(HOSTS, "sub1")), None, "env")


@pytest.mark.parametrize(("value", "shown"), [
    ("plain", "plain"),
    ("a\nb", "a\\nb"),
    ("a\tb", "a\\tb"),
    ("a\\nb", "a\\\\nb"),  # a backslash is escaped: "\\n" and a newline differ
    ("\x1b[2J", "\\x1b[2J"),
    ("\x7f", "\\x7f"),
    ("\udcff", "\\udcff"),  # an undecodable byte (surrogate escape)
    ("h\u00e9", "h\u00e9"),  # printable non-ASCII stays
    ("\u2028", "\\u2028"),
])
def test_escape(value: str, shown: str) -> None:
    assert escape(value) == shown


@pytest.mark.parametrize(("compare", "value", "expected"), [
    ("integer", " 029500 ", "29500"),
    ("integer", "2:4", "2:4"),
    ("host", " Main1 ", "main1"),
    ("host:port", "Main1:01234", "main1:1234"),
    ("host:port", "[FE80::1]:80", "[fe80::1]:80"),
    ("json", " {} ", " {} "),
])
def test_canonical(compare: str, value: str, expected: str) -> None:
    assert canonical(compare, value) == expected


def test_digest_is_the_hash_of_the_printed_facts() -> None:
    facts = [("a", "x\ny"), ("b", "-")]
    assert facts_text(facts) == "a: x\\ny\nb: -\n"
    assert digest_of(facts) == hashlib.sha256(b"a: x\\ny\nb: -\n").hexdigest()[:32]


# ------------------------------------------------------------ every node of a job agrees


@given(session=sessions(), seed=st.integers(0, 2**32 - 1))
@SETTINGS
def test_every_backendai_container_gives_one_digest(backendai_env, session, seed) -> None:
    pairs, group_order = session
    rnd = random.Random(seed)
    names = [f"{role}{i}" for role, count in pairs for i in range(1, count + 1)]
    envs = [backendai_env(hosts_by_index(pairs, rnd), host, pairs, group_order=group_order)
            for host in names]  # HOSTS drawn anew for every container
    assert len(digests(envs, {FW: "pytorch,jax"})) == 1
    assert len(digests(envs, {})) == 1  # not opted in: the topology alone


@given(slurm_jobs())
@SETTINGS
def test_every_task_of_an_srun_step_gives_one_digest(job) -> None:
    job_hosts, hosts, tpn, dist, order = job
    files = {"/h": "\n".join(order) + "\n"} if order else {}
    envs = [env for _host, env in job_envs(job_hosts, hosts, tpn, dist, order)]
    assert len(digests(envs, files=lambda paths: {p: files.get(p) for p in paths})) == 1


@given(st.integers(1, 9), st.lists(st.integers(1, 4), min_size=2, max_size=6),
       st.sampled_from(["ompi-in-sbatch", "ompi-in-salloc", "mpich-in-sbatch",
                        "mpich-in-salloc"]))
@SETTINGS
def test_every_rank_of_mpirun_in_an_allocation_gives_one_digest(first, per_node, kind) -> None:
    hosts = [f"node-{first + i:03d}" for i in range(len(per_node))]
    envs = [env for _host, env in with_mpi(mpi_in_allocation(hosts, per_node, kind),
                                           per_node, kind)]
    assert len(digests(envs, {FW: "pytorch,jax"})) == 1


NPROC = st.sampled_from(["1", "2", "4", "auto", "gpu"])


@given(workers=st.integers(0, 12), nproc=NPROC, port=st.integers(1, 65535))
@SETTINGS
def test_every_pytorchjob_pod_gives_one_digest(workers: int, nproc: str, port: int) -> None:
    envs = [pytorchjob_pod("job-1", workers, pod, nproc, port) for pod in range(workers + 1)]
    assert len(digests(envs, {FW: "pytorch"})) == 1


@given(nodes=st.integers(1, 32), nproc=NPROC)
@SETTINGS
def test_every_trainjob_node_gives_one_digest(nodes: int, nproc: str) -> None:
    envs = [trainjob_node("t", nodes, i, nproc) for i in range(nodes)]
    assert len(digests(envs, {FW: "pytorch,jax"})) == 1


# --------------------------------------------- one job-wide fact on one node changes it


@pytest.mark.parametrize(("labels", "changes", "fact"), [
    ({PREFIX + "master-port": "29501"}, {}, "label.master-port: 29501"),
    ({PREFIX + "tensorflow-port": "2223"}, {}, "label.tensorflow-port: 2223"),
    ({PREFIX + "jax-port": "1235"}, {}, "label.jax-port: 1235"),
    ({FW: "pytorch,tensorflow"}, {}, "label.frameworks: pytorch,tensorflow"),
    ({PREFIX + "tensorflow-roles": "main:chief,sub:worker"}, {},
     "label.tensorflow-roles: main:chief,sub:worker"),
    ({}, {"MASTER_PORT": "29501"}, "var.MASTER_PORT: 29501"),
    ({}, {"MASTER_ADDR": "10.0.0.1"}, "var.MASTER_ADDR: 10.0.0.1"),
    ({PREFIX + "nproc-per-node": "2"}, {}, "var.PET_NPROC_PER_NODE: 2"),
    ({PREFIX + "nproc-per-node": "2"}, {"PET_NPROC_PER_NODE": "4"}, "var.PET_NPROC_PER_NODE: 4"),
    ({}, {"BACKENDAI_SESSION_ID": "sess-4567"}, "session: sess-4567"),
])
def test_one_job_wide_fact_on_one_node_changes_its_digest(
    backendai_env, labels: dict[str, str], changes: dict[str, str], fact: str
) -> None:
    envs = session(backendai_env)
    others = digests(envs[:1] + envs[2:])
    assert len(others) == 1
    changed = {**envs[1], **changes}
    derivation = derive(changed, {**ALL, **labels})
    assert derivation is not None
    assert fact + "\n" in render_digest(derivation.topology, derivation, "digest-facts")
    assert digest(changed, {**ALL, **labels}).split()[0] not in others


def test_host_order_given_by_replicas_changes_the_digest(backendai_env) -> None:
    """Roles gpu and cpu: REPLICAS lists them in Backend.AI's order (sorted by name); one
    container given the other order puts the gpu nodes first (another master, node list)."""
    hosts = ["main1", "cpu1", "gpu1"]
    envs = [backendai_env(hosts, h) for h in hosts]
    assert len(digests(envs)) == 1
    swapped = {**envs[1], "BACKENDAI_CLUSTER_REPLICAS": "main:1,gpu:1,cpu:1"}
    assert digest(swapped).split()[0] not in digests(envs)


def test_a_user_value_set_alike_on_every_node_keeps_one_digest(backendai_env) -> None:
    envs = session(backendai_env, MASTER_PORT="12345", PET_NNODES="03")
    assert len(digests(envs)) == 1
    assert digests(envs) != digests(session(backendai_env))


# ------------------------------------------------------------- node-local facts do not


def test_node_local_facts_leave_the_digest_alone(backendai_env) -> None:
    envs = session(backendai_env)
    base = digests(envs)
    lone = {**envs[1], "BACKENDAI_CLUSTER_LOCAL_RANK": "0",  # the manager's own rank: a note
            "CUDA_VISIBLE_DEVICES": "3", "NODE_RANK": "1", "TF_CONFIG": ""}
    assert digest(lone).split()[0] in base
    # this node's interfaces: the interface hints are node_local
    facts = HostFacts(interfaces=("baimulti0",))
    assert digest(envs[1], facts=facts).split()[0] in base
    derivation = derive(envs[1], ALL, facts)
    assert derivation is not None
    assert "GLOO_SOCKET_IFNAME" in derivation.changes()
    assert not any("IFNAME" in name for name, _ in facts_of(derivation.topology, derivation))


def test_a_gpu_count_that_differs_per_node_is_node_local(backendai_env) -> None:
    """PET_NPROC_PER_NODE from each node's own GPU count (dstack's hostfile says 8, 4, 0;
    Backend.AI's GPU_COUNT per container): nodes may differ, torchrun takes each node's, so
    the digest does not; from the nproc-per-node label it is job-wide (label.nproc-per-node)."""
    envs = session(backendai_env)
    uneven = [{**env, "GPU_COUNT": str(8 >> index)} for index, env in enumerate(envs)]
    assert len(digests(uneven)) == 1
    derivation = derive(uneven[1], ALL)
    assert derivation is not None
    assert derivation.changes()["PET_NPROC_PER_NODE"] == "4"
    assert "var.PET_NPROC_PER_NODE" not in dict(facts_of(derivation.topology, derivation))
    labelled = {**ALL, PREFIX + "nproc-per-node": "2"}
    labelled_one = derive(uneven[1], labelled)
    assert labelled_one is not None
    assert dict(facts_of(labelled_one.topology, labelled_one))["var.PET_NPROC_PER_NODE"] == "2"


def test_per_process_local_ranks_are_node_local() -> None:
    """Two tasks on each of two nodes: LOCAL_RANK and LOCAL_WORLD_SIZE differ per task,
    the digest does not."""
    hosts, per_node = ["node-001", "node-002"], [2, 1]
    envs = [env for _h, env in with_mpi(mpi_in_allocation(hosts, per_node, "ompi-in-sbatch"),
                                        per_node, "ompi-in-sbatch")]
    assert len(digests(envs, {FW: "pytorch,jax"})) == 1
    derivation = derive(envs[0], {FW: "pytorch"})
    assert derivation is not None
    names = [name for name, _ in facts_of(derivation.topology, derivation)]
    assert "var.WORLD_SIZE" in names
    assert not {"var.RANK", "var.LOCAL_RANK", "var.LOCAL_WORLD_SIZE"} & set(names)


# ---------------------------------------------------------------------------- the command


def _env_file(tmp_path: Path, env: dict[str, str]) -> str:
    path = tmp_path / "node.env"
    path.write_text("".join(f"{k}={v}\n" for k, v in env.items()))
    return str(path)


@pytest.mark.parametrize("fmt", ["digest", "digest-facts"])
def test_command_prints_the_digest(backendai_env, tmp_path: Path, monkeypatch,
                                   capsys: pytest.CaptureFixture[str], fmt: str) -> None:
    monkeypatch.setattr(cli, "DEFAULT_LABELS_FILE", str(tmp_path / "none.json"))
    monkeypatch.delenv("DERIVE_ENV_LABELS_FILE", raising=False)
    path = _env_file(tmp_path, backendai_env(HOSTS, "sub1"))
    status = cli.run([], dry_run=True, fmt=fmt, env_file=path,
                     label_items=[f"{FW}={ALL[FW]}"])
    out, err = capsys.readouterr()
    assert (status, err) == (0, "")
    sha = hashlib.sha256(SUB1_FACTS.encode()).hexdigest()[:32]
    assert out == (SUB1_FACTS if fmt == "digest-facts" else f"{sha} 1 sub1\n")


@pytest.mark.parametrize("labels", [[f"{FW}=pytorch"], [f"{FW}=pytorch", PREFIX + "on-error=warn"],
                                    []], ids=["opted-in", "on-error-warn", "not-opted-in"])
def test_a_topology_error_prints_nothing_on_stdout(backendai_env, tmp_path: Path, monkeypatch,
                                                   capsys: pytest.CaptureFixture[str],
                                                   labels: list[str]) -> None:
    monkeypatch.setattr(cli, "DEFAULT_LABELS_FILE", str(tmp_path / "none.json"))
    monkeypatch.delenv("DERIVE_ENV_LABELS_FILE", raising=False)
    path = _env_file(tmp_path, {**backendai_env(HOSTS, "sub1"), "BACKENDAI_CLUSTER_SIZE": "4"})
    status = cli.run([], dry_run=True, fmt="digest", env_file=path, label_items=labels)
    out, err = capsys.readouterr()
    assert (status, out) == (3, "")
    assert err == ("derive-env: error: BACKENDAI_CLUSTER_REPLICAS='main:1,sub:2': expected "
                   "counts adding up to BACKENDAI_CLUSTER_SIZE=4; they add up to 3\n")


def test_explain_prints_the_digest_line_and_how_to_list_its_facts(
        backendai_env, tmp_path: Path, monkeypatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(cli, "DEFAULT_LABELS_FILE", str(tmp_path / "none.json"))
    monkeypatch.delenv("DERIVE_ENV_LABELS_FILE", raising=False)
    path = _env_file(tmp_path, backendai_env(HOSTS, "sub1"))
    assert cli.run([], dry_run=True, explain=True, env_file=path,
                   label_items=[f"{FW}={ALL[FW]}"]) == 0
    out = capsys.readouterr().out
    sha = hashlib.sha256(SUB1_FACTS.encode()).hexdigest()[:32]
    line = (f"\njob digest {sha} (every node must show the same; its facts: --dry-run --format "
            "digest-facts in place of --explain)\n\n")  # then the notes, which close the text
    assert line in out
    assert out.index("TF_CONFIG ") < out.index(line)
    assert "  node.0:" not in out  # the facts: --format digest-facts


def test_a_slurm_task_of_another_step_or_ports_differs() -> None:
    """A task whose step id, job id or reserved ports differ from the others' (a stale
    variable inherited from another step) changes its digest; its own ids do not."""
    envs = [env for _h, env in job_envs(["n01", "n02"], ["n01", "n02"], [2, 2], "block")]
    base = digests(envs)
    assert len(base) == 1
    for changes in ({"SLURM_STEP_ID": "1"}, {"SLURM_JOB_ID": "43", "SLURM_JOBID": "43"},
                    {"SLURM_STEP_RESV_PORTS": "12000-12002"}):
        assert digest({**envs[3], **changes}).split()[0] not in base, changes
    line = digest(envs[3])
    assert line.split()[1:] == ["1", "n02"]


def test_the_facts_of_a_slurm_step_exactly() -> None:
    envs = [env for _h, env in job_envs(["n01", "n02"], ["n01", "n02"], [2, 1], "block")]
    derivation = derive({**envs[2], "SLURM_STEP_RESV_PORTS": "12000-12002"}, {FW: "pytorch,jax"})
    assert derivation is not None
    facts = dict(facts_of(derivation.topology, derivation))
    assert {k: v for k, v in facts.items() if not k.startswith("label.")} == {
        "source": "slurm-step", "session": "42", "job": "slurm 42 0", "nodes": "2",
        "node.0": "n01", "node.1": "n02", "master": "n01", "master_port": "-",
        "reserved_ports": "12000,12001,12002", "processes.world_size": "3",
        "processes.per_node": "2,1",
        "var.MASTER_ADDR": "n01", "var.MASTER_PORT": "12000", "var.WORLD_SIZE": "3",
        "var.JAX_COORDINATOR_ADDRESS": "n01:12002", "var.JAX_NUM_PROCESSES": "3",
        "var.DERIVE_ENV_RUN_ID": "ef4b5343e88ce4ab",  # slurm job 42 step 0
    }


@given(workers=st.integers(1, 8), nproc=NPROC)
@SETTINGS
def test_a_master_pod_with_localhost_gives_the_workers_digest(workers: int, nproc: str) -> None:
    """The master pod of a PyTorchJob given MASTER_ADDR=localhost (training-operator up to
    v1.3, pytorch.go setPodEnv) names the master by its own pod name, the workers'
    <job>-master-0: one digest on every pod."""
    envs = [pytorchjob_pod("job-1", workers, pod, nproc, later=True)
            for pod in range(workers + 1)]
    assert len(digests(envs, {FW: "pytorch,jax"})) == 1


def test_a_loopback_master_address_is_rewritten_only_on_the_master_node() -> None:
    from derive_env.digest import _master_for_loopback, _own_master
    from derive_env.topology import ClusterTopology, Node

    nodes = (Node(host="m-0"), Node(host="w-0"))
    assert _own_master(ClusterTopology(source="x", nodes=nodes, node_rank=0)) == "m-0"
    assert _own_master(ClusterTopology(source="x", nodes=nodes, node_rank=1)) is None
    assert _master_for_loopback(ADDRESS, "[::1]:1234", "m-0") == "m-0:1234"
    assert _master_for_loopback(ADDRESS, "127.0.0.1:1234", "m-0") == "m-0:1234"
    assert _master_for_loopback(HOST, "localhost", "m-0") == "m-0"
    assert _master_for_loopback(HOST, "n1", "m-0") == "n1"


def test_digest_facts_list_every_node_line(backendai_env) -> None:
    hosts = ["main1", *(f"sub{i}" for i in range(1, 20))]
    derivation = derive(backendai_env(hosts, "sub3"), {FW: "pytorch"})
    assert derivation is not None
    full = render_digest(derivation.topology, derivation, "digest-facts")
    assert [line for line in full.splitlines() if line.startswith("node.")] == [
        "node.0: main1 (main 1)", *(f"node.{i}: sub{i} (sub {i})" for i in range(1, 20))]
    assert len(explain_lines(derivation)) == 2  # a blank line, the digest's


# ------------------------------------------------- the same two rules, over random sessions


PORTS = st.integers(3000, 65535).filter(lambda p: p != 29500)


@st.composite
def job_wide_changes(draw, pairs: list[tuple[str, int]]):
    """(labels, environment changes) that change one job-wide fact of a container."""
    kinds = ["master-port", "tensorflow-port", "jax-port", "MASTER_PORT", "session", "roles"]
    others = [role for role, _ in pairs if role != "main"]
    if len(others) > 1:
        kinds.append("replicas")
    kind = draw(st.sampled_from(kinds))
    if kind.endswith("-port"):
        return {PREFIX + kind: str(draw(PORTS))}, {}
    if kind == "MASTER_PORT":
        return {}, {"MASTER_PORT": str(draw(PORTS))}
    if kind == "session":
        return {}, {"BACKENDAI_SESSION_ID": draw(st.from_regex(r"[a-f0-9-]{1,36}", fullmatch=True)
                                                .filter(lambda s: s != "sess-0123"))}
    if kind == "roles":  # main the chief, every other role a worker
        roles = ",".join(f"{r}:{'chief' if r == 'main' else 'worker'}" for r, _ in pairs)
        return {PREFIX + "tensorflow-roles": roles}, {}
    order = draw(st.permutations(others).filter(lambda o: list(o) != others))
    counts = dict(pairs)
    replicas = ",".join(f"{r}:{counts[r]}" for r in ["main", *order])
    return {}, {"BACKENDAI_CLUSTER_REPLICAS": replicas}


@given(session=sessions(), seed=st.integers(0, 2**32 - 1), data=st.data())
@SETTINGS
def test_one_job_wide_change_on_one_container_changes_only_its_digest(
    backendai_env, session, seed, data
) -> None:
    pairs, group_order = session
    rnd = random.Random(seed)
    names = [f"{role}{i}" for role, count in pairs for i in range(1, count + 1)]
    envs = {host: backendai_env(hosts_by_index(pairs, rnd), host, pairs, group_order=group_order)
            for host in names}
    before = digests(list(envs.values()))
    assert len(before) == 1
    host = data.draw(st.sampled_from(names))
    labels, changes = data.draw(job_wide_changes(pairs))
    after = digest({**envs[host], **changes}, {**ALL, **labels})
    assert after.split()[0] not in before
    assert after.split()[2] == host


@given(session=sessions(), seed=st.integers(0, 2**32 - 1), data=st.data())
@SETTINGS
def test_node_local_changes_on_one_container_keep_its_digest(
    backendai_env, session, seed, data
) -> None:
    pairs, group_order = session
    rnd = random.Random(seed)
    names = [f"{role}{i}" for role, count in pairs for i in range(1, count + 1)]
    envs = [backendai_env(hosts_by_index(pairs, rnd), host, pairs, group_order=group_order)
            for host in names]
    before = digests(envs)
    env = data.draw(st.sampled_from(envs))
    derivation = derive(env, ALL)
    assert derivation is not None
    own = {v.name: v.value for v in derivation.variables if v.scope == "node"}
    # the node's own values set by hand (a shell after the hook), TF_CONFIG re-spaced
    kept = data.draw(st.lists(st.sampled_from(sorted(own)), unique=True))
    changes = {name: own[name] for name in kept}
    if "TF_CONFIG" in changes:
        changes["TF_CONFIG"] = json.dumps(json.loads(changes["TF_CONFIG"]), indent=1)
    changes["CUDA_VISIBLE_DEVICES"] = data.draw(st.sampled_from(["0", "1,2", "GPU-1a2b"]))
    facts = data.draw(st.sampled_from([None, HostFacts(interfaces=("baimulti0",))]))
    assert digest({**env, **changes}, ALL, facts).split()[0] in before


# ------------------------------------------------- the frameworks label is a set, not a list


def test_the_frameworks_order_does_not_change_the_digest(backendai_env) -> None:
    env = backendai_env(HOSTS, "sub1")
    lines = {digest(env, {FW: ",".join(order)})
             for order in itertools.permutations(["pytorch", "tensorflow", "jax"])}
    assert lines == {digest(env, ALL)}
    derivation = derive(env, {FW: "JAX,pytorch,jax"})
    assert derivation is not None
    facts = render_digest(derivation.topology, derivation, "digest-facts")
    assert "label.frameworks: pytorch,jax\n" in facts
    assert digest(env, {FW: "jax,pytorch"}) != digest(env, ALL)
    assert digest(env, {FW: "jax,pytorch"}) == digest(env, {FW: "pytorch,jax"})
