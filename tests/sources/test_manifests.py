"""The Kubernetes manifests of docs/ name only fields of their controllers' APIs (issue 16 item 9).

So do those of examples/kubernetes/ (one per controller family; tests/test_examples.py
checks that each is the docs' manifest, character for character).

Every ```yaml block of every page under docs/ is parsed (all of its documents); each document
with an ``apiVersion`` and a ``kind`` is a manifest, and every key path in it must be a field
of that kind's API, read from the controller's own code: the field lists under
``tests/data/k8s-api/`` (tests/k8s_api.py writes them from a CRD's ``openAPIV3Schema`` or from
the core API's models, and each names the repository, commit and file it came from). A page
that shows a manifest of a kind with no field list fails, naming the command that adds one: a
new controller's kind is one file there. A typo fails (the negative tests below).

Values are not checked (the controllers' own validation does that), only the names.
"""

from __future__ import annotations

import copy
import re
from functools import cache
from pathlib import Path

import pytest
import yaml

from k8s_api import load

DOCS = Path(__file__).resolve().parents[2] / "docs"


@cache
def api() -> tuple[dict, dict]:
    return load()


def doc_manifests() -> list[tuple[str, int, dict]]:
    """(page, document number on the page, manifest) for every manifest in docs/."""
    found = []
    for page in sorted(DOCS.rglob("*.md")):
        blocks = re.findall(r"```yaml\n(.*?)```", page.read_text(encoding="utf-8"), re.S)
        documents = [d for block in blocks for d in yaml.safe_load_all(block)]
        found += [(str(page.relative_to(DOCS)), n, d) for n, d in enumerate(documents)
                  if isinstance(d, dict) and "apiVersion" in d and "kind" in d]
    return found


def problems(manifest: dict) -> list[str]:
    """Every key path of ``manifest`` that its kind's API does not have, as messages."""
    kinds, core = api()
    kind = f"{manifest['apiVersion']} {manifest['kind']}"
    if kind not in kinds:
        return [f"{kind}: no field list in tests/data/k8s-api (add the controller's CRD: "
                "python tests/k8s_api.py crd CRD.yaml --source OWNER/REPO@COMMIT:PATH)"]
    node, _, definitions = kinds[kind]
    found: list[str] = []
    _walk(manifest, node, manifest["kind"], {**core, **definitions}, found)
    return found


def _walk(value: object, node: object, path: str, definitions: dict, found: list[str]) -> None:
    while isinstance(node, dict) and "$ref" in node:
        node = definitions[node["$ref"]]
    if node == "any" or value is None:
        return
    if node == "scalar":
        if isinstance(value, (dict, list)):
            found.append(f"{path}: a value, not a {type(value).__name__}, in the API")
        return
    if node == "pruned":
        if value:
            found.append(f"{path}: the API has no field here ({', '.join(value)} would be "
                         "dropped by the API server)")
        return
    assert isinstance(node, dict), node
    if "$list" in node or "$map" in node:
        items = (enumerate(value) if isinstance(value, list) and "$list" in node else
                 value.items() if isinstance(value, dict) and "$map" in node else None)
        if items is None:
            want = "list" if "$list" in node else "mapping"
            found.append(f"{path}: a {want} in the API, not a {type(value).__name__}")
            return
        for key, item in items:
            sub = f"{path}[{key}]" if "$list" in node else f"{path}.{key}"
            _walk(item, node.get("$list", node.get("$map")), sub, definitions, found)
        return
    if not isinstance(value, dict):
        found.append(f"{path}: a mapping in the API, not a {type(value).__name__}")
        return
    for key, item in value.items():
        if key not in node:
            found.append(f"{path}.{key}: no such field (the API has: {', '.join(sorted(node))})")
        else:
            _walk(item, node[key], f"{path}.{key}", definitions, found)


MANIFESTS = doc_manifests()


def test_the_docs_show_manifests_of_every_kubernetes_source() -> None:
    """The manifests this test guards are found (a changed fence would make it vacuous)."""
    kinds = {(page, f"{m['apiVersion']} {m['kind']}") for page, _, m in MANIFESTS}
    assert {("sources/kubernetes.md", "leaderworkerset.x-k8s.io/v1 LeaderWorkerSet"),
            ("sources/kubernetes.md", "kubeflow.org/v1 TFJob"),
            ("sources/kubernetes.md", "v1 Service"),
            ("sources/kubernetes.md", "batch/v1 Job"),
            ("sources/kubernetes.md", "batch.volcano.sh/v1alpha1 Job"),
            ("sources/kubeflow.md", "kubeflow.org/v1 PyTorchJob"),
            ("sources/kubeflow.md", "trainer.kubeflow.org/v1alpha1 TrainJob")} <= kinds


@pytest.mark.parametrize("manifest", [m for _, _, m in MANIFESTS],
                         ids=[f"{page}#{n}-{m['kind']}" for page, n, m in MANIFESTS])
def test_manifest_names_only_fields_of_its_api(manifest: dict) -> None:
    assert problems(manifest) == []


EXAMPLES = DOCS.parent / "examples" / "kubernetes"
#: (file, document number in it, manifest) for every manifest of examples/kubernetes/.
EXAMPLE_MANIFESTS = [
    (path.name, n, document) for path in sorted(EXAMPLES.glob("*.yaml"))
    for n, document in enumerate(yaml.safe_load_all(path.read_text(encoding="utf-8")))]


