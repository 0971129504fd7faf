"""The merge (derive_env.merge): user-set values (contract section 6), and other launchers'
topologies.

merge / changes: user-set values win, empty counts as unset. A cluster manager copies the
session's user-defined variables into every container, so a user-set value is the same on
every node: values that are the same on every node win, values that identify a node or size
the job must equal the derived value, each judged by the scope its framework gave it. And a
launcher derive-env has no source for (srun, mpirun, torchrun, ...) is refused rather than
described as a job of one process.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from derive_env.errors import DeriveEnvError, TopologyError
from derive_env.frameworks.context import (
    ADDRESS,
    COUNT_RANGE,
    FOLLOWS,
    HOST,
    INTEGER,
    JOB,
    JSON,
    NODE,
    SCOPES,
    SHARED,
    DerivedVariable,
)
from derive_env.hosts import host_port
from derive_env.labels import PREFIX
from derive_env.merge import changes, merge, same_value
from derive_env.pipeline import derive
from helpers import SRUN_TASK_3

ALL = {PREFIX + "frameworks": "pytorch,tensorflow,jax"}
PPC = {**ALL, PREFIX + "pytorch-mode": "process-per-container"}
HOSTS = ["sub1", "main1", "sub2"]  # HOSTS order of the session; canonical: main1, sub1, sub2
WARN_FIX = ("or set label ai.backend.distributed.on-error=warn to run the command with the "
            "environment unchanged")
#: Where a job-wide value comes from, as the messages say it (no manager assumed).
WHERE = ("the image's ENV, a variable the cluster manager copies into every node, a "
         "Kubernetes pod spec, a container hook such as enroot's, an env file")
#: The variables that size the job or identify the node (scope JOB or NODE): a user-set value
#: must equal the derived one (the property's oracle; a test keeps it equal to the scopes).
IDENTITY = frozenset({
    "NODE_RANK", "PET_NODE_RANK", "RANK", "JAX_PROCESS_ID", "TF_CONFIG", "PET_NNODES",
    "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "JAX_NUM_PROCESSES", "JAX_LOCAL_DEVICE_IDS",
})


def session(backendai_env, host: str, **user: str) -> dict[str, str]:
    return {**backendai_env(HOSTS, host), **user}


def error(environ: dict[str, str], labels: dict[str, str] = ALL) -> str:
    with pytest.raises(TopologyError) as info:
        derive(environ, labels)
    assert info.value.exit_code == 3
    return str(info.value)


# --- merge and changes ----------------------------------------------------------------------


def var(name: str, value: str) -> DerivedVariable:
    return DerivedVariable(name=name, value=value, provenance="test", framework="pytorch",
                           scope=NODE if name == "NODE_RANK" else SHARED)


DERIVED = [var("MASTER_ADDR", "main1"), var("MASTER_PORT", "29500"), var("NODE_RANK", "2")]


def test_nothing_set_nothing_kept() -> None:
    merged = merge({"PATH": "/bin"}, DERIVED)
    assert merged == DERIVED
    assert changes(merged) == {"MASTER_ADDR": "main1", "MASTER_PORT": "29500", "NODE_RANK": "2"}


def test_user_value_kept_with_derived_recorded() -> None:
    merged = merge({"MASTER_ADDR": "10.0.0.9"}, DERIVED)
    assert merged[0] == DerivedVariable(
        name="MASTER_ADDR", value="10.0.0.9", provenance="test", framework="pytorch",
        scope=SHARED, kept=True, derived="main1",
    )
    assert merged[1:] == DERIVED[1:]
    assert changes(merged) == {"MASTER_PORT": "29500", "NODE_RANK": "2"}


def test_identical_user_value_kept() -> None:
    merged = merge({"NODE_RANK": "2"}, DERIVED)
    assert merged[2].kept
    assert (merged[2].value, merged[2].derived) == ("2", "2")
    assert "NODE_RANK" not in changes(merged)


def test_empty_user_value_counts_as_unset() -> None:
    merged = merge({"MASTER_ADDR": "", "MASTER_PORT": ""}, DERIVED)
    assert merged == DERIVED
    assert changes(merged)["MASTER_ADDR"] == "main1"


def test_blank_user_value_is_a_value() -> None:
    merged = merge({"NODE_RANK": " "}, DERIVED)
    assert merged[2].kept and merged[2].value == " "


def test_order_preserved_and_inputs_untouched() -> None:
    environ = {"MASTER_PORT": "1"}
    merged = merge(environ, DERIVED)
    assert [v.name for v in merged] == ["MASTER_ADDR", "MASTER_PORT", "NODE_RANK"]
    assert environ == {"MASTER_PORT": "1"}
    assert DERIVED[1].value == "29500" and not DERIVED[1].kept


def test_empty() -> None:
    assert merge({}, []) == []
    assert changes([]) == {}


# --- item 1: identity variables --------------------------------------------------------------


def test_session_wide_node_rank_zero_fails_on_every_other_node(backendai_env) -> None:
    # pytorch/pytorch#76367: NODE_RANK=0 PET_NODE_RANK=0 set for the session.
    user = {"NODE_RANK": "0", "PET_NODE_RANK": "0"}
    for host, rank in (("sub1", 1), ("sub2", 2)):
        assert error(session(backendai_env, host, **user)) == (
            f"NODE_RANK='0': expected '{rank}', this node's node rank "
            f"(position of BACKENDAI_CLUSTER_HOST={host} in the canonical order): a value "
            "set once for the whole job reaches every node alike, so it is right on at most "
            "one node (two nodes would claim the same rank). Remove NODE_RANK where it is set "
            f"({WHERE}; derive-env derives it on every node), " + WARN_FIX
        )
    # Node rank 0 keeps it (it is its value), silently: after Backend.AI's hook every derived
    # value is in the environment of a terminal that runs derive-env again.
    derivation = derive(session(backendai_env, "main1", **user), ALL)
    kept = {v.name: (v.value, v.derived) for v in derivation.variables if v.kept}
    assert kept == {"NODE_RANK": ("0", "0"), "PET_NODE_RANK": ("0", "0")}
    assert derivation.warnings == ()
    assert "NODE_RANK" not in derivation.changes()


def test_running_again_after_the_hook_keeps_everything_silently(backendai_env) -> None:
    for host in HOSTS:
        env = session(backendai_env, host)
        first = derive(env, PPC)
        again = derive({**env, **first.changes()}, PPC)
        assert again.changes() == {}
        assert again.warnings == ()
        assert all(v.kept and v.value == v.derived for v in again.variables)


@pytest.mark.parametrize(("user", "name", "expected", "what"), [
    ({"PET_NNODES": "1"}, "PET_NNODES", "3", "the number of nodes"),
    ({"WORLD_SIZE": "1", "RANK": "0"}, "WORLD_SIZE", "3",
     "the number of nodes, one process per node"),
    ({"JAX_NUM_PROCESSES": "1", "JAX_PROCESS_ID": "0"}, "JAX_NUM_PROCESSES", "3",
     "the number of JAX processes, one per node"),
    ({"LOCAL_WORLD_SIZE": "2"}, "LOCAL_WORLD_SIZE", "1",
     "the number of processes per node, one"),
])
def test_a_job_of_one_is_refused_on_every_node(backendai_env, user, name, expected, what) -> None:
    for host in ("main1", "sub1", "sub2"):
        message = error(session(backendai_env, host, **user), PPC)
        assert message.startswith(f"{name}={user[name]!r}: expected '{expected}', {what} (")
        assert message.endswith(
            "): the job has 3 node(s), so this value sizes it wrongly on every node (each "
            "would train alone or wait for processes that never come). Remove "
            f"{name} where it is set ({WHERE}; derive-env derives it on every node), " + WARN_FIX
        )


def test_stale_one_host_tf_config_is_refused(backendai_env) -> None:
    stale = '{"cluster":{"worker":["localhost:2222"]},"task":{"type":"worker","index":0}}'
    assert error(session(backendai_env, "sub1", TF_CONFIG=stale)) == (
        f"TF_CONFIG={stale!r}: expected "
        '\'{"cluster":{"worker":["main1:2222","sub1:2222","sub2:2222"]},"task":{"type":"worker",'
        '"index":1}}\', this node\'s TF_CONFIG (its cluster and task differ): a value set '
        "once for the whole job reaches every node alike, so it is right on at most one node. "
        f"Remove TF_CONFIG where it is set ({WHERE}; derive-env derives it on every node), "
        + WARN_FIX
    )


def test_tf_config_is_compared_as_data(backendai_env) -> None:
    same = json.dumps({"task": {"index": 1, "type": "worker"},
                       "cluster": {"worker": ["main1:2222", "sub1:2222", "sub2:2222"]}}, indent=2)
    derivation = derive(session(backendai_env, "sub1", TF_CONFIG=same), ALL)
    tf = next(v for v in derivation.variables if v.name == "TF_CONFIG")
    assert (tf.kept, tf.value) == (True, same)
    assert "TF_CONFIG" not in derivation.changes()
    broken = error(session(backendai_env, "sub1", TF_CONFIG="{not json"))
    assert "this node's TF_CONFIG (it is not a JSON object): " in broken


TF_DERIVED = '{"cluster":{"worker":["a:1","b:1"]},"task":{"type":"worker","index":1}}'


@pytest.mark.parametrize(("compare", "user", "derived", "same"), [
    (INTEGER, "01", "1", True), (INTEGER, " 1 ", "1", True),
    (INTEGER, "1.0", "1", False),
    (INTEGER, "-1", "1", False), (COUNT_RANGE, "3:3", "3", True),
    (COUNT_RANGE, "1:3", "3", False), (COUNT_RANGE, "03", "3", True),
    (HOST, "MAIN1", "main1", True), (INTEGER, "\u0661", "1", False),
    (JSON, '{"task": {"index": 1, "type": "worker"},\n "cluster": {"worker": ["a:1", "b:1"]}}',
     TF_DERIVED, True), (JSON, "[]", "{}", False),
    # TF_CONFIG's index is a JSON integer: true and 1.0 are not 1 (json.loads equates them).
    (JSON, TF_DERIVED.replace('"index":1', '"index":true'), TF_DERIVED, False),
    (JSON, TF_DERIVED.replace('"index":1', '"index":1.0'), TF_DERIVED, False),
    (JSON, TF_DERIVED.replace('"index":1', '"index":"1"'), TF_DERIVED, False),
    (ADDRESS, "MAIN1:01234", "main1:1234", True), (ADDRESS, "[::1]:1234", "[::1]:1234", True),
    (ADDRESS, "main1:1235", "main1:1234", False), (ADDRESS, "sub1:1234", "main1:1234", False),
], ids=lambda v: v if isinstance(v, str) and len(v) < 12 else None)
def test_same_value_compares_data(compare, user, derived, same) -> None:
    assert same_value(compare, user, derived) is same


@pytest.mark.parametrize("index", ["true", "1.0", '"1"'])
def test_tf_config_index_must_be_a_json_integer(backendai_env, index) -> None:
    """A user-set TF_CONFIG whose index only looks like 1 is refused on node rank 1, naming
    the task (json.loads would have equated true and 1.0 with 1)."""
    derived = ('{"cluster":{"worker":["main1:2222","sub1:2222","sub2:2222"]},"task":{"type":'
               '"worker","index":1}}')
    user = derived.replace('"index":1', f'"index":{index}')
    assert error(session(backendai_env, "sub1", TF_CONFIG=user)) == (
        f"TF_CONFIG={user!r}: expected {derived!r}, this node's TF_CONFIG (its task differs): "
        "a value set once for the whole job reaches every node alike, so it is right on at "
        f"most one node. Remove TF_CONFIG where it is set ({WHERE}; derive-env derives it on "
        "every node), " + WARN_FIX
    )


def test_equal_identity_values_are_kept_silently_in_a_single_container() -> None:
    derivation = derive({"NODE_RANK": "0", "JAX_NUM_PROCESSES": "1", "WORLD_SIZE": "1"}, PPC)
    assert {v.name for v in derivation.variables if v.kept} == {
        "NODE_RANK", "JAX_NUM_PROCESSES", "WORLD_SIZE"}
    assert derivation.warnings == ()


def test_single_container_process_per_container_world_size_must_be_one(backendai_env) -> None:
    # Changed deliberately (issue 7): a Backend.AI single-container session no longer keeps a
    # WORLD_SIZE that contradicts the derived 1 in process-per-container mode.
    message = error({**backendai_env(["main1"], "main1"), "WORLD_SIZE": "4"}, PPC)
    assert message.startswith("WORLD_SIZE='4': expected '1', the number of nodes, one process ")


# --- item 1: torchrun mode: per-process variables checked, never set -------------------------


def test_torchrun_mode_checks_container_level_rank_against_one_process_per_node(
    backendai_env,
) -> None:
    message = error(session(backendai_env, "sub2", RANK="0"))
    assert message.startswith(
        "RANK='0': expected '2', this node's rank, one process per node (torchrun mode: not "
        "set, torchrun sets it for each worker it starts; a value for the whole container can "
        "only describe one process on each node)"
    )
    derivation = derive(session(backendai_env, "sub2", RANK="2", LOCAL_RANK="0"), ALL)
    kept = {v.name: v.value for v in derivation.variables if v.kept}
    assert kept == {"RANK": "2", "LOCAL_RANK": "0"}
    assert not {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"} & set(derivation.changes())


def test_torchrun_mode_leaves_per_process_values_alone_in_a_single_container(
    backendai_env,
) -> None:
    environ = {**backendai_env(["main1"], "main1"), "RANK": "3", "WORLD_SIZE": "4",
               "LOCAL_RANK": "3"}
    derivation = derive(environ, ALL)
    names = {v.name for v in derivation.variables}
    assert not names & {"RANK", "WORLD_SIZE", "LOCAL_RANK"}


# --- item 1: session-wide values and the master address --------------------------------------


@pytest.mark.parametrize("addr", ["localhost", "127.0.0.1", "127.1.2.3", "::1", "LOCALHOST",
                                  "0.0.0.0", "::ffff:127.0.0.1", "node.localhost",
                                  "0x7f000001", "0x7f.1", "0x0", "localhost6"])
def test_loopback_master_addr_in_a_multi_node_session_is_an_error(backendai_env, addr) -> None:
    # modelscope/ms-swift#2485
    assert error(session(backendai_env, "sub1", MASTER_ADDR=addr)) == (
        f"MASTER_ADDR={addr!r}: expected the host of node rank 0 (main1) or another address "
        "every node reaches. A loopback address in a job of 3 nodes makes every node "
        "connect to itself, so the nodes never meet. Remove MASTER_ADDR where it is set "
        f"({WHERE}; derive-env derives it), " + WARN_FIX
    )


def test_loopback_master_addr_with_socket_ifname_auto_never_yields_lo(backendai_env) -> None:
    labels = {**ALL, PREFIX + "socket-ifname": "auto"}
    assert error(session(backendai_env, "sub1", MASTER_ADDR="localhost"), labels).startswith(
        "MASTER_ADDR='localhost': expected the host of node rank 0 (main1)")


def test_loopback_master_addr_in_a_single_container_is_kept() -> None:
    derivation = derive({"MASTER_ADDR": "localhost"}, ALL)
    assert derivation.warnings == ()
    assert next(v for v in derivation.variables if v.name == "MASTER_ADDR").kept


def test_master_addr_outside_the_session_warns_and_feeds_the_dependents(backendai_env) -> None:
    # AMD-AGI/Primus#721, aws-samples/aws-hpc-tutorials#448
    derivation = derive(session(backendai_env, "sub1", MASTER_ADDR="headnode"), ALL)
    assert derivation.warnings == (
        "MASTER_ADDR='headnode' is not a node of this job (main1, sub1, sub2): kept, so "
        "every node connects to headnode. Node rank 0 (main1) serves the rendezvous on its own "
        "host, so this works only if headnode is another name of main1",
    )
    changes = derivation.changes()
    assert changes["PET_MASTER_ADDR"] == "headnode"
    assert changes["JAX_COORDINATOR_ADDRESS"] == "headnode:1234"
    assert "MASTER_ADDR" not in changes


def test_master_addr_of_another_node_is_an_error(backendai_env) -> None:
    assert error(session(backendai_env, "main1", MASTER_ADDR="Sub2")) == (
        "MASTER_ADDR='Sub2': expected the host of node rank 0 (main1), not node rank 2 (Sub2). "
        "Node rank 0 serves the rendezvous (torchrun's static rendezvous, init_process_group's "
        "store, JAX's coordinator) on its own host, so every node would wait at Sub2. Remove "
        f"MASTER_ADDR where it is set ({WHERE}; derive-env derives it), " + WARN_FIX
    )


@pytest.mark.parametrize("addr", ["main1", "MAIN1", "main1.", "10.0.0.7", "2001:db8::1"])
def test_master_addr_of_node_rank_0_or_an_address_is_kept_silently(backendai_env, addr) -> None:
    derivation = derive(session(backendai_env, "sub1", MASTER_ADDR=addr), ALL)
    assert derivation.warnings == ()
    assert derivation.changes()["PET_MASTER_ADDR"] == addr


def test_pet_master_addr_must_follow_master_addr(backendai_env) -> None:
    assert error(session(backendai_env, "sub1", PET_MASTER_ADDR="other")) == (
        "PET_MASTER_ADDR='other': expected 'main1', the same as MASTER_ADDR (same as "
        "MASTER_ADDR: BACKENDAI_CLUSTER_HOSTS + BACKENDAI_CLUSTER_REPLICAS: node rank 0 in "
        "canonical order): torchrun would meet at other while init_process_group and Lightning "
        "use MASTER_ADDR. Set MASTER_ADDR instead (derive-env derives PET_MASTER_ADDR from "
        "it), or both to the same value"
    )
    both = derive(session(backendai_env, "sub1", MASTER_ADDR="10.0.0.7",
                          PET_MASTER_ADDR="10.0.0.7", MASTER_PORT="2000",
                          PET_MASTER_PORT="2000"), ALL)
    assert {v.name for v in both.variables if v.kept} >= {"PET_MASTER_ADDR", "PET_MASTER_PORT"}
    assert error(session(backendai_env, "sub1", PET_MASTER_PORT="1")).startswith(
        "PET_MASTER_PORT='1': expected '29500', the same as MASTER_PORT (")


def test_jax_coordinator_on_loopback_is_an_error(backendai_env) -> None:
    message = error(session(backendai_env, "sub1", JAX_COORDINATOR_ADDRESS="127.0.0.1:1234"))
    assert message.startswith("JAX_COORDINATOR_ADDRESS='127.0.0.1:1234': expected the host of")


def test_on_error_warn_runs_the_command_unchanged(
    backendai_env, tmp_path, fake_exec, capsys,
) -> None:
    from derive_env.cli import run
    from helpers import Execed

    environ = session(backendai_env, "sub1", NODE_RANK="0")
    env_file = tmp_path / "sub1.env"
    env_file.write_text("".join(f"{k}={v}\n" for k, v in environ.items()))
    labels = [f"{PREFIX}frameworks=pytorch", f"{PREFIX}on-error=warn"]
    with pytest.raises(Execed) as info:
        run(["train"], label_items=labels, env_file=str(env_file))
    assert info.value.env == environ
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("derive-env: warning: NODE_RANK='0': expected '1', this node's ")
    assert err[1] == ("derive-env: warning: on-error=warn: running the command with the "
                      "environment unchanged")


@pytest.mark.parametrize(("labels", "every"), [(PPC, True), (ALL, False)])
def test_every_derived_variable_has_its_scope(backendai_env, labels, every) -> None:
    """The oracle's IDENTITY is what the frameworks scope JOB or NODE (all of it in
    process-per-container mode; JAX_LOCAL_DEVICE_IDS under a launcher's process layer)."""
    labels = {**labels, PREFIX + "nproc-per-node": "2"}
    derivation = derive(session(backendai_env, "sub1", GLOO_SOCKET_IFNAME="eth0"), labels)
    srun = derive({**SRUN_TASK_3, "CUDA_VISIBLE_DEVICES": "0,1,2,3"},
                  {PREFIX + "frameworks": "pytorch,jax"})
    assert derivation is not None and srun is not None
    variables = [*derivation.variables, *srun.variables]
    assert {v.scope for v in variables} <= set(SCOPES)
    judged = {v.name for v in variables if v.scope in (JOB, NODE)}
    assert judged <= IDENTITY, judged - IDENTITY
    assert judged == IDENTITY or not every, IDENTITY - judged
    assert {v.name for v in variables if v.scope in (SHARED, FOLLOWS)}.isdisjoint(IDENTITY)


