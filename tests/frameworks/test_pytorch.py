"""PyTorch variables: MASTER_*, NODE_RANK, torchrun's PET_* defaults (contract section 6)."""

from __future__ import annotations

import os

import pytest

from derive_env.errors import TopologyError
from derive_env.frameworks import pytorch
from derive_env.frameworks.context import Context
from derive_env.labels import PREFIX
from derive_env.pipeline import derive
from derive_env.policy import ImagePolicy
from derive_env.sources.compose import topology_from

PER_PROCESS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "TORCHELASTIC_RUN_ID",
               "GROUP_RANK", "GROUP_WORLD_SIZE")
MODE = PREFIX + "pytorch-mode"
NPROC = PREFIX + "nproc-per-node"


def pytorch_vars(environ, labels) -> dict[str, str]:
    """The merged PyTorch variables (user-set ones carry the user's value)."""
    derivation = derive(environ, labels)
    assert derivation is not None
    return {v.name: v.value for v in derivation.variables if v.framework == "pytorch"}


def names_in_order(environ, labels) -> list[str]:
    derivation = derive(environ, labels)
    assert derivation is not None
    return [v.name for v in derivation.variables if v.framework == "pytorch"]


def test_torchrun_mode_values(backendai_env, opt_in) -> None:
    env = backendai_env(["sub1", "main1", "sub2"], "sub2")
    assert pytorch_vars(env, opt_in) == {
        "MASTER_ADDR": "main1",
        "MASTER_PORT": "29500",
        "NODE_RANK": "2",
        "PET_NNODES": "3",
        "PET_NODE_RANK": "2",
        "PET_MASTER_ADDR": "main1",
        "PET_MASTER_PORT": "29500",
    }
    assert names_in_order(env, opt_in) == [
        "MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "PET_NNODES", "PET_NODE_RANK",
        "PET_MASTER_ADDR", "PET_MASTER_PORT",
    ]


@pytest.mark.parametrize("host", ["main1", "sub1", "sub2"])
def test_torchrun_mode_sets_no_per_process_rank(backendai_env, opt_in, host: str) -> None:
    env = backendai_env(["sub2", "sub1", "main1"], host)
    derivation = derive({**env, "GPU_COUNT": "4"}, {**opt_in, MODE: "torchrun"})
    assert derivation is not None
    names = {v.name for v in derivation.variables}
    assert names.isdisjoint(PER_PROCESS)


def test_process_per_container_mode(backendai_env, opt_in) -> None:
    env = backendai_env(["sub1", "main1", "sub2"], "sub1")
    got = pytorch_vars(env, {**opt_in, MODE: "process-per-container"})
    assert got == {
        "MASTER_ADDR": "main1",
        "MASTER_PORT": "29500",
        "NODE_RANK": "1",
        "PET_NNODES": "3",
        "PET_NODE_RANK": "1",
        "PET_MASTER_ADDR": "main1",
        "PET_MASTER_PORT": "29500",
        "RANK": "1",
        "WORLD_SIZE": "3",
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1",
    }


def test_process_per_container_sets_no_torchelastic_id(backendai_env, opt_in) -> None:
    env = backendai_env(["main1", "sub1"], "sub1")
    got = pytorch_vars(env, {**opt_in, MODE: "process-per-container"})
    assert "TORCHELASTIC_RUN_ID" not in got


def test_single_container(opt_in) -> None:
    assert pytorch_vars({}, opt_in) == {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29500",
        "NODE_RANK": "0",
        "PET_NNODES": "1",
        "PET_NODE_RANK": "0",
        "PET_MASTER_ADDR": "127.0.0.1",
        "PET_MASTER_PORT": "29500",
    }


def test_single_container_backendai_size_one(backendai_env, opt_in) -> None:
    got = pytorch_vars(backendai_env(["main1"], "main1"), opt_in)
    assert (got["MASTER_ADDR"], got["PET_MASTER_ADDR"], got["PET_NNODES"]) == (
        "127.0.0.1", "127.0.0.1", "1")


@pytest.mark.parametrize(("labels", "extra", "nproc"), [
    ({NPROC: "4"}, {"GPU_COUNT": "8"}, "4"),
    ({NPROC: "2"}, {}, "2"),
    ({}, {"GPU_COUNT": "8"}, "8"),
    ({}, {"N_GPUS": "2"}, "2"),
    ({}, {"GPU_COUNT": "0"}, None),
    ({}, {}, None),
])
def test_nproc_per_node(backendai_env, opt_in, labels, extra, nproc) -> None:
    env = {**backendai_env(["main1", "sub1"], "sub1"), **extra}
    assert pytorch_vars(env, {**opt_in, **labels}).get("PET_NPROC_PER_NODE") == nproc


@pytest.mark.parametrize(("extra", "gpus"), [
    ({}, "GPU_COUNT unset"), ({"GPU_COUNT": "0"}, "GPU_COUNT is 0")])