def test_examples_hold_a_manifest_per_controller_family() -> None:
    assert sorted((name, f"{m['apiVersion']} {m['kind']}") for name, _, m in EXAMPLE_MANIFESTS) == [
        ("indexed-job.yaml", "batch/v1 Job"), ("indexed-job.yaml", "v1 Service"),
        ("jobset.yaml", "jobset.x-k8s.io/v1alpha2 JobSet"),
        ("leaderworkerset.yaml", "leaderworkerset.x-k8s.io/v1 LeaderWorkerSet"),
        ("pytorchjob.yaml", "kubeflow.org/v1 PyTorchJob")]


@pytest.mark.parametrize("manifest", [m for _, _, m in EXAMPLE_MANIFESTS],
                         ids=[f"{name}#{n}-{m['kind']}" for name, n, m in EXAMPLE_MANIFESTS])
def test_example_manifest_names_only_fields_of_its_api(manifest: dict) -> None:
    assert problems(manifest) == []


def test_every_field_list_names_its_source() -> None:
    kinds, _ = api()
    for kind, (_, source, _) in kinds.items():
        assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}:\S+\.yaml|kubernetes==\d+\.\d+\.\d+ .+",
                            source), (kind, source)


# --------------------------------------------------------------------------- a typo fails


def _docs_manifest(kind: str) -> dict:
    found, *_ = [m for _, _, m in MANIFESTS if f"{m['apiVersion']} {m['kind']}" == kind]
    return copy.deepcopy(found)


def test_a_misspelt_crd_field_fails() -> None:
    lws = _docs_manifest("leaderworkerset.x-k8s.io/v1 LeaderWorkerSet")
    lws["spec"]["leaderWorkerTemplate"]["sise"] = lws["spec"]["leaderWorkerTemplate"].pop("size")
    assert problems(lws) == [
        "LeaderWorkerSet.spec.leaderWorkerTemplate.sise: no such field (the API has: "
        "leaderTemplate, persistentVolumeClaimRetentionPolicy, restartPolicy, size, "
        "subGroupPolicy, volumeClaimTemplates, workerTemplate)"]


def test_a_misspelt_pod_field_deep_in_a_crd_fails() -> None:
    job = _docs_manifest("batch.volcano.sh/v1alpha1 Job")
    container = job["spec"]["tasks"][1]["template"]["spec"]["containers"][0]
    container["env"] = [{"name": "X", "valueFrom": {"fieldRef": {"fieldPat": "metadata.name"}}}]
    assert problems(job) == [
        "Job.spec.tasks[1].template.spec.containers[0].env[0].valueFrom.fieldRef.fieldPat: no "
        "such field (the API has: apiVersion, fieldPath)"]


def test_a_misspelt_core_field_fails() -> None:
    job = _docs_manifest("batch/v1 Job")
    job["spec"]["template"]["spec"]["subDomain"] = job["spec"]["template"]["spec"].pop("subdomain")
    service = _docs_manifest("v1 Service")
    service["spec"]["publishNotReadyAdresses"] = True
    assert [p.split(" (the API has")[0] for p in problems(job) + problems(service)] == [
        "Job.spec.template.spec.subDomain: no such field",
        "Service.spec.publishNotReadyAdresses: no such field"]


def test_a_misspelt_metadata_field_and_a_wrong_shape_fail() -> None:
    tfjob = _docs_manifest("kubeflow.org/v1 TFJob")
    tfjob["metadata"]["label"] = {"a": "b"}
    tfjob["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = {"count": 2}
    tfjob["spec"]["tfReplicaSpecs"]["Chief"]["template"]["spec"]["containers"] = {"name": "x"}
    assert [p.split(" (the API has")[0] for p in problems(tfjob)] == [
        "TFJob.metadata.label: no such field",
        "TFJob.spec.tfReplicaSpecs.Chief.template.spec.containers: a list in the API, not a dict",
        "TFJob.spec.tfReplicaSpecs.Worker.replicas: a value, not a dict, in the API"]


def test_a_kind_without_a_field_list_fails_naming_the_step() -> None:
    assert problems({"apiVersion": "example.com/v1", "kind": "Trainer", "spec": {}}) == [
        "example.com/v1 Trainer: no field list in tests/data/k8s-api (add the controller's "
        "CRD: python tests/k8s_api.py crd CRD.yaml --source OWNER/REPO@COMMIT:PATH)"]


def test_keys_under_a_field_the_api_prunes_fail() -> None:
    from k8s_api import schema_node

    # An object whose schema names no field and keeps no unknown one: the API server drops
    # every key under it (structural schema pruning).
    node = schema_node({"type": "object", "properties": {"template": {
        "type": "object", "properties": {"metadata": {"type": "object"}}}}})
    found: list[str] = []
    _walk({"template": {"metadata": {"labels": {"a": "b"}}}}, node, "X", {}, found)
    assert found == ["X.template.metadata: the API has no field here (labels would be dropped "
                     "by the API server)"]


def test_every_crd_kind_is_read_for_each_served_version() -> None:
    kinds, _ = api()
    assert {"leaderworkerset.x-k8s.io/v1 LeaderWorkerSet", "batch.volcano.sh/v1alpha1 Job",
            "kubeflow.org/v1 TFJob", "kubeflow.org/v1 PyTorchJob",
            "trainer.kubeflow.org/v1alpha1 TrainJob",
            "trainer.kubeflow.org/v1alpha1 ClusterTrainingRuntime",
            "trainer.kubeflow.org/v1alpha1 TrainingRuntime", "jobset.x-k8s.io/v1alpha2 JobSet",
            "kubeflow.org/v1 JAXJob", "kubeflow.org/v2beta1 MPIJob",
            "v1 Pod", "v1 Service", "batch/v1 Job", "v1 ConfigMap"} <= set(kinds)
