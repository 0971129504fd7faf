"""ImagePolicy: the image's ``ai.backend.distributed.*`` labels, validated.

Label reference (contract section 4, issue #3; docs/operator-guide.md has the table):

===============================================  ===========================================
label                                            value (default)
===============================================  ===========================================
``ai.backend.distributed.frameworks``            comma list of ``pytorch``, ``tensorflow``,
                                                 ``jax`` (absent: not opted in)
``ai.backend.distributed.master-port``           1-65535 (29500, PyTorch's default)
``ai.backend.distributed.tensorflow-port``       1-65535 (2222)
``ai.backend.distributed.jax-port``              1-65535 (1234, the port of JAX's docs)
``ai.backend.distributed.pytorch-mode``          ``torchrun`` | ``process-per-container``
``ai.backend.distributed.nproc-per-node``        integer >= 1 (the GPU count, when > 0)
``ai.backend.distributed.tensorflow-roles``      ``role:type`` pairs, type one of chief,
                                                 worker, ps, evaluator (every node a worker)
``ai.backend.distributed.socket-ifname``         ``auto``, ``none`` or an interface name
                                                 (unset: ``baimulti0`` when present in a
                                                 session of more than one node)
``ai.backend.distributed.on-error``              ``fail`` | ``warn`` (``fail``)
===============================================  ===========================================

Unknown keys under the prefix, near misses of the prefix, unknown framework names and bad
values are errors, all reported at once: a typo must never silently turn distribution off.
Letter case: keyword values (framework names, ``pytorch-mode``, ``on-error``, the task types
of ``tensorflow-roles``, ``auto``) are matched without regard to case; names (interfaces,
roles) are taken as written.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from derive_env.errors import LabelError, describe, shorten
from derive_env.hosts import ROLE_NAME
from derive_env.labels import (
    FRAMEWORK_NAMES,
    PREFIX,
    distributed_labels,
    join_problems,
    label_problems,
)
from derive_env.validation import errors_of, parse_int, parse_port

TF_TASK_TYPES = ("chief", "worker", "ps", "evaluator")
_ROLE = ROLE_NAME  # the Backend.AI source's rule: a role may end in digits (a100)
#: Linux interface names: 1-15 characters, no '/', blanks or ':' (dev_valid_name()).
_IFNAME = re.compile(r"[A-Za-z0-9_.@-]{1,15}\Z")


def _frameworks(value: object) -> tuple[str, ...]:
    expected = f"a comma list of {', '.join(FRAMEWORK_NAMES)}"
    if not isinstance(value, str):
        raise ValueError(expected)
    if not value.strip():
        raise ValueError(f"{expected}; the value is empty (remove the label to opt out)")
    names: list[str] = []
    for part in value.split(","):
        name = part.strip().lower()
        if name not in FRAMEWORK_NAMES:
            shown = shorten(part.strip(), 60) or "(empty)"
            raise ValueError(f"{expected}; {shown!r} is not one")
        if name not in names:
            names.append(name)
    return tuple(names)


def _tf_roles(value: object) -> tuple[tuple[str, str], ...]:
    expected = (
        "comma-separated role:task-type pairs such as main:chief,sub:worker, the task "
        f"type one of {', '.join(TF_TASK_TYPES)}"
    )
    if not isinstance(value, str):
        raise ValueError(expected)
    pairs: list[tuple[str, str]] = []
    for part in value.split(","):
        role, sep, task_type = (s.strip() for s in part.partition(":"))
        task_type = task_type.lower()
        if not sep or not _ROLE.match(role) or task_type not in TF_TASK_TYPES:
            raise ValueError(f"{expected}; {shorten(part.strip(), 60)!r} is not one")
        if role in dict(pairs):
            raise ValueError(f"{expected}; role {shorten(role, 60)!r} is mapped twice")
        pairs.append((role, task_type))
    return tuple(pairs)


def _ifname(value: object) -> str:
    if not isinstance(value, str) or not _IFNAME.match(value):
        raise ValueError(
            "'auto', 'none' or a network interface name (1-15 characters, e.g. eth0)"
        )
    # Keywords ignore letter case (the label-value rule); interface names are exact.
    return value.lower() if value.lower() in ("auto", "none") else value


def _positive(value: object) -> int:
    return parse_int(value, minimum=1, what="an integer >= 1")


def _choice(*choices: str) -> BeforeValidator:
    def parse(value: object) -> str:
        if not isinstance(value, str) or value.lower() not in choices:
            raise ValueError(" or ".join(choices))
        return value.lower()

    return BeforeValidator(parse)


_Port = Annotated[int, BeforeValidator(parse_port)]


class ImagePolicy(BaseModel):
    """What an opted-in image asks for: frameworks, ports, modes.

    Build it with :meth:`from_labels`. Ports are TCP port numbers.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    frameworks: Annotated[tuple[str, ...], BeforeValidator(_frameworks)] = Field(
        alias=PREFIX + "frameworks"
    )
    master_port: _Port = Field(29500, alias=PREFIX + "master-port")
    tensorflow_port: _Port = Field(2222, alias=PREFIX + "tensorflow-port")
    jax_port: _Port = Field(1234, alias=PREFIX + "jax-port")
    pytorch_mode: Annotated[
        Literal["torchrun", "process-per-container"],
        _choice("torchrun", "process-per-container"),
    ] = Field("torchrun", alias=PREFIX + "pytorch-mode")
    nproc_per_node: Annotated[int | None, BeforeValidator(_positive)] = Field(
        None, alias=PREFIX + "nproc-per-node"
    )
    tensorflow_roles: Annotated[tuple[tuple[str, str], ...] | None, BeforeValidator(_tf_roles)] = (
        Field(None, alias=PREFIX + "tensorflow-roles")
    )
    socket_ifname: Annotated[str | None, BeforeValidator(_ifname)] = Field(
        None, alias=PREFIX + "socket-ifname"
    )
    on_error: Annotated[Literal["fail", "warn"], _choice("fail", "warn")] = Field(
        "fail", alias=PREFIX + "on-error"
    )
    #: the labels that were set, for provenance (``label ... = value``).
    given: tuple[str, ...] = Field(default=(), exclude=True)

    @classmethod
    def from_labels(cls, labels: Mapping[str, str]) -> ImagePolicy:
        """Validate the labels of an opted-in image.

        :param labels: label -> value, every label of the image (other prefixes are
            ignored, but near misses of ``ai.backend.distributed.`` are reported).
        :raises LabelError: near misses of the prefix, unknown keys under it, bad values:
            every problem in one message, each naming the label, its value and what was
            expected.
        """
        problems = label_problems(labels)
        labels = distributed_labels(labels)
        known = {f.alias for f in cls.model_fields.values() if f.alias}
        for key in sorted(labels):
            if key not in known:
                problems.append(describe(
                    f"label {key}", labels[key],
                    "a known label; known: " + ", ".join(sorted(known)),
                ))
        try:
            policy = cls.model_validate(
                {**{k: v for k, v in labels.items() if k in known}, "given": tuple(sorted(labels))}
            )
        except ValidationError as exc:
            problems += errors_of(exc, kind="label ")
            policy = None
        if problems:
            raise LabelError(join_problems(problems))
        assert policy is not None
        return policy

    def label_or_default(self, field: str) -> str:
        """Provenance of a field: ``label <key>`` when set, else ``default``."""
        alias = type(self).model_fields[field].alias
        return f"label {alias}" if alias in self.given else "default"