# --- item 1: the property ---------------------------------------------------------------------

PROPERTY = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _base(env: dict[str, str], labels: dict[str, str]) -> dict[str, str]:
    derivation = derive(env, labels)
    assert derivation is not None
    return derivation.changes()


def _equal(name: str, user: str, derived: str) -> bool:
    """Independent oracle of the documented "same as data" rule."""
    if name == "TF_CONFIG":
        try:
            return json.loads(user) == json.loads(derived)
        except ValueError:
            return False
    if name == "PET_NNODES" and ":" in user:
        low, _, high = user.partition(":")
        return low.strip() == high.strip() and _equal(name, low, derived)
    text = user.strip()
    return text.isascii() and text.isdigit() and int(text) == int(derived)


@given(
    size=st.integers(1, 5), mode=st.sampled_from([ALL, PPC]), order=st.randoms(),
    presets=st.dictionaries(
        st.sampled_from([*sorted(IDENTITY), "MASTER_ADDR", "MASTER_PORT", "PET_MASTER_ADDR",
                         "PET_NPROC_PER_NODE"]),
        st.one_of(st.sampled_from(["", "0", "1", "2", "01", " 1", "3:3", "x", "-1", "main1",
                                   "sub1", "headnode", "localhost", "10.0.0.9", "29500"]),
                  st.just("derived-of-node-0"), st.just("derived-of-this-node")),
        max_size=5,
    ),
)
@PROPERTY
def test_every_node_execs_the_derived_values_or_fails_naming_a_variable(
    backendai_env, size, mode, order, presets,
) -> None:
    hosts = ["main1"] + [f"sub{i}" for i in range(1, size)]
    seen = {host: order.sample(hosts, len(hosts)) for host in hosts}  # each node's HOSTS order
    bases = [_base(backendai_env(seen[host], host), mode) for host in hosts]
    for rank, host in enumerate(hosts):
        base = bases[rank]
        user = {}
        for name, choice in presets.items():
            if choice == "derived-of-node-0":
                choice = bases[0].get(name, "1")
            elif choice == "derived-of-this-node":
                choice = base.get(name, "1")
            user[name] = choice
        env = {**backendai_env(seen[host], host), **user}
        try:
            derivation = derive(env, mode)
        except DeriveEnvError as exc:
            named = [n for n in user if user[n] and str(exc).startswith(f"{n}=")]
            assert named, str(exc)
            for name in named:  # an identity value is refused only when it really differs
                if name in IDENTITY and name in base:
                    assert not _equal(name, user[name], base[name]), (name, str(exc))
            continue
        execed = {**env, **derivation.changes()}
        set_by_user = {n for n, v in user.items() if v}
        master = user.get("MASTER_ADDR") or base["MASTER_ADDR"]
        port = user.get("MASTER_PORT") or base["MASTER_PORT"]
        for name, value in base.items():
            if name in set_by_user:
                assert execed[name] == user[name]
                if name in IDENTITY:
                    assert _equal(name, user[name], value), (name, user[name], value)
            elif name == "PET_MASTER_ADDR":
                assert execed[name] == master
            elif name == "PET_MASTER_PORT":
                assert int(execed[name]) == int(port)
            elif name == "JAX_COORDINATOR_ADDRESS":
                assert execed[name] == host_port(master, 1234)
            else:
                assert execed[name] == value, name
        # Presets equal to the derived values (and no other preset) never fail.
    same = {n: bases[0][n] for n in bases[0] if n in IDENTITY}
    assert derive({**backendai_env(hosts, "main1"), **same}, mode) is not None


