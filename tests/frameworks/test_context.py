"""The framework kit (derive_env.frameworks.context): the master, the frameworks' ports, the
manager's port policy per framework, node rank and count, and the variable maker."""

from __future__ import annotations

import pytest

from derive_env import ports
from derive_env.errors import LabelError, TopologyError
from derive_env.frameworks.context import (
    FOLLOWS,
    INTEGER,
    NODE,
    SHARED,
    Context,
    DerivedVariable,
    HostFacts,
    framework_port,
    master_of,
    node_rank_of,
    nodes_source,
    port_label,
    variable,
)
from derive_env.labels import PREFIX
from derive_env.pipeline import derive
from derive_env.policy import ImagePolicy
from derive_env.topology import ClusterTopology, Inputs, Node, ProcessLayout

FW = PREFIX + "frameworks"
SLURM_JOB = ("slurm", "4242", "0")


def topology(*hosts: str, node_rank: int = 0, **fields) -> ClusterTopology:
    return ClusterTopology(source="test", nodes=tuple(Node(host=h) for h in hosts),
                           node_rank=node_rank, **fields)


def pytorch_vars(environ, labels) -> dict[str, str]:
    """The merged PyTorch variables (user-set ones carry the user's value)."""
    derivation = derive(environ, labels)
    assert derivation is not None
    return {v.name: v.value for v in derivation.variables if v.framework == "pytorch"}


def context(topo: ClusterTopology, frameworks: str, environ=None, facts=None,
            **labels: str) -> Context:
    policy = ImagePolicy.from_labels(
        {FW: frameworks, **{PREFIX + k.replace("_", "-"): v for k, v in labels.items()}})
    return Context(topo, policy, Inputs(environ or {}, {}, facts=facts))


# --- master_of --------------------------------------------------------------------------------


@pytest.mark.parametrize(("extra", "labels", "port", "source"), [
    ({}, {}, "29500", "default (29500, PyTorch's)"),
    ({}, {PREFIX + "master-port": "23456"}, "23456", "label ai.backend.distributed.master-port"),
    ({"BACKENDAI_DIST_MASTER_PORT": "34567"}, {PREFIX + "master-port": "23456"}, "34567",
     "BACKENDAI_DIST_MASTER_PORT"),
])
def test_master_port_precedence(backendai_env, opt_in, extra, labels, port, source) -> None:
    env = {**backendai_env(["main1", "sub1"], "sub1"), **extra}
    derivation = derive(env, {**opt_in, **labels})
    assert derivation is not None
    got = {v.name: v for v in derivation.variables}
    assert got["MASTER_PORT"].value == port
    assert got["PET_MASTER_PORT"].value == port
    assert got["MASTER_PORT"].provenance == source
    assert got["PET_MASTER_PORT"].provenance == f"same as MASTER_PORT: {source}"


def test_user_master_port_beats_everything(backendai_env, opt_in) -> None:
    env = {**backendai_env(["main1", "sub1"], "sub1"), "MASTER_PORT": "45678",
           "BACKENDAI_DIST_MASTER_PORT": "34567"}
    derivation = derive(env, {**opt_in, PREFIX + "master-port": "23456"})
    assert derivation is not None
    got = {v.name: v for v in derivation.variables}
    assert (got["MASTER_PORT"].value, got["MASTER_PORT"].kept) == ("45678", True)
    assert got["MASTER_PORT"].derived == "34567"  # what the topology alone gives
    assert got["PET_MASTER_PORT"].value == "45678"
    assert got["PET_MASTER_PORT"].provenance == "same as MASTER_PORT: MASTER_PORT (already set)"


