"""JAX: JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES, JAX_PROCESS_ID."""

from __future__ import annotations

import pytest

from derive_env.labels import PREFIX
from derive_env.pipeline import derive

JAX = {PREFIX + "frameworks": "jax"}


def jax_vars(environ, labels=JAX) -> dict[str, str]:
    derivation = derive(environ, labels)
    assert derivation is not None
    return {v.name: v.value for v in derivation.variables if v.framework == "jax"}


@pytest.mark.parametrize(("host", "rank"), [("main1", "0"), ("sub1", "1"), ("sub2", "2")])
def test_cluster_values(backendai_env, host: str, rank: str) -> None:
    assert jax_vars(backendai_env(["sub2", "sub1", "main1"], host)) == {
        "JAX_COORDINATOR_ADDRESS": "main1:1234",
        "JAX_NUM_PROCESSES": "3",
        "JAX_PROCESS_ID": rank,
    }


def test_jax_only_sets_no_pytorch_or_tf_variables(backendai_env) -> None:
    derivation = derive(backendai_env(["main1", "sub1"], "sub1"), JAX)
    assert derivation is not None
    assert [v.name for v in derivation.variables] == [
        "JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID"]


def test_jax_port_label(backendai_env) -> None:
    got = jax_vars(backendai_env(["main1", "sub1"], "sub1"), {**JAX, PREFIX + "jax-port": "7777"})
    assert got["JAX_COORDINATOR_ADDRESS"] == "main1:7777"


def test_master_port_does_not_move_the_coordinator(backendai_env) -> None:
    env = {**backendai_env(["main1", "sub1"], "sub1"), "MASTER_PORT": "5555",
           "BACKENDAI_DIST_MASTER_PORT": "6666"}
    assert jax_vars(env)["JAX_COORDINATOR_ADDRESS"] == "main1:1234"


def test_single_container() -> None:
    assert jax_vars({}) == {
        "JAX_COORDINATOR_ADDRESS": "127.0.0.1:1234",
        "JAX_NUM_PROCESSES": "1",
        "JAX_PROCESS_ID": "0",
    }


def test_user_master_addr_feeds_coordinator(backendai_env) -> None:
    env = {**backendai_env(["main1", "sub1"], "sub1"), "MASTER_ADDR": "2001:db8::7"}
    assert jax_vars(env)["JAX_COORDINATOR_ADDRESS"] == "[2001:db8::7]:1234"


def test_user_coordinator_kept(backendai_env) -> None:
    env = {**backendai_env(["main1", "sub1"], "sub1"), "JAX_COORDINATOR_ADDRESS": "elsewhere:1"}
    derivation = derive(env, JAX)
    assert derivation is not None
    got = {v.name: v for v in derivation.variables}
    assert got["JAX_COORDINATOR_ADDRESS"].kept
    assert got["JAX_COORDINATOR_ADDRESS"].value == "elsewhere:1"
    assert got["JAX_COORDINATOR_ADDRESS"].derived == "main1:1234"
    assert "JAX_COORDINATOR_ADDRESS" not in derivation.changes()


def test_sources_and_note(backendai_env) -> None:
    derivation = derive(backendai_env(["main1", "sub1"], "sub1"), JAX)
    assert derivation is not None
    got = {v.name: v.provenance for v in derivation.variables}
    assert got["JAX_COORDINATOR_ADDRESS"] == (
        "master address (BACKENDAI_CLUSTER_HOSTS + BACKENDAI_CLUSTER_REPLICAS: node rank 0 in "
        "canonical order) + port from default (1234)"
    )
    assert got["JAX_PROCESS_ID"] == (
        "position of BACKENDAI_CLUSTER_HOST=sub1 in the canonical order"
    )
    assert any("jax.distributed.initialize(" in note for note in derivation.notes)


@pytest.mark.parametrize("visible", ["\u00b2", "0,\u00b9", "\u0660,\u0661,\u0662,\u0663",
                                     "GPU-1f2e"])
def test_local_device_ids_take_ascii_device_numbers_only(visible: str) -> None:
    """A superscript or Arabic-Indic digit is no device number CUDA reads: a note, never a
    traceback (str.isdigit() takes them, int() refuses '²' and reads '٣' as 3)."""
    from helpers import SRUN_TASK_3

    result = derive({**SRUN_TASK_3, "CUDA_VISIBLE_DEVICES": visible},
                    {PREFIX + "frameworks": "jax"})
    assert result is not None
    assert "JAX_LOCAL_DEVICE_IDS" not in result.changes()
    assert ("JAX_LOCAL_DEVICE_IDS not set: CUDA_VISIBLE_DEVICES names devices by UUID; JAX "
            "takes numbers") in result.notes
    assert result.changes()["JAX_PROCESS_ID"] == "3"
