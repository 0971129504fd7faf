"""--dry-run --explain: a derivation for a person (contract section 2)."""

from __future__ import annotations

from derive_env.labels import PREFIX
from derive_env.pipeline import Derivation, derive
from derive_env.render.explain import explain
from helpers import made

TF_CONFIG = '{"cluster":{"worker":["main1:2222","sub1:2222"]},"task":{"type":"worker","index":1}}'




def test_explain(derivation: Derivation) -> None:
    text = explain(derivation)
    lines = text.splitlines()
    assert lines[:6] == [
        "source: backendai session s1, 2 nodes; this container is sub1, node rank 1",
        "nodes in canonical order (from BACKENDAI_CLUSTER_REPLICAS: role main first, then the "
        "roles in REPLICAS order, each role's hosts {role}1 to {role}{count}):",
        "     0  main1  (master)",
        "     1  sub1  (this container)",
        "source seen: backendai (a Backend.AI session), for the node layer",
        "frameworks: pytorch, tensorflow (mode torchrun)",
    ]
    assert "MASTER_ADDR       = main1" in lines
    index = lines.index("MASTER_ADDR       = main1")
    assert lines[index + 1] == (
        "                    source: BACKENDAI_CLUSTER_HOSTS + BACKENDAI_CLUSTER_REPLICAS: node "
        "rank 0 in canonical order"
    )
    index = lines.index("MASTER_PORT       = 1111")
    assert lines[index + 1] == "                    kept: already set (derived: 29500)"
    index = lines.index("PET_MASTER_PORT   = 1111")
    assert lines[index + 1] == (
        "                    source: same as MASTER_PORT: MASTER_PORT (already set)")
    assert f"TF_CONFIG         = {TF_CONFIG}" in lines
    assert "  sub: sub1 -> worker 1  <- this container" in lines
    assert text.endswith("\n")


def test_explain_order_without_replicas(backendai_env) -> None:
    env = backendai_env(["sub1", "main1"], "sub1")
    del env["BACKENDAI_CLUSTER_REPLICAS"]
    result = derive(env, {PREFIX + "frameworks": "pytorch"})
    assert explain(result).splitlines()[1] == (
        "nodes in canonical order (no BACKENDAI_CLUSTER_REPLICAS: roles and indices parsed from "
        "the BACKENDAI_CLUSTER_HOSTS names {role}{index}; role main first, then roles by name, "
        "each by numeric index):"
    )


def test_explain_shows_local_rank_of_another_group_order(backendai_env) -> None:
    """A template listing sub before main: LOCAL_RANK 0 for sub1, node rank 1; both shown."""
    env = backendai_env(["sub1", "main1"], "sub1", group_order=["sub", "main"])
    result = derive(env, {PREFIX + "frameworks": "pytorch"})
    lines = explain(result).splitlines()
    assert lines[:6] == [
        "source: backendai session sess-0123, 2 nodes; this container is sub1, node rank 1",
        "nodes in canonical order (from BACKENDAI_CLUSTER_REPLICAS: role main first, then the "
        "roles in REPLICAS order, each role's hosts {role}1 to {role}{count}):",
        "     0  main1  (master)",
        "     1  sub1  (this container)",
        "node rank 1: the position of sub1 in the canonical order above",
        "BACKENDAI_CLUSTER_LOCAL_RANK=0: its position in the order the session's request "
        "listed the role groups, which a container cannot see (not used as the node rank)",
    ]
    # Contract section 5 (revised): a valid cluster-template session has no warning.
    assert not any(line.startswith("warning:") for line in lines)
    assert "NODE_RANK         = 1" in lines


def test_explain_kept_master_addr_shows_topology_value(backendai_env) -> None:
    env = {**backendai_env(["main1", "sub1"], "sub1"), "MASTER_ADDR": "10.0.0.5"}
    lines = explain(derive(env, {PREFIX + "frameworks": "pytorch"})).splitlines()
    index = lines.index("MASTER_ADDR       = 10.0.0.5")
    assert lines[index + 1] == "                    kept: already set (derived: main1)"


def test_explain_kept_same_value(backendai_env) -> None:
    env = {**backendai_env(["main1", "sub1"], "sub1"), "NODE_RANK": "1"}
    lines = explain(derive(env, {PREFIX + "frameworks": "pytorch"})).splitlines()
    index = lines.index("NODE_RANK         = 1")
    assert lines[index + 1] == "                    kept: already set (same as derived)"