def test_user_master_addr_and_port_kept_and_fed(backendai_env) -> None:
    env = {**backendai_env(["sub1", "main1"], "sub1"),
           "MASTER_ADDR": "10.1.2.3", "MASTER_PORT": "1111"}
    derivation = derive(env, {PREFIX + "frameworks": "pytorch,jax"})
    assert derivation is not None
    got = {v.name: v for v in derivation.variables}
    assert got["MASTER_ADDR"].kept and got["MASTER_ADDR"].value == "10.1.2.3"
    assert got["MASTER_ADDR"].derived == "main1"  # reported as overridden
    assert got["MASTER_PORT"].kept and got["MASTER_PORT"].value == "1111"
    assert got["MASTER_PORT"].derived == "29500"
    assert got["PET_MASTER_ADDR"].value == "10.1.2.3"
    assert not got["PET_MASTER_ADDR"].kept
    assert got["PET_MASTER_PORT"].value == "1111"
    assert got["JAX_COORDINATOR_ADDRESS"].value == "10.1.2.3:1234"
    changes = derivation.changes()
    assert "MASTER_ADDR" not in changes and "MASTER_PORT" not in changes
    assert changes["PET_MASTER_ADDR"] == "10.1.2.3"
    assert changes["PET_MASTER_PORT"] == "1111"


def test_user_master_addr_host_name_fed(backendai_env, opt_in) -> None:
    env = {**backendai_env(["main1", "sub1"], "sub1"), "MASTER_ADDR": "rdzv.example.org"}
    got = pytorch_vars(env, opt_in)
    assert got["MASTER_ADDR"] == got["PET_MASTER_ADDR"] == "rdzv.example.org"
    assert got["MASTER_PORT"] == "29500"


def test_empty_user_master_addr_counts_as_unset(backendai_env, opt_in) -> None:
    env = {**backendai_env(["sub1", "main1"], "sub1"), "MASTER_ADDR": "", "MASTER_PORT": ""}
    derivation = derive(env, opt_in)
    assert derivation is not None
    assert derivation.changes()["MASTER_ADDR"] == "main1"
    assert derivation.changes()["MASTER_PORT"] == "29500"


@pytest.mark.parametrize("value", ["abc", "0", "70000", " 29500", "29500 ", "-1", "0x10"])
def test_malformed_user_master_port(backendai_env, opt_in, value: str) -> None:
    env = {**backendai_env(["main1", "sub1"], "sub1"), "MASTER_PORT": value}
    with pytest.raises(TopologyError) as info:
        derive(env, opt_in)
    assert str(info.value) == f"MASTER_PORT={value!r}: expected a port number 1-65535"
    assert info.value.exit_code == 3


@pytest.mark.parametrize(("value", "expected"), [
    ("main_1", "a host name (letters, digits, '-' and '.') or an IP address"),
    ("main1:29500", "a host name or an IP address (IPv6 without brackets, no port)"),
    ("[2001:db8::1]", "a host name or an IP address (IPv6 without brackets, no port)"),
    ("fe80::1%eth0",
     "a host name or an IP address without a zone; link-local IPv6 addresses with a zone "
     "(fe80::...%eth0) cannot be carried in host:port values, use a global or unique-local "
     "address or a host name"),
])
def test_malformed_user_master_addr(backendai_env, opt_in, value: str, expected: str) -> None:
    env = {**backendai_env(["main1", "sub1"], "sub1"), "MASTER_ADDR": value}
    with pytest.raises(TopologyError) as info:
        derive(env, opt_in)
    assert str(info.value) == f"MASTER_ADDR={value!r}: expected {expected}"


@pytest.mark.parametrize("addr", ["fe80::1%eth0", "fe80::1"])
def test_link_local_user_master_addr_rejected(addr: str) -> None:
    topo = topology("2001:db8::1", "2001:db8::2", node_rank=1)
    policy = ImagePolicy.from_labels({PREFIX + "frameworks": "tensorflow"})
    with pytest.raises(TopologyError) as info:
        master_of(topo, policy, {"MASTER_ADDR": addr})
    message = str(info.value)
    assert message.startswith(f"MASTER_ADDR={addr!r}: expected a host name or a")
    assert "link-local" in message
    assert "cannot be carried in host:port values" in message



def test_master_of_a_single_container_is_loopback() -> None:
    master = master_of(topology("main1"), ImagePolicy.from_labels({FW: "pytorch"}), {})
    assert (master.addr, master.addr_source, master.port, master.port_source) == (
        "127.0.0.1", "single node: loopback", 29500, "default (29500, PyTorch's)")