def test_nproc_absent_is_explained(backendai_env, opt_in, extra, gpus) -> None:
    derivation = derive({**backendai_env(["main1", "sub1"], "main1"), **extra}, opt_in)
    assert derivation is not None
    assert (
        "PET_NPROC_PER_NODE not set, so torchrun starts 1 process per node: no nproc-per-node "
        f"label and no GPU count ({gpus}); to change: DERIVE_ENV_NPROC_PER_NODE=N (or --label "
        "ai.backend.distributed.nproc-per-node=N), or torchrun --nproc-per-node=N"
    ) in derivation.notes


def test_nproc_sources(backendai_env, opt_in) -> None:
    env = {**backendai_env(["main1", "sub1"], "sub1"), "GPU_COUNT": "8"}
    by_label = derive(env, {**opt_in, NPROC: "4"})
    by_gpus = derive(env, opt_in)
    assert by_label is not None and by_gpus is not None
    src = {v.name: v.provenance for v in by_label.variables}
    assert src["PET_NPROC_PER_NODE"] == "label ai.backend.distributed.nproc-per-node"
    src = {v.name: v.provenance for v in by_gpus.variables}
    assert src["PET_NPROC_PER_NODE"] == "GPU_COUNT: GPU count of this node"


def test_pytorch_module_directly(backendai_env) -> None:
    """The module reads only the Context (topology, policy, master)."""
    env = backendai_env(["sub2", "main1", "sub1"], "main1")
    topo = topology_from(env)
    policy = ImagePolicy.from_labels({PREFIX + "frameworks": "pytorch"})
    ctx = Context(topology=topo, policy=policy, environ=env)
    out = pytorch.derive(ctx)
    assert {v.name: v.value for v in out.variables}["NODE_RANK"] == "0"
    assert all(v.framework == "pytorch" for v in out.variables)
    assert not out.warnings


@pytest.mark.frameworks
def test_torchrun_reads_pet_defaults(backendai_env, opt_in, monkeypatch) -> None:
    """torchrun's own parser takes the derived PET_* values as its option defaults."""
    run = pytest.importorskip("torch.distributed.run")
    env = {**backendai_env(["sub1", "main1", "sub2"], "sub2"), "GPU_COUNT": "4"}
    derivation = derive(env, opt_in)
    assert derivation is not None
    for name in list(os.environ):
        if name.startswith("PET_"):
            monkeypatch.delenv(name)
    for name, value in derivation.changes().items():
        monkeypatch.setenv(name, value)
    args = run.parse_args(["train.py"])
    assert (args.nnodes, args.node_rank, args.master_addr, args.master_port) == (
        "3", 2, "main1", 29500)
    assert args.nproc_per_node == "4"


# --- under torchrun: nothing of torchrun's added or checked (issue 15 item 1) ----------------

#: A worker of ``torchrun --nnodes=1:4 --nproc-per-node=1`` in a Kubeflow PyTorchJob pod (the
#: agent's PET_* inherited: kubeflow/trainer#3277), on the second of 2 nodes.
ELASTIC_WORKER = {
    "GROUP_RANK": "1", "GROUP_WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
    "MASTER_ADDR": "node-a", "MASTER_PORT": "26003", "RANK": "1", "ROLE_NAME": "default",
    "ROLE_RANK": "1", "ROLE_WORLD_SIZE": "2", "TORCHELASTIC_RUN_ID": "bert",
    "TORCHELASTIC_USE_AGENT_STORE": "False", "WORLD_SIZE": "2", "PET_NNODES": "1:4",
    "PET_NPROC_PER_NODE": "1", "PET_RDZV_BACKEND": "c10d"}


@pytest.mark.parametrize("pet", [{"PET_NNODES": "1:4"}, {"PET_NNODES": "1:4",
                                                         "PET_NODE_RANK": "0"}, {}])
