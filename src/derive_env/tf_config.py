"""``TF_CONFIG``: TensorFlow's cluster spec and this task, as a pydantic model.

Rules followed (tensorflow/python/distribute/cluster_resolver/tfconfig_cluster_resolver.py,
multi_worker_util.py): ``{"cluster": {type: ["host:port", ...]}, "task": {"type": t,
"index": i}}``, the index a task's position in its type's list, from 0. Read strictly: the
index is a JSON integer (``true`` or ``1.0`` is not one), every host a string, no other
keys. Used to build the derived ``TF_CONFIG`` (:mod:`derive_env.frameworks.tensorflow`) and
to read a user-set one (:func:`derive_env.merge.same_value`). Imported only where a
``TF_CONFIG`` is built or read.
"""

from __future__ import annotations

import json

from pydantic import BaseModel, ConfigDict, Field, ValidationError


class Task(BaseModel):
    """This task: its type (``chief``, ``worker``, ``ps``, ``evaluator``) and its index
    in that type's list of the cluster (an integer >= 0)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    type: str
    index: int = Field(ge=0)


class TFConfig(BaseModel):
    """A ``TF_CONFIG`` document: the cluster (task type -> ``host:port`` of each task of
    that type, IPv6 hosts bracketed) and this task."""

    model_config = ConfigDict(extra="forbid", strict=True)

    cluster: dict[str, list[str]]
    task: Task

    def to_json(self) -> str:
        """Compact JSON (no blanks), keys in the order ``cluster`` (as given), ``task``
        (``type``, ``index``); non-ASCII characters escaped (``\\u00e9``), as
        ``json.dumps(..., separators=(",", ":"))`` writes it."""
        text = self.model_dump_json()
        # pydantic writes non-ASCII characters and DEL as they are; host names hold none.
        if text.isascii() and text.isprintable():
            return text
        return json.dumps(self.model_dump(), separators=(",", ":"))

    @classmethod
    def read(cls, document: object) -> TFConfig | None:
        """A parsed JSON document (``json.loads``) as a ``TF_CONFIG``; ``None`` when it is
        not one (see the module docstring)."""
        try:
            return cls.model_validate(document)
        except ValidationError:
            return None


class GivenTask(Task):
    """This task as a manager wrote it: :class:`Task`, other keys ignored (Vertex AI's
    ``trial`` and ``cloud``)."""

    model_config = ConfigDict(extra="ignore", strict=True)


class GivenTFConfig(BaseModel):
    """A ``TF_CONFIG`` (or Vertex AI's ``CLUSTER_SPEC``) as a manager wrote it, read as a
    source (:mod:`derive_env.sources.managers.tfconfig`), never rewritten.

    Other keys are ignored (TFJob's ``environment``, Vertex AI's ``job``). Either
    ``cluster`` (task type -> every task's ``host:port``) or, from a TFJob with
    ``enableDynamicWorker``, ``sparseCluster`` (kubeflow/trainer
    ``pkg/controller.v1/tensorflow/tensorflow.go``, ``SparseTFConfig``: ``worker`` a map
    index -> ``host:port`` holding only this worker, ``ps`` a list).
    """

    model_config = ConfigDict(extra="ignore", strict=True, populate_by_name=True)

    cluster: dict[str, list[str]] | None = None
    sparse: dict[str, list[str] | dict[str, str]] | None = Field(None, alias="sparseCluster")
    task: GivenTask

    @classmethod
    def parse(cls, text: str) -> GivenTFConfig | None:
        """``text`` (JSON) as a ``TF_CONFIG``; ``None`` when it is not JSON, or not one with
        a ``task`` and a ``cluster`` or ``sparseCluster``."""
        try:
            found = cls.model_validate(json.loads(text))
        except (ValueError, ValidationError, RecursionError):
            return None
        return found if (found.cluster is None) != (found.sparse is None) else None