def test_master_addr_fully_qualified_with_a_trailing_dot_is_that_node(backendai_env) -> None:
    """Issue 15, item 7: "sub2." is sub2 (RFC 1034), so it is recognised as node rank 2."""
    assert error(session(backendai_env, "main1", MASTER_ADDR="sub2.")).startswith(
        "MASTER_ADDR='sub2.': expected the host of node rank 0 (main1), not node rank 2 "
        "(sub2.).")


JAX_EXPECTED = ("expected host:port, the port 1-65535, IPv6 in brackets ([fd00::1]:8476), as "
                "JAX reads it (jax/_src/distributed.py: the port is the text after the last ':')")


@pytest.mark.parametrize("value", ["main1", "main1:", "main1:99999", "main1:x", "main1:0",
                                   "fd00::1:8476", "a b:8476", ":8476", "[main1]x:1"])
def test_user_jax_coordinator_address_jax_cannot_read_is_an_error(backendai_env,
                                                                  value: str) -> None:
    """Issue 15, item 7: the port of a user JAX_COORDINATOR_ADDRESS was not validated."""
    assert error(session(backendai_env, "sub1", JAX_COORDINATOR_ADDRESS=value)) == (
        f"JAX_COORDINATOR_ADDRESS={value!r}: {JAX_EXPECTED}")