def test_explain_kept_with_other_value(backendai_env) -> None:
    # A session-wide value (a different NODE_RANK is an error since issue 7).
    env = {**backendai_env(["main1", "sub1"], "sub1"), "MASTER_PORT": "7777"}
    text = explain(derive(env, {PREFIX + "frameworks": "pytorch"}))
    lines = text.splitlines()
    index = lines.index("MASTER_PORT       = 7777")
    assert lines[index + 1] == "                    kept: already set (derived: 29500)"


def test_explain_not_opted_in() -> None:
    assert explain(None) == (
        "not opted in: the image has no label ai.backend.distributed.frameworks\n"
        "nothing is derived; the command runs with the environment unchanged\n"
    )


def test_explain_single_container() -> None:
    text = explain(derive({}, {PREFIX + "frameworks": "jax"}))
    assert text.splitlines()[:2] == ["source: standalone, single container",
                                     "frameworks: jax"]
    assert "JAX_COORDINATOR_ADDRESS = 127.0.0.1:1234" in text


def test_explain_long_session_lists_first_nodes_and_own(backendai_env) -> None:
    hosts = ["main1"] + [f"sub{i}" for i in range(1, 30)]
    text = explain(derive(backendai_env(hosts, "sub25"), {PREFIX + "frameworks": "pytorch"}))
    lines = text.splitlines()
    assert "    15  sub15" in lines
    assert "    16  sub16" not in lines
    assert "    25  sub25  (this container)" in lines
    assert "  ... 30 nodes in all" in lines


def test_explain_shortens_long_values_and_lists_warnings() -> None:
    result = made({"LONG": "x" * 400})
    result = Derivation(topology=result.topology, policy=result.policy,
                        variables=result.variables, warnings=("look here",))
    lines = explain(result).splitlines()
    assert f"LONG = {'x' * 300}..." in lines
    assert "       source: test source of LONG" in lines
    assert lines[-1] == "warning: look here"


def test_explain_escapes_control_characters_in_values() -> None:
    lines = explain(made({"A": "x\ny", "C": "plain ünï"}, kept={"B": "\x1b[2Jz\r"})).splitlines()
    assert "A = 'x\\ny'" in lines
    assert "C = plain ünï" in lines  # printable values are shown as they are
    index = lines.index("B = '\\x1b[2Jz\\r'")
    assert lines[index + 1] == "    kept: already set (derived: other)"


def test_explain_escaped_value_is_still_cut_at_300_characters() -> None:
    lines = explain(made({"NUL": "\0" * 400})).splitlines()
    assert f"NUL = {repr(chr(0) * 400)[:300]}..." in lines


def test_explain_escapes_the_session_id() -> None:
    env = {"BACKENDAI_CLUSTER_SIZE": "1", "BACKENDAI_SESSION_ID": "s1\nsource: forged\x1b[0m"}
    lines = explain(derive(env, {PREFIX + "frameworks": "pytorch"})).splitlines()
    assert lines[0] == (
        "source: backendai session 's1\\nsource: forged\\x1b[0m', single container"
    )
    assert not any(line.startswith("source: forged") for line in lines)


def test_explain_escapes_raw_values_in_provenance_notes_and_warnings() -> None:
    """Issue 15, item 7: TORCHELASTIC_RUN_ID reached the terminal raw through the JAX port's
    provenance ("derived from torchrun job ... step ..."); now every line is escaped."""
    from pathlib import Path

    fixture = Path(__file__).parents[1] / "fixtures/recorded/torchrun-static/rank0.env"
    env = dict(line.split("=", 1) for line in fixture.read_text().splitlines()
               if line and not line.startswith("#"))
    env["TORCHELASTIC_RUN_ID"] = "ab\x1b[31mRED\x07"
    text = explain(derive(env, {PREFIX + "frameworks": "pytorch,jax"}))
    assert "\x1b" not in text and "\x07" not in text
    assert "torchrun job ab\\x1b[31mRED\\x07 step 26003" in text
    result = made({"A": "1"})
    result = Derivation(topology=result.topology, policy=result.policy,
                        variables=result.variables, warnings=("bad \x9b1m\u2028x\udc80",))
    assert explain(result).splitlines()[-1] == "warning: bad \\x9b1m\\u2028x\\udc80"
