"""The ENTRYPOINT path, for real: `derive-env -- torchrun` in 3 simulated containers, 6 ranks.

Docker, Compose and Kubernetes run the image's ENTRYPOINT in every container
(demo.run_torch_session); Backend.AI's start path (hook, SSH fan-out) is
test_e2e_backendai.py. BACKENDAI_CLUSTER_HOSTS not starting with main1, one network
namespace per container, so a wrong master address would fail here as it would in
production. Under CI=true a machine that cannot run it FAILS the test.
"""

from __future__ import annotations

import pytest

import demo
from sessions import require_frameworks, venv_bin

pytestmark = pytest.mark.e2e


def test_torchrun_session_all_ranks_agree() -> None:
    """Every container derives master main1 and its canonical node rank; 6 ranks sum to 21."""
    require_frameworks("torch")

    report = demo.run_torch_session(venv_bin())

    assert report.problems == [], demo.summary(report)
    assert report.hosts_order[0] != "main1"
    assert {h: d["NODE_RANK"] for h, d in report.derived.items()} == {
        "main1": "0", "sub1": "1", "sub2": "2",
    }
    assert {d["MASTER_ADDR"] for d in report.derived.values()} == {"main1"}
    assert {d["GLOO_SOCKET_IFNAME"] for d in report.derived.values()} == {"eth0"}
    assert sorted((w["container"], w["rank"]) for w in report.workers) == [
        ("main1", 0), ("main1", 1), ("sub1", 2), ("sub1", 3), ("sub2", 4), ("sub2", 5),
    ]
    assert {w["result"] for w in report.workers} == {21.0}
