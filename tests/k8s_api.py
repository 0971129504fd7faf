"""The field lists of the Kubernetes APIs the docs' manifests use, as test data (issue 16 item 9).

tests/sources/test_manifests.py checks every key path of every Kubernetes manifest in docs/
against the API of its ``apiVersion`` and ``kind``. The APIs are read from the controllers' own
code and kept, reduced to their field names, in ``tests/data/k8s-api/*.json``, one file per
upstream file, each naming the repository, commit and path (or the package) it came from:

* a controller's CRD (controller-gen's ``openAPIV3Schema``, which it writes from the Go types)::

      python tests/k8s_api.py crd CRD.yaml --source OWNER/REPO@COMMIT:PATH

  adds every served version of its kind. Adding a controller's kind is this one file: the test
  picks it up (and every ```yaml block of docs/ with an ``apiVersion`` and a ``kind`` is checked).
* the core kinds (Pod, Service, batch/v1 Job), from the models of the Kubernetes Python client,
  which its generator writes from kubernetes/kubernetes ``api/openapi-spec`` (one model per
  OpenAPI definition: ``openapi_types`` and ``attribute_map`` are the definition's properties)::

      python tests/k8s_api.py core SITE-PACKAGES/kubernetes/client/models --source kubernetes==V

The reduced form (a *node*): ``"scalar"``; ``"any"`` (free-form: any keys below it);
``"pruned"`` (an object whose schema names no field and does not preserve unknown ones: the API
server drops every key under it, e.g. the pod template's ``metadata`` in a CRD written without
``generateEmbeddedObjectMeta``); ``{"$list": node}``; ``{"$map": node}`` (any key, each value a
node); ``{"$ref": name}`` (a definition of the same file, else of the core file); any other dict
is an object, field name -> node. A CRD's root ``metadata`` is the core ``ObjectMeta`` (the API
server validates it as such, whatever the CRD says).
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from pathlib import Path

import yaml

DATA = Path(__file__).resolve().parent / "data" / "k8s-api"
CORE = "kubernetes-core.json"
OBJECT_META = "V1ObjectMeta"
#: The core kinds the docs use: (apiVersion kind) -> the client's model.
CORE_KINDS = {"v1 Pod": "V1Pod", "v1 Service": "V1Service", "batch/v1 Job": "V1Job",
              "v1 ConfigMap": "V1ConfigMap"}


# --------------------------------------------------------------------------- CRDs


def schema_node(schema: dict) -> object:
    """An ``openAPIV3Schema`` (structural, as controller-gen writes it) -> a node."""
    if schema.get("x-kubernetes-int-or-string"):
        return "scalar"
    kind = schema.get("type")
    if kind == "array":
        return {"$list": schema_node(schema.get("items", {}))}
    properties = schema.get("properties")
    if properties:
        if schema.get("x-kubernetes-preserve-unknown-fields"):
            return "any"
        return {name: schema_node(sub) for name, sub in sorted(properties.items())}
    additional = schema.get("additionalProperties")
    if isinstance(additional, dict):
        return {"$map": schema_node(additional)}
    if additional is True or schema.get("x-kubernetes-preserve-unknown-fields"):
        return "any"
    if kind == "object":
        return "pruned"
    return "any" if kind is None else "scalar"


def crd_kinds(crd: dict) -> dict[str, object]:
    """``"<group>/<version> <Kind>"`` -> its node, for every served version of a CRD."""
    spec = crd["spec"]
    kinds: dict[str, object] = {}
    for version in spec["versions"]:
        if not version.get("served", True):
            continue
        root = schema_node(version["schema"]["openAPIV3Schema"])
        assert isinstance(root, dict), version["name"]
        root["metadata"] = {"$ref": OBJECT_META}
        kinds[f"{spec['group']}/{version['name']} {spec['names']['kind']}"] = root
    return kinds


# --------------------------------------------------------------------------- core


def _model_fields(path: Path) -> tuple[str, dict[str, str], dict[str, str]]:
    """The model class of a client model file: its name, ``openapi_types``, ``attribute_map``."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ClassDef):
            found = {}
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name) and (
                        item.target.id in ("openapi_types", "attribute_map")):
                    found[item.target.id] = ast.literal_eval(item.value)
            return node.name, found.get("openapi_types", {}), found.get("attribute_map", {})
    raise ValueError(f"{path}: no model class")


def _type_node(text: str, models: dict[str, Path], wanted: list[str]) -> object:
    match = re.fullmatch(r"list\[(.+)\]", text, re.I)
    if match:
        return {"$list": _type_node(match[1], models, wanted)}
    match = re.fullmatch(r"dict[\[(]str, (.+)[\])]", text, re.I)
    if match:
        return {"$map": _type_node(match[1], models, wanted)}
    if text in models:
        wanted.append(text)
        return {"$ref": text}
    return "any" if text == "object" else "scalar"


def core_definitions(models_dir: Path, roots: list[str]) -> dict[str, object]:
    """The client's models reachable from ``roots``, each as field name -> node."""
    models = {}
    for path in sorted(models_dir.glob("v*.py")):
        match = re.search(r"^class (\w+)\(", path.read_text(encoding="utf-8"), re.M)
        if match:
            models[match[1]] = path
    definitions: dict[str, object] = {}
    wanted = list(roots)
    while wanted:
        name = wanted.pop()
        if name in definitions:
            continue
        _, types, names = _model_fields(models[name])
        definitions[name] = {names[attr]: _type_node(kind, models, wanted)
                             for attr, kind in sorted(types.items(), key=lambda i: names[i[0]])}
    return dict(sorted(definitions.items()))


# --------------------------------------------------------------------------- the data


def load() -> tuple[dict[str, tuple[object, str, dict]], dict[str, object]]:
    """Every kind of ``tests/data/k8s-api``: ``"apiVersion Kind"`` -> (node, source, the
    file's definitions), and the core definitions."""
    kinds: dict[str, tuple[object, str, dict]] = {}
    core = json.loads((DATA / CORE).read_text(encoding="utf-8"))
    for path in sorted(DATA.glob("*.json")):
        document = json.loads(path.read_text(encoding="utf-8"))
        definitions = document.get("definitions", {})
        for kind, node in document["kinds"].items():
            assert kind not in kinds, f"{kind} in two files"
            kinds[kind] = (node, document["source"], definitions)
    return kinds, core["definitions"]


def _write(name: str, document: dict) -> Path:
    DATA.mkdir(parents=True, exist_ok=True)
    path = DATA / name
    path.write_text(json.dumps(document, indent=0, sort_keys=False, separators=(",", ":"))
                    + "\n", encoding="utf-8")
    return path


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("what", choices=("crd", "core"))
    parser.add_argument("path", type=Path)
    parser.add_argument("--source", required=True,
                        help="OWNER/REPO@COMMIT:PATH of a CRD, or the client package==VERSION")
    args = parser.parse_args(argv)
    if args.what == "crd":
        crds = [d for d in yaml.safe_load_all(args.path.read_text(encoding="utf-8"))
                if isinstance(d, dict) and d.get("kind") == "CustomResourceDefinition"]
        assert len(crds) == 1, args.path
        document = {"source": args.source, "kinds": crd_kinds(crds[0])}
        name = f"{crds[0]['spec']['group']}_{crds[0]['spec']['names']['plural']}.json"
    else:
        kinds = dict(CORE_KINDS)
        document = {"source": args.source,
                    "kinds": {kind: {"$ref": model} for kind, model in kinds.items()},
                    "definitions": core_definitions(args.path, list(kinds.values()))}
        name = CORE
    print(_write(name, document))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