@pytest.mark.parametrize("value", ["main1:8476", "10.0.0.7:8476", "[fd00::1]:8476"])
def test_user_jax_coordinator_address_jax_reads_is_kept(backendai_env, value: str) -> None:
    derivation = derive(session(backendai_env, "sub1", JAX_COORDINATOR_ADDRESS=value), ALL)
    assert next(v for v in derivation.variables if v.name == "JAX_COORDINATOR_ADDRESS").kept


# ------------------------------------------------------------------ the run id (issue 28)


def _blake(*facts: str) -> str:
    """The documented rule, computed here with hashlib: BLAKE2b-64, person derive-env.run."""
    import hashlib

    return hashlib.blake2b("\0".join(facts).encode(), digest_size=8,
                           person=b"derive-env.run").hexdigest()


def _run_var(env: dict[str, str], fresh: str | None = None):
    from derive_env.pipeline import derive

    derivation = derive(env, {"ai.backend.distributed.frameworks": "pytorch"}, None,
                        fresh_run_id=fresh)
    return next((v for v in derivation.variables if v.name == "DERIVE_ENV_RUN_ID"), None), \
        derivation


def test_run_id_of_a_backendai_session_is_the_hash_of_its_id(backendai_env) -> None:
    var, _ = _run_var(backendai_env(["sub1", "main1"], "sub1"), fresh="ffffffffffffffff")
    assert var.value == _blake("job", "", "", "", "sess-0123") == "4710a43c645d3cb2"
    assert (var.scope, var.kept) == (SHARED, False)
    assert var.provenance == ("hash of the job identity backendai states (id sess-0123): the "
                              "same in every process of the job")