def test_master_of_without_the_host_of_rank_0_names_what_to_set() -> None:
    topo = ClusterTopology(source="test", nodes=(), node_rank=0, node_count=2,
                           missing="set SLURM_STEP_NODELIST")
    with pytest.raises(TopologyError) as info:
        master_of(topo, ImagePolicy.from_labels({FW: "pytorch"}), {})
    assert str(info.value) == (
        "MASTER_ADDR='': expected the host of rank 0 (it also gives JAX's coordinator): set "
        "SLURM_STEP_NODELIST")
    master = master_of(topo, ImagePolicy.from_labels({FW: "pytorch"}), {"MASTER_ADDR": "n1"})
    assert (master.addr, master.derived_addr, master.derived_addr_source) == (
        "n1", "n1", "MASTER_ADDR (already set; no source states the host of rank 0)")


# --- framework_port and the ports of one job (contract section 10) ---------------------------


def test_framework_port_label_then_job_then_default() -> None:
    plain = topology("main1", "sub1")
    assert framework_port(context(plain, "jax"), "jax") == (1234, "default (1234)")
    assert framework_port(context(plain, "jax", jax_port="4321"), "jax") == (
        4321, "label ai.backend.distributed.jax-port")
    job = topology("main1", "sub1", job=SLURM_JOB)
    assert framework_port(context(job, "jax"), "jax") == (
        62106, "derived from slurm job 4242 step 0 (hash into 61000-65535: docs/ports.md)")
    assert framework_port(context(job, "jax", jax_port="4321"), "jax")[0] == 4321


def test_two_labels_on_one_port_are_an_error_naming_both() -> None:
    ctx = context(topology("main1", "sub1"), "pytorch,tensorflow,jax", master_port="3000",
                  jax_port="3000")
    with pytest.raises(LabelError) as info:
        framework_port(ctx, "jax")
    assert str(info.value) == (
        "the JAX coordinator's port 3000 (label ai.backend.distributed.jax-port) and the "
        "master port 3000 (label ai.backend.distributed.master-port) both hold port 3000 on "
        "rank 0's host, where only one server can listen: set label "
        "ai.backend.distributed.jax-port or label ai.backend.distributed.master-port to "
        "another port")


def test_a_label_on_a_set_master_port_is_an_error_naming_the_label() -> None:
    store = topology("main1", "sub1", preset=frozenset({"MASTER_PORT"}), master_port=29400,
                     inputs={"master_port": ("MASTER_PORT",)})
    with pytest.raises(TopologyError) as info:
        framework_port(context(store, "jax", jax_port="29400"), "jax")
    assert str(info.value) == (
        "the JAX coordinator's port 29400 (label ai.backend.distributed.jax-port) and the "
        "master port 29400 (MASTER_PORT) both hold port 29400 on rank 0's host, where only "
        "one server can listen: set label ai.backend.distributed.jax-port to another port")
    user = context(topology("main1", "sub1"), "pytorch,tensorflow",
                   {"MASTER_PORT": "3000"}, tensorflow_port="3000")
    with pytest.raises(TopologyError, match=r"^TensorFlow's port 3000 \(label .*\) and the "
                       r"master port 3000 \(MASTER_PORT \(already set\)\) both hold"):
        framework_port(user, "tensorflow")


def test_a_derived_port_moves_clear_of_a_label() -> None:
    """The default moves, the label stays: no error for a port nobody chose."""
    ctx = context(topology("main1", "sub1"), "pytorch,tensorflow", tensorflow_port="29500")
    assert framework_port(ctx, "tensorflow") == (
        29500, "label ai.backend.distributed.tensorflow-port")
    assert ctx.master.port == 29501
    assert ctx.master.port_source == (
        "default (29500, PyTorch's); moved from 29500 to 29501, clear of the job's other "
        "ports (29500)")
    assert ctx.master.derived_port == 29501
    # Without PyTorch (and no launcher's store) nothing serves the master port.
    alone = context(topology("main1", "sub1"), "tensorflow", tensorflow_port="29500")
    assert framework_port(alone, "tensorflow") == (
        29500, "label ai.backend.distributed.tensorflow-port")


def test_a_hashed_port_moves_within_the_window_on_a_set_master_port() -> None:
    """torchrun's store on the port JAX's hash gives: JAX moves up, wrapping at 65535."""
    job = ("torchrun", "none", "29400")
    (jax_port,) = [port for name, port in zip(
        ("pytorch", "tensorflow", "jax"), ports.job_ports(*job), strict=True) if name == "jax"]
    store = topology("main1", "sub1", job=job, preset=frozenset({"MASTER_PORT"}),
                     master_port=jax_port, inputs={"master_port": ("MASTER_PORT",)})
    port, source = framework_port(context(store, "jax"), "jax")
    assert port == (jax_port + 1 if jax_port < 65535 else 61000)
    assert source.endswith(
        f"; moved from {jax_port} to {port}, clear of the job's other ports ({jax_port})")


