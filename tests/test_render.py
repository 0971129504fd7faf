"""--dry-run output: env / json / toml / shell, and --explain (contract section 2)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from derive_env.frameworks.context import SHARED, DerivedVariable
from derive_env.labels import PREFIX
from derive_env.pipeline import Derivation, derive
from derive_env.policy import ImagePolicy
from derive_env.render import FORMATS, explain, render
from derive_env.topology import single_node_topology
from helpers import tomllib

TF_CONFIG = '{"cluster":{"worker":["main1:2222","sub1:2222"]},"task":{"type":"worker","index":1}}'


@pytest.fixture
def derivation(backendai_env) -> Derivation:
    """sub1 of a 2-node session, PyTorch + TensorFlow, the user set MASTER_PORT=1111."""
    env = {**backendai_env(["sub1", "main1"], "sub1", session_id="s1"), "MASTER_PORT": "1111"}
    result = derive(env, {PREFIX + "frameworks": "pytorch,tensorflow"})
    assert result is not None
    return result


def made(values: dict[str, str], kept: dict[str, str] | None = None) -> Derivation:
    """A derivation holding arbitrary values (frameworks never derive such strings)."""
    variables = [DerivedVariable(name=k, value=v, provenance=f"test source of {k}",
                                 framework="t", scope=SHARED)
                 for k, v in values.items()]
    for name, value in (kept or {}).items():
        variables.append(DerivedVariable(name=name, value=value, provenance="x", framework="t",
                                         scope=SHARED, kept=True, derived="other"))
    return Derivation(
        topology=single_node_topology(),
        policy=ImagePolicy.from_labels({PREFIX + "frameworks": "pytorch"}),
        variables=tuple(variables),
    )


def test_formats() -> None:
    assert FORMATS == (
        "env", "json", "toml", "shell",
        "hosts", "openmpi-hostfile", "mpich-hostfile", "deepspeed-hostfile", "horovod-hosts",
    )


def test_env(derivation: Derivation) -> None:
    assert render(derivation, "env") == (
        "MASTER_ADDR=main1\n"
        "NODE_RANK=1\n"
        "PET_NNODES=2\n"
        "PET_NODE_RANK=1\n"
        "PET_MASTER_ADDR=main1\n"
        "PET_MASTER_PORT=1111\n"
        f"TF_CONFIG={TF_CONFIG}\n"
    )


def test_json(derivation: Derivation) -> None:
    text = render(derivation, "json")
    assert text == (
        '{"MASTER_ADDR": "main1", "NODE_RANK": "1", "PET_NNODES": "2", "PET_NODE_RANK": "1", '
        '"PET_MASTER_ADDR": "main1", "PET_MASTER_PORT": "1111", "TF_CONFIG": '
        + json.dumps(TF_CONFIG) + "}\n"
    )
    assert text.count("\n") == 1
    parsed = json.loads(text)
    assert parsed == derivation.changes()
    assert "MASTER_PORT" not in parsed  # kept: the exec does not change it
    assert all(isinstance(v, str) for v in parsed.values())


def test_toml(derivation: Derivation) -> None:
    text = render(derivation, "toml")
    assert text == (
        'MASTER_ADDR = "main1"\n'
        'NODE_RANK = "1"\n'
        'PET_NNODES = "2"\n'
        'PET_NODE_RANK = "1"\n'
        'PET_MASTER_ADDR = "main1"\n'
        'PET_MASTER_PORT = "1111"\n'
        'TF_CONFIG = "{\\"cluster\\":{\\"worker\\":[\\"main1:2222\\",\\"sub1:2222\\"]},'
        '\\"task\\":{\\"type\\":\\"worker\\",\\"index\\":1}}"\n'
    )
    assert tomllib.loads(text) == derivation.changes()


def test_shell(derivation: Derivation) -> None:
    assert render(derivation, "shell") == (
        "export MASTER_ADDR='main1'\n"
        "export NODE_RANK='1'\n"
        "export PET_NNODES='2'\n"
        "export PET_NODE_RANK='1'\n"
        "export PET_MASTER_ADDR='main1'\n"
        "export PET_MASTER_PORT='1111'\n"
        f"export TF_CONFIG='{TF_CONFIG}'\n"
    )


@pytest.mark.parametrize("fmt", ["env", "json", "toml", "shell"])
def test_never_prints_input_variables(backendai_env, fmt: str) -> None:
    env = {**backendai_env(["main1", "sub1"], "sub1"), "AWS_SECRET_ACCESS_KEY": "s3cr3t"}
    result = derive(env, {PREFIX + "frameworks": "pytorch"})
    text = render(result, fmt)
    assert "s3cr3t" not in text
    assert "BACKENDAI_" not in text


@pytest.mark.parametrize(("fmt", "text"), [
    ("json", "{}\n"), ("env", ""), ("toml", ""), ("shell", ""),
])
def test_not_opted_in(fmt: str, text: str) -> None:
    assert render(None, fmt) == text
    assert render(derive({"MASTER_ADDR": "x"}, {"maintainer": "me"}), fmt) == text


def test_unknown_format(derivation: Derivation) -> None:
    with pytest.raises(ValueError, match="unknown format 'yaml'"):
        render(derivation, "yaml")


NASTY = {
    "SINGLE": "it's",
    "DOUBLE": 'say "hi"',
    "DOLLAR": "$HOME ${PATH} $(echo pwned) $1",
    "BACKTICK": "`echo pwned`",
    "NEWLINES": "line1\nline2\n",
    "BACKSLASH": "a\\b\\\\c\\n",
    "EMPTY": "",
    "BLANKS": "  lead and trail  ",
    "GLOB": "* ? [a] ~ ~root",
    "MIXED": "'\"$`\\\n;|&<>(){}#!",
    "UNICODE": "ünï ✓",
    "TF_CONFIG": TF_CONFIG,
}


def test_shell_eval_round_trips_exactly(tmp_path) -> None:
    text = render(made(NASTY), "shell")
    dump = "import json, os, sys; sys.stdout.write(json.dumps(dict(os.environ)))"
    script = f'eval "$1" && exec "$2" -c "{dump}"'
    done = subprocess.run(
        ["sh", "-c", script, "sh", text, sys.executable],
        capture_output=True, text=True, timeout=30, cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent"},
    )
    assert done.returncode == 0, done.stderr
    environ = json.loads(done.stdout)
    assert {k: environ.get(k) for k in NASTY} == NASTY
    assert not (tmp_path / "pwned").exists()


def test_shell_lines_are_one_export_per_variable() -> None:
    text = render(made({"A": "x y", "B": "it's"}), "shell")
    assert text == "export A='x y'\nexport B='it'\"'\"'s'\n"


def test_kept_variables_not_rendered() -> None:
    result = made({"A": "1"}, kept={"B": "user"})
    assert render(result, "json") == '{"A": "1"}\n'
    assert render(result, "env") == "A=1\n"
    assert render(result, "shell") == "export A='1'\n"


def test_json_round_trips_nasty_values() -> None:
    assert json.loads(render(made(NASTY), "json")) == NASTY
    assert tomllib.loads(render(made(NASTY), "toml")) == NASTY


# --- explain --------------------------------------------------------------------------------


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
    assert "MASTER_ADDR     = main1" in lines
    index = lines.index("MASTER_ADDR     = main1")
    assert lines[index + 1] == (
        "                  source: BACKENDAI_CLUSTER_HOSTS + BACKENDAI_CLUSTER_REPLICAS: node "
        "rank 0 in canonical order"
    )
    index = lines.index("MASTER_PORT     = 1111")
    assert lines[index + 1] == "                  kept: already set (derived: 29500)"
    index = lines.index("PET_MASTER_PORT = 1111")
    assert lines[index + 1] == (
        "                  source: same as MASTER_PORT: MASTER_PORT (already set)")
    assert f"TF_CONFIG       = {TF_CONFIG}" in lines
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
        "BACKENDAI_CLUSTER_LOCAL_RANK=0: its position in the order the request listed the role "
        "groups (not used)",
    ]
    assert lines[-1] == (
        "warning: BACKENDAI_CLUSTER_LOCAL_RANK=0 is not the node rank of this container (sub1): "
        "1. Backend.AI counts in the order the session's request listed the role groups, which "
        "a container cannot see; derive-env uses the canonical node order, the same on every "
        "container. Do not use BACKENDAI_CLUSTER_LOCAL_RANK as a node rank in this session"
    )
    assert "NODE_RANK       = 1" in lines


def test_explain_kept_master_addr_shows_topology_value(backendai_env) -> None:
    env = {**backendai_env(["main1", "sub1"], "sub1"), "MASTER_ADDR": "10.0.0.5"}
    lines = explain(derive(env, {PREFIX + "frameworks": "pytorch"})).splitlines()
    index = lines.index("MASTER_ADDR     = 10.0.0.5")
    assert lines[index + 1] == "                  kept: already set (derived: main1)"


def test_explain_kept_same_value(backendai_env) -> None:
    env = {**backendai_env(["main1", "sub1"], "sub1"), "NODE_RANK": "1"}
    lines = explain(derive(env, {PREFIX + "frameworks": "pytorch"})).splitlines()
    index = lines.index("NODE_RANK       = 1")
    assert lines[index + 1] == "                  kept: already set (same as derived)"


def test_explain_kept_with_other_value(backendai_env) -> None:
    # A session-wide value (a different NODE_RANK is an error since issue 7).
    env = {**backendai_env(["main1", "sub1"], "sub1"), "MASTER_PORT": "7777"}
    text = explain(derive(env, {PREFIX + "frameworks": "pytorch"}))
    lines = text.splitlines()
    index = lines.index("MASTER_PORT     = 7777")
    assert lines[index + 1] == "                  kept: already set (derived: 29500)"


def test_explain_not_opted_in() -> None:
    assert explain(None) == (
        "not opted in: the image has no label ai.backend.distributed.frameworks\n"
        "nothing is derived; the command runs with the environment unchanged\n"
    )


def test_explain_single_container() -> None:
    text = explain(derive({}, {PREFIX + "frameworks": "jax"}))
    assert text.splitlines()[:2] == ["source: standalone, single-container session",
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
        "source: backendai session 's1\\nsource: forged\\x1b[0m', single-container session"
    )
    assert not any(line.startswith("source: forged") for line in lines)
