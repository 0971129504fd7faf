"""The FRAMEWORKS table (derive_env.frameworks): one line per framework, and what reads it."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

from derive_env import labels, ports
from derive_env.frameworks import FRAMEWORKS, Framework
from derive_env.labels import PREFIX
from derive_env.policy import FRAMEWORK_NAMES, ImagePolicy

PORTED = [line for line in FRAMEWORKS if line.port_label is not None]


def test_every_line_names_a_module_with_derive() -> None:
    for line in FRAMEWORKS:
        module = importlib.import_module(line.module)
        assert callable(module.derive), line.name
        assert line.module == f"derive_env.frameworks.{line.name}"
    assert len({line.name for line in FRAMEWORKS}) == len(FRAMEWORKS)


def test_lines() -> None:
    assert [line.name for line in FRAMEWORKS] == ["pytorch", "tensorflow", "jax", "network"]
    assert [line.name for line in FRAMEWORKS if line.always] == ["network"]
    network = FRAMEWORKS[-1]
    assert (network.port_label, network.default_port) == (None, None)


def test_port_labels_are_unique_and_have_a_default() -> None:
    names = [line.port_label for line in PORTED]
    assert names == ["master-port", "tensorflow-port", "jax-port"]
    assert len(set(names)) == len(names)
    assert all(1 <= int(line.default_port) <= 65535 and line.serves for line in PORTED)
    assert len({line.default_port for line in PORTED}) == len(PORTED)


def test_policy_reads_the_table() -> None:
    assert FRAMEWORK_NAMES == ("pytorch", "tensorflow", "jax")  # not network: always derived
    policy = ImagePolicy.from_labels({PREFIX + "frameworks": "jax"})
    assert policy.ports == {line.name: line.default_port for line in PORTED}
    assert {PREFIX + line.port_label for line in PORTED} <= ImagePolicy.known_labels()
    assert (policy.master_port, policy.tensorflow_port, policy.jax_port) == (29500, 2222, 1234)


def test_labels_and_ports_read_the_table() -> None:
    names = labels.label_names()
    assert names[1:1 + len(PORTED)] == tuple(line.port_label for line in PORTED)
    assert ports.port_order() == tuple(line.name for line in PORTED)
    assert len(ports.job_ports("slurm", "1", "0")) == len(PORTED)


def test_the_table_imports_nothing() -> None:
    """labels.near_miss loads it on starts that did not opt in: no typing, no pydantic."""
    code = ("import sys; before = set(sys.modules); import derive_env.frameworks; "
            "print(sorted(m for m in set(sys.modules) - before if m.startswith(('derive_env', "
            "'typing', 'pydantic'))))")
    run = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True,
                         timeout=60, check=True)
    assert run.stdout == "['derive_env', 'derive_env.frameworks']\n"


#: A framework added as one module plus one line, in a fresh interpreter: the label accepts
#: it, its port label is known (and a near miss of it is caught), the port policy gives it a
#: port, and the pipeline derives its variables.
ONE_MORE = """
import json, sys, types
import derive_env.frameworks as table
from derive_env.frameworks.context import JOB, Contribution, variable

module = types.ModuleType("derive_env.frameworks.mxnet")
var = variable("mxnet")
def derive(ctx):
    port = ctx.policy.ports["mxnet"]
    return Contribution([var("DMLC_NUM_WORKER", ctx.topology.num_nodes, "test", scope=JOB,
                             what="the number of workers"),
                         var("DMLC_PS_ROOT_PORT", port, "test", scope=JOB, what="the port")])
module.derive = derive
sys.modules[module.__name__] = module
table.FRAMEWORKS = (*table.FRAMEWORKS[:-1],
                    table.Framework("mxnet", module.__name__, port_label="mxnet-port",
                                    default_port=9091, serves="MXNet's"), table.FRAMEWORKS[-1])

from derive_env import labels, ports
from derive_env.pipeline import derive as derive_all
P = "ai.backend.distributed."
got = derive_all({}, {P + "frameworks": "pytorch,mxnet", P + "mxnet-port": "9999"})
print(json.dumps({
    "changes": {k: v for k, v in got.changes().items() if k.startswith("DMLC")},
    "near_miss": labels.near_miss("ai.backend.mxnet-port"),
    "order": ports.port_order(),
}))
"""


def test_a_new_framework_is_one_module_and_one_line() -> None:
    run = subprocess.run([sys.executable, "-I", "-c", ONE_MORE], capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == {
        "changes": {"DMLC_NUM_WORKER": "1", "DMLC_PS_ROOT_PORT": "9999"},
        "near_miss": ["ai.backend.distributed.mxnet-port",
                      "a derive-env label name under ai.backend."],
        "order": ["pytorch", "tensorflow", "jax", "mxnet"],
    }


def test_framework_lines_default_to_no_port() -> None:
    line = Framework("x", "derive_env.frameworks.x")
    assert (line.port_label, line.default_port, line.serves, line.always) == (
        None, None, None, False)


def test_what_a_node_decides_alone_is_marked_on_the_variable(backendai_env) -> None:
    """Its interfaces, its GPU count, its devices: ``node_decided``, read by the job digest
    and the whole-job view; nothing else of the derivation."""
    from derive_env.frameworks.context import HostFacts
    from derive_env.pipeline import derive

    env = {**backendai_env(["main1", "sub1"], "sub1"), "GPU_COUNT": "2"}
    labels = {PREFIX + "frameworks": "pytorch,tensorflow,jax"}
    derivation = derive(env, labels, HostFacts(interfaces=("baimulti0",)))
    assert [v.name for v in derivation.variables if v.node_decided] == [
        "PET_NPROC_PER_NODE", "JAX_LOCAL_DEVICE_IDS", "GLOO_SOCKET_IFNAME",
        "NCCL_SOCKET_IFNAME"]
