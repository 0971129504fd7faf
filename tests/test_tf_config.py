"""TF_CONFIG as a model (derive_env.tf_config): strict reading, compact writing."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from derive_env.tf_config import Task, TFConfig

DOCUMENT = '{"cluster":{"chief":["main1:2222"],"worker":["sub1:2222","[2001:db8::2]:2222"]},' \
           '"task":{"type":"worker","index":1}}'


def test_to_json_is_compact_in_key_order() -> None:
    config = TFConfig(cluster={"chief": ["main1:2222"],
                               "worker": ["sub1:2222", "[2001:db8::2]:2222"]},
                      task=Task(type="worker", index=1))
    assert config.to_json() == DOCUMENT
    # The text json.dumps gave before the model: the same bytes.
    assert config.to_json() == json.dumps(json.loads(DOCUMENT), separators=(",", ":"))


@pytest.mark.parametrize("host", ["h\u00e9:1", 'a"b:1', "a\\b:1", "a\tb:1", "a/b:1", "\x7f:1"])
def test_to_json_escapes_as_json_dumps(host: str) -> None:
    config = TFConfig(cluster={"worker": [host]}, task=Task(type="worker", index=0))
    assert config.to_json() == json.dumps(config.model_dump(), separators=(",", ":"))


def test_round_trip() -> None:
    config = TFConfig.read(json.loads(DOCUMENT))
    assert config is not None
    assert config.task == Task(type="worker", index=1)
    assert config.to_json() == DOCUMENT
    assert TFConfig.read(json.loads(config.to_json())) == config


@pytest.mark.parametrize("index", [True, False, 1.0, "1", -1, None])
def test_the_index_is_a_json_integer(index: object) -> None:
    """json.loads equates true with 1 and 1.0 with 1; TensorFlow's task index is an int."""
    document = json.loads(DOCUMENT)
    document["task"]["index"] = index
    assert TFConfig.read(document) is None
    document["task"]["index"] = 1
    assert TFConfig.read(document) is not None


@pytest.mark.parametrize("document", [
    [], {}, "x", {"cluster": {"worker": ["a:1"]}},
    {"cluster": {"worker": "a:1"}, "task": {"type": "worker", "index": 0}},
    {"cluster": {"worker": [1]}, "task": {"type": "worker", "index": 0}},
    {"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0}, "environment": "x"},
    {"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0, "trial": 1}},
    {"cluster": {"worker": ["a:1"]}, "task": {"index": 0}},
])
def test_not_a_tf_config(document: object) -> None:
    assert TFConfig.read(document) is None


def test_key_order_does_not_matter() -> None:
    one = TFConfig.read(json.loads(DOCUMENT))
    other = TFConfig.read({"task": {"index": 1, "type": "worker"},
                           "cluster": {"worker": ["sub1:2222", "[2001:db8::2]:2222"],
                                       "chief": ["main1:2222"]}})
    assert one == other
    assert one != TFConfig.read({**json.loads(DOCUMENT), "task": {"type": "worker", "index": 0}})


@given(hosts=st.lists(st.from_regex(r"[a-z][a-z0-9-]{0,8}:[1-9][0-9]{0,3}", fullmatch=True),
                      min_size=1, max_size=6, unique=True),
       index=st.integers(0, 5))
def test_round_trip_property(hosts: list[str], index: int) -> None:
    config = TFConfig(cluster={"worker": hosts}, task=Task(type="worker", index=index))
    assert TFConfig.read(json.loads(config.to_json())) == config


LOADED = """
import json, sys
from derive_env.pipeline import derive
env = {"BACKENDAI_CLUSTER_SIZE": "2", "BACKENDAI_CLUSTER_HOSTS": "main1,sub1",
       "BACKENDAI_CLUSTER_HOST": "sub1", "BACKENDAI_CLUSTER_ROLE": "sub",
       "BACKENDAI_CLUSTER_IDX": "1", "BACKENDAI_CLUSTER_REPLICAS": "main:1,sub:1"}
frameworks, nodes = sys.argv[1], int(sys.argv[2])
derivation = derive(env if nodes > 1 else {}, {"ai.backend.distributed.frameworks": frameworks})
print(json.dumps(["TF_CONFIG" in derivation.changes(), "derive_env.tf_config" in sys.modules]))
"""


@pytest.mark.parametrize(("frameworks", "nodes", "loaded"), [
    ("pytorch", 2, [False, False]), ("pytorch,jax", 2, [False, False]),
    ("tensorflow", 1, [False, False]),  # a single container: no TF_CONFIG, no model
    ("pytorch,tensorflow", 2, [True, True]),
])
def test_the_model_is_loaded_only_where_tf_config_is_built(frameworks, nodes, loaded) -> None:
    run = subprocess.run([sys.executable, "-I", "-c", LOADED, frameworks, str(nodes)],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == loaded


def test_a_given_tf_config_ignores_the_managers_other_keys() -> None:
    """TFJob's ``environment``, Vertex AI's ``job`` and ``task.trial`` (GivenTFConfig)."""
    from derive_env.tf_config import GivenTFConfig

    found = GivenTFConfig.parse('{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", '
                                '"index": 0, "trial": ""}, "environment": "cloud", "job": "{}"}')
    assert found is not None
    assert (found.cluster, found.sparse, found.task.type, found.task.index) == (
        {"worker": ["a:1"]}, None, "worker", 0)


def test_a_given_tf_config_reads_the_sparse_tfjob_form() -> None:
    from derive_env.tf_config import GivenTFConfig

    found = GivenTFConfig.parse('{"sparseCluster": {"worker": {"1": "w-1:2222"}, "ps": '
                                '["p-0:2222"]}, "task": {"type": "worker", "index": 1}}')
    assert found is not None
    assert (found.cluster, found.sparse) == (
        None, {"worker": {"1": "w-1:2222"}, "ps": ["p-0:2222"]})


@pytest.mark.parametrize("text", [
    "", "[]", "null", '{"task": {"type": "worker", "index": 0}}',
    '{"cluster": {}, "sparseCluster": {}, "task": {"type": "worker", "index": 0}}',
    '{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 1.0}}',
    "[" * 5000])
def test_not_a_given_tf_config(text: str) -> None:
    from derive_env.tf_config import GivenTFConfig

    assert GivenTFConfig.parse(text) is None