def test_a_torchrun_worker_with_one_worker_per_node_gets_no_pet(opt_in, pet) -> None:
    """Was ``PET_NNODES='1:4': expected '2'`` (elastic), and PET_* added without it; the
    README says a launched process gets none."""
    env = {k: v for k, v in ELASTIC_WORKER.items() if not k.startswith("PET_")} | pet
    derivation = derive(env, opt_in)
    assert derivation is not None
    assert pytorch_vars(env, opt_in) == {
        "MASTER_ADDR": "node-a", "MASTER_PORT": "26003", "RANK": "1", "LOCAL_RANK": "0",
        "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "1", "NODE_RANK": "1"}
    assert derivation.changes() == {  # torchrun's own values as they are
        "NODE_RANK": "1", "DERIVE_ENV_RUN_ID": "6a8ef988ef604353"}
    assert derivation.topology.per_process


def test_torchrun_mode_speaks_of_nodes_not_world_size(backendai_env, opt_in) -> None:
    """WORLD_SIZE=6, the real world size of 3 nodes of 2 GPUs: a container-level value can
    only describe one process per node, and the message says so in nodes."""
    env = {**backendai_env(["main1", "sub1", "sub2"], "sub1"), "WORLD_SIZE": "6"}
    with pytest.raises(TopologyError) as caught:
        derive(env, opt_in)
    assert str(caught.value) == (
        "WORLD_SIZE='6': expected '3', the number of nodes, one process per node (torchrun "
        "mode: not set, torchrun sets it for each worker it starts; a value for the whole "
        "container can only describe one process on each node): the job has 3 node(s), so "
        "this value sizes it wrongly on every node (each would train alone or wait for "
        "processes that never come). Remove WORLD_SIZE where it is set (the image's ENV, a "
        "variable the cluster manager copies into every node, a Kubernetes pod spec, a "
        "container hook such as enroot's, an env file; derive-env does not set it: the "
        "launcher sets it per process), or set label ai.backend.distributed.on-error=warn to "
        "run the command with the environment unchanged")


NPROC_EXPECTED = (
    "expected a number of processes per node >= 1, or cpu, gpu, xpu or auto, as torchrun "
    "reads --nproc-per-node (torch/distributed/run.py determine_local_world_size); set it to "
    "one of those, or remove PET_NPROC_PER_NODE from the job's environment (derive-env "
    "derives it from the GPU count or the label ai.backend.distributed.nproc-per-node)")


@pytest.mark.parametrize("value", ["0", "-1", "2 gpus", "1.5", "٣x", "9" * 5000])
def test_user_nproc_per_node_torchrun_cannot_read_is_an_error(backendai_env, opt_in,
                                                              value) -> None:
    """Issue 15, item 7: a user PET_NPROC_PER_NODE was kept unchecked; torchrun then failed
    on every node (run.py: Unsupported nproc_per_node value; api.py: local_world_size <= 0)."""
    from derive_env.errors import TopologyError, shorten

    env = {**backendai_env(["main1", "sub1"], "sub1"), "PET_NPROC_PER_NODE": value}
    with pytest.raises(TopologyError) as info:
        derive(env, opt_in)
    assert str(info.value) == f"PET_NPROC_PER_NODE={shorten(value)!r}: {NPROC_EXPECTED}"


@pytest.mark.parametrize("value", ["4", " 4", "+2", "cpu", "gpu", "xpu", "auto"])
def test_user_nproc_per_node_torchrun_reads_is_kept_silently(backendai_env, opt_in,
                                                             value) -> None:
    env = {**backendai_env(["main1", "sub1"], "sub1"), "GPU_COUNT": "2",
           "PET_NPROC_PER_NODE": value}
    derivation = derive(env, opt_in)
    assert derivation.warnings == ()
    assert next(v for v in derivation.variables if v.name == "PET_NPROC_PER_NODE").kept


def test_user_nproc_per_node_unknown_word_is_a_warning(backendai_env, opt_in) -> None:
    """A custom device backend's name (torch_npu's npu) is what torchrun may read: kept."""
    env = {**backendai_env(["main1", "sub1"], "sub1"), "PET_NPROC_PER_NODE": "npu"}
    assert derive(env, opt_in).warnings == (
        "PET_NPROC_PER_NODE='npu' is not a number nor one of cpu, gpu, xpu, auto: kept, for "
        "torchrun to read as the name of a custom device backend (torch_npu's npu); torchrun "
        "stops with \"Unsupported nproc_per_node value\" if it is not one",)


def test_a_managers_own_rendezvous_gets_no_pet_added() -> None:
    """PET_RDZV_ENDPOINT among the topology's preset (an elastic Kubeflow PyTorchJob): the
    manager configured torchrun's own rendezvous; no PET_* is added beside its own, even
    with the nproc-per-node label (torchrun's authority), and a note says so."""
    environ = {"PET_RDZV_ENDPOINT": "el-worker-0:23456", "PET_RDZV_BACKEND": "c10d",
               "PET_NNODES": "4", "HOSTNAME": "el-worker-1",
               "KUBERNETES_SERVICE_HOST": "10.96.0.1"}
    labels = {PREFIX + "frameworks": "pytorch", PREFIX + "nproc-per-node": "4"}
    derivation = derive(environ, labels)
    assert [v.name for v in derivation.variables if v.name.startswith("PET_")] == [
        "PET_NNODES"]  # the manager's, kept
    assert derivation.changes() == {"MASTER_ADDR": "el-worker-0",
                                    "MASTER_PORT": derivation.changes()["MASTER_PORT"],
                                    "NODE_RANK": "1", "DERIVE_ENV_RUN_ID": "17502c6c61106dd2"}
    assert ("torchrun's own rendezvous (PET_RDZV_ENDPOINT, set by the manager): no PET_* "
            "added, the manager's kept as they are") in derivation.notes