def test_the_ports_of_an_image_without_a_conflict() -> None:
    ctx = context(topology("main1", "sub1"), "pytorch,tensorflow,jax")
    assert ctx.ports == {"pytorch": (29500, "default (29500, PyTorch's)"),
                         "tensorflow": (2222, "default (2222)"),
                         "jax": (1234, "default (1234)")}
    # A single container builds no TF_CONFIG: TensorFlow serves nothing.
    assert list(context(topology("main1"), "tensorflow,jax").ports) == ["jax"]


def test_port_label() -> None:
    assert port_label("pytorch") == "ai.backend.distributed.master-port"
    assert port_label("jax") == "ai.backend.distributed.jax-port"


# --- ports.job_ports_of: the manager's port policy per framework -----------------------------


def test_job_ports_none_without_job_or_reserved_ports() -> None:
    assert ports.job_ports_of(topology("main1", "sub1")) is None
    assert context(topology("main1", "sub1"), "pytorch").job_ports is None


def test_job_ports_reserved_first_then_derived() -> None:
    topo = topology("main1", "sub1", job=SLURM_JOB, reserved_ports=(12001, 12002),
                    inputs={"ports": ("SLURM_STEP_RESV_PORTS",)})
    ports_ = ports.job_ports_of(topo)
    assert ports_ is not None and list(ports_) == ["pytorch", "tensorflow", "jax"]
    assert ports_["pytorch"] == (
        12001, "SLURM_STEP_RESV_PORTS: port 1 reserved for the step", "reserved")
    assert ports_["tensorflow"] == (
        12002, "SLURM_STEP_RESV_PORTS: port 2 reserved for the step", "reserved")
    assert ports_["jax"] == (
        62104,
        "derived from slurm job 4242 step 0 (hash into 61000-65535: docs/ports.md)", "hashed")


@pytest.mark.parametrize(("text", "warned"), [
    ("32768\t60999\n", None),                    # Linux's default: below the window
    ("1024\t40000\n", None),
    (None, None),                                 # unreadable: nothing said
    ("32768\t65535\n", "this node's ephemeral port range 32768-65535 "
     "(net.ipv4.ip_local_port_range) overlaps the window of derived ports 61000-65535, and "
     "holds this job's port(s) 62104, 62105, 62106: a connection of this node's own may hold "
     "a derived port; the bind then fails with a clear error (address already in use) rather "
     "than a hang. Lower the range's upper bound below 61000 on every node, reserve ports for "
     "the step (srun --resv-ports), or set the ports by label or variable"),
    ("64000 65000\n", "this node's ephemeral port range 64000-65000 "
     "(net.ipv4.ip_local_port_range) overlaps the window of derived ports 61000-65535: a "
     "connection of this node's own may hold a derived port; the bind then fails with a clear "
     "error (address already in use) rather than a hang. Lower the range's upper bound below "
     "61000 on every node, reserve ports for the step (srun --resv-ports), or set the ports "
     "by label or variable"),
    ("garbage", None),
])
def test_the_ports_are_the_same_whatever_the_sysctl_and_an_overlap_is_warned(
        text, warned) -> None:
    read: list[int] = []

    def port_range() -> str | None:
        read.append(1)
        return text

    ctx = context(topology("main1", "sub1", job=SLURM_JOB), "pytorch,tensorflow,jax",
                  facts=HostFacts(port_range=port_range))
    assert {k: v[0] for k, v in ctx.ports.items()} == {
        "pytorch": 62104, "tensorflow": 62105, "jax": 62106}
    assert read == [1]
    if text == "garbage":
        assert ctx.warnings == [
            "net.ipv4.ip_local_port_range='garbage': expected two port numbers 'low high', "
            "not 'garbage'; cannot tell whether this node's ephemeral ports overlap the "
            "derived ports 61000-65535"]
    elif warned is None:
        assert ctx.warnings == []
    else:
        assert ctx.warnings == [warned]


