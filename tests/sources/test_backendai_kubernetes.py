"""Backend.AI's Kubernetes agent backend: its pods get no session network (``apply_network``
does nothing, src/ai/backend/agent/kubernetes/agent.py of lablup/backend.ai), so a session of
more than one container is refused by name instead of exporting ``MASTER_ADDR=main1``."""

from __future__ import annotations

import pytest

from derive_env.errors import TopologyError
from derive_env.pipeline import derive

ON_KUBERNETES = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}


def test_multi_container_session_on_the_kubernetes_backend_is_refused(backendai_env,
                                                                      opt_in) -> None:
    env = {**backendai_env(["sub2", "sub1", "main1"], "sub1"), **ON_KUBERNETES}
    with pytest.raises(TopologyError) as info:
        derive(env, opt_in, None)
    assert str(info.value) == (
        "BACKENDAI_CLUSTER_SIZE=3 with KUBERNETES_SERVICE_HOST set: a session of 3 containers "
        "on Backend.AI's Kubernetes agent backend, which gives its pods no session network, "
        "so no pod answers to the names main1, sub1, sub2 and the nodes cannot reach each "
        "other; run multi-container sessions on Backend.AI's Docker agents "
        "(docs/backendai.md, \"The Kubernetes agent backend\")")
    assert info.value.exit_code == 3


def test_many_names_are_shortened(backendai_env, opt_in) -> None:
    hosts = ["main1", *(f"sub{i}" for i in range(1, 10))]
    with pytest.raises(TopologyError) as info:
        derive({**backendai_env(hosts, "sub3"), **ON_KUBERNETES}, opt_in, None)
    assert "no pod answers to the names main1, sub1, sub2, ... (10 in all) and" in str(info.value)


def test_single_container_session_on_kubernetes_is_fine(opt_in) -> None:
    env = {"BACKENDAI_CLUSTER_SIZE": "1", "BACKENDAI_CLUSTER_HOST": "main1", **ON_KUBERNETES}
    derivation = derive(env, opt_in, None)
    assert derivation is not None
    assert derivation.changes()["MASTER_ADDR"] == "127.0.0.1"


def test_the_docker_backend_is_not_refused(backendai_env, opt_in) -> None:
    derivation = derive(backendai_env(["sub2", "sub1", "main1"], "sub1"), opt_in, None)
    assert derivation is not None and derivation.changes()["MASTER_ADDR"] == "main1"