def test_run_id_without_a_manager_is_the_fresh_one_given() -> None:
    var, _ = _run_var({}, fresh="0123456789abcdef")
    assert var.value == "0123456789abcdef"
    assert var.provenance.startswith("a fresh random id of this start")
    none, derivation = _run_var({})  # --env-file, the pure API: nothing drawn
    assert none is None
    assert any(n.startswith("DERIVE_ENV_RUN_ID not set") for n in derivation.notes)


def test_run_id_set_is_kept_and_a_bad_one_is_an_error(backendai_env) -> None:
    env = {**backendai_env(["sub1", "main1"], "sub1"), "DERIVE_ENV_RUN_ID": "outer.run-1"}
    var, derivation = _run_var(env)
    assert (var.value, var.kept, var.derived) == ("outer.run-1", True, "4710a43c645d3cb2")
    assert "DERIVE_ENV_RUN_ID" not in derivation.changes()
    for bad in ("-rf", "a b", "x" * 65, "naïve", "a/b"):
        with pytest.raises(TopologyError) as info:
            _run_var({**env, "DERIVE_ENV_RUN_ID": bad})
        assert str(info.value).startswith(
            f"DERIVE_ENV_RUN_ID={bad!r}: expected a run id of 1 to 64 characters: letters, "
            "digits, '.', '_' or '-', the first a letter or digit")
        assert info.value.exit_code == 3


def test_run_id_of_an_mpiexec_job_without_a_job_id_is_its_shape() -> None:
    """MPICH over SSH names no job: every rank hashes the shape it shares."""
    ranks = [{"PMI_RANK": str(r), "PMI_SIZE": "2", "MPI_LOCALRANKID": "0",
              "MPI_LOCALNRANKS": "1", "MASTER_ADDR": "n1"} for r in range(2)]
    values = {_run_var(env)[0].value for env in ranks}
    assert values == {_blake("shape", "hydra", "", "None", "None", "None", "", "2", "",
                             "n1", "")}
    assert "names no job" in _run_var(ranks[0])[0].provenance