def test_no_sysctl_is_read_without_a_hashed_port(backendai_env) -> None:
    def port_range() -> str | None:
        raise AssertionError("read")

    ctx = context(topology("main1", "sub1"), "pytorch,tensorflow,jax",
                  facts=HostFacts(port_range=port_range))
    assert ctx.ports["jax"] == (1234, "default (1234)")
    labelled = context(topology("main1", "sub1", job=SLURM_JOB), "jax", jax_port="4000",
                       facts=HostFacts(port_range=port_range))
    assert labelled.ports["jax"][0] == 4000


# --- node rank and count, host facts ----------------------------------------------------------


def test_node_rank_of() -> None:
    assert node_rank_of(topology("main1", "sub1", node_rank=1, inputs={
        "node_rank": ("SLURM_NODEID",)})) == (1, "SLURM_NODEID")
    assert node_rank_of(topology("main1")) == (0, "single node")
    layout = ProcessLayout(rank=1, local_rank=0, world_size=2, local_world_size=1)
    one_each = ClusterTopology(source="test", nodes=(Node(host="a"), Node(host="b")),
                               node_rank=None, processes=layout,
                               inputs={"processes": ("OMPI_COMM_WORLD_RANK",)})
    assert node_rank_of(one_each) == (1, "OMPI_COMM_WORLD_RANK: rank (one process per node)")
    unknown = ClusterTopology(source="test", nodes=(Node(host="a"), Node(host="b")),
                              node_rank=None, missing="set SLURM_NODEID")
    with pytest.raises(TopologyError, match=r"^no source states this node's rank: set SLURM"):
        node_rank_of(unknown)


def test_nodes_source() -> None:
    assert nodes_source(topology("main1")) == "single node"
    assert nodes_source(topology("main1", "sub1", inputs={"nodes": ("HOSTS",)})) == "HOSTS"
    counted = ClusterTopology(source="test", nodes=(), node_rank=0, node_count=3,
                              inputs={"num_nodes": ("GROUP_WORLD_SIZE",)})
    assert nodes_source(counted) == "GROUP_WORLD_SIZE"


def test_host_facts_are_read_once_and_only_when_asked() -> None:
    calls = []

    def reader() -> HostFacts:
        calls.append(1)
        return HostFacts(hostname="sub1")

    ctx = context(topology("main1", "sub1"), "pytorch", facts=reader)
    assert calls == []
    assert ctx.facts is not None and ctx.facts.hostname == "sub1" and calls == [1]
    assert context(topology("main1"), "pytorch").facts is None


# --- the variable maker -----------------------------------------------------------------------


def test_a_variable_without_a_scope_cannot_be_built() -> None:
    var = variable("pytorch")
    with pytest.raises(TypeError, match="scope"):
        var("NODE_RANK", 1, "test")
    with pytest.raises(TypeError, match="a field the maker does not take"):
        var("NODE_RANK", 1, "test", scope=SHARED, kept=True)  # the merge's, not the maker's
    with pytest.raises(TypeError, match="scope"):
        DerivedVariable(name="NODE_RANK", value="1", provenance="test",  # type: ignore[call-arg]
                        framework="pytorch")
    with pytest.raises(ValueError, match="unknown scope"):
        var("NODE_RANK", 1, "test", scope="per-node")
    with pytest.raises(ValueError, match="unknown scope 'node' or comparison 'text'"):
        var("NODE_RANK", 1, "test", scope=NODE, compare="text", what="x")
    with pytest.raises(ValueError, match="needs what the variable is"):
        var("NODE_RANK", 1, "test", scope=NODE)
    with pytest.raises(ValueError, match="a leader is given exactly for scope 'follows'"):
        var("PET_MASTER_ADDR", "main1", "test", scope=FOLLOWS)
    with pytest.raises(ValueError, match="a leader is given exactly for scope 'follows'"):
        var("MASTER_ADDR", "main1", "test", scope=SHARED, leader="MASTER_ADDR")
    built = var("NODE_RANK", 1, "test", scope=NODE, what="this node's node rank")
    assert built == DerivedVariable("NODE_RANK", "1", "test", "pytorch", NODE, INTEGER,
                                    "this node's node rank")
