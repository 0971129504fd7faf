"""ImagePolicy: the image's ``ai.backend.distributed.*`` labels, validated.

Label reference (docs/behaviour.md section 4; docs/operator-guide.md has the table). The framework
names and the port labels are those of :data:`derive_env.frameworks.FRAMEWORKS`:

===============================================  ===========================================
label                                            value (default)
===============================================  ===========================================
``ai.backend.distributed.frameworks``            comma list of framework names: ``pytorch``,
                                                 ``tensorflow``, ``jax`` (absent: not opted
                                                 in)
``ai.backend.distributed.<port label>``          1-65535 (the line's default port):
                                                 ``master-port`` (29500, PyTorch's default),
                                                 ``tensorflow-port`` (2222), ``jax-port``
                                                 (1234, the port of JAX's docs)
``ai.backend.distributed.pytorch-mode``          ``torchrun`` | ``process-per-container``
``ai.backend.distributed.nproc-per-node``        integer 1-1024 (the GPU count, when > 0)
``ai.backend.distributed.tensorflow-roles``      ``role:type`` pairs, type one of chief,
                                                 worker, ps, evaluator; role ``*``: every
                                                 role not listed (every node a worker)
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

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
)

from derive_env.errors import LabelError, describe, shorten
from derive_env.frameworks import FRAMEWORKS
from derive_env.hosts import ROLE_NAME
from derive_env.labels import (
    PREFIX,
    closest_key,
    distributed_labels,
    join_problems,
    label_problems,
)
from derive_env.validation import errors_of, parse_int, parse_per_node, parse_port

TF_TASK_TYPES = ("chief", "worker", "ps", "evaluator")
#: The names the frameworks label accepts, in FRAMEWORKS order.
FRAMEWORK_NAMES = tuple(line.name for line in FRAMEWORKS if not line.always)
#: The FRAMEWORKS lines with a port label.
_PORTED = tuple(line for line in FRAMEWORKS if line.port_label is not None)
#: framework name -> its full port label, and back.
_LABEL_OF = {line.name: PREFIX + str(line.port_label) for line in _PORTED}
_PORT_LABELS = {label: name for name, label in _LABEL_OF.items()}
#: the public port properties (``master_port``...) -> framework name.
_PORT_FIELDS = {str(line.port_label).replace("-", "_"): line.name for line in _PORTED}
_ROLE = ROLE_NAME  # the Backend.AI source's rule: a role may end in digits (a100)
#: Linux interface names: 1-15 characters, no '/', blanks or ':' (dev_valid_name()).
_IFNAME = re.compile(r"[A-Za-z0-9_.@-]{1,15}\Z")


def frameworks_of(value: object) -> tuple[str, ...]:
    """The frameworks label's names: stripped, lower case, each once, in the value's order.

    :raises ValueError: not a string, empty, or a name not in :data:`FRAMEWORK_NAMES`.
    """
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
        "comma-separated role:task-type pairs such as main:chief,*:worker (* maps every "
        "role not listed), the task "
        f"type one of {', '.join(TF_TASK_TYPES)}"
    )
    if not isinstance(value, str):
        raise ValueError(expected)
    pairs: list[tuple[str, str]] = []
    seen: set[str] = set()  # a set, not `in dict(pairs)`: 30000 roles stay linear
    for part in value.split(","):
        role, sep, task_type = (s.strip() for s in part.partition(":"))
        task_type = task_type.lower()
        if not sep or not (role == "*" or _ROLE.match(role)) or task_type not in TF_TASK_TYPES:
            raise ValueError(f"{expected}; {shorten(part.strip(), 60)!r} is not one")
        if role in seen:
            raise ValueError(f"{expected}; role {shorten(role, 60)!r} is mapped twice")
        seen.add(role)
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


def _per_node(value: object) -> int:
    """The ``nproc-per-node`` label: 1 to validation.MAX_PER_NODE (a process per GPU)."""
    return parse_per_node(value, minimum=1)


def _choice(*choices: str) -> BeforeValidator:
    def parse(value: object) -> str:
        if not isinstance(value, str) or value.lower() not in choices:
            raise ValueError(" or ".join(choices))
        return value.lower()

    return BeforeValidator(parse)


_Port = Annotated[int, BeforeValidator(parse_port)]


def _default_ports() -> dict[str, int]:
    return {line.name: int(line.default_port) for line in _PORTED}


def _with_defaults(ports: dict[str, int]) -> dict[str, int]:
    """Every framework with a port, in FRAMEWORKS order: the given port, else its default."""
    return {name: ports.get(name, default) for name, default in _default_ports().items()}


def _by_label(exc: ValidationError) -> ValidationError:
    """``exc`` with the port errors named by their labels (``ports.jax`` -> the
    ``jax-port`` label), as a user wrote them."""
    errors = exc.errors(include_url=False)
    if not any(error["loc"][:1] == ("ports",) for error in errors):
        return exc
    return ValidationError.from_exception_data(exc.title, [
        {"type": error["type"], "input": error["input"],
         "loc": ((_LABEL_OF[str(error["loc"][1])],) if error["loc"][:1] == ("ports",)
                 else error["loc"]),
         **({"ctx": error["ctx"]} if "ctx" in error else {})}
        for error in errors])


def _named_by_variable(problem: str, variables: tuple[tuple[str, str], ...]) -> str:
    """``problem`` (``label <key>='abc': expected ...``) naming the ``DERIVE_ENV_<NAME>``
    variable the value came from, when a variable gave it (docs/behaviour.md section 9): the user
    set the variable, not the label."""
    for label, variable in variables:
        if problem.startswith(f"label {label}="):
            return f"{variable} (label {label}){problem[len(f'label {label}'):]}"
    return problem


class ImagePolicy(BaseModel):
    """What an opted-in image asks for: frameworks, ports, modes.

    Build it with :meth:`from_labels`. Ports are TCP port numbers.

    :ivar ports: framework name -> the port its server listens on (every framework with a
        port label; the label's value, else the FRAMEWORKS line's default).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    frameworks: Annotated[tuple[str, ...], BeforeValidator(frameworks_of)] = Field(
        alias=PREFIX + "frameworks"
    )
    # Right after frameworks: label errors are listed in this order.
    ports: Annotated[dict[str, _Port], AfterValidator(_with_defaults)] = Field(
        default_factory=_default_ports)
    pytorch_mode: Annotated[
        Literal["torchrun", "process-per-container"],
        _choice("torchrun", "process-per-container"),
    ] = Field("torchrun", alias=PREFIX + "pytorch-mode")
    nproc_per_node: Annotated[int | None, BeforeValidator(_per_node)] = Field(
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
    #: ``(label, variable)`` for the labels a session variable gave (docs/behaviour.md section 9).
    variables: tuple[tuple[str, str], ...] = Field(default=(), exclude=True)

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
        variables = tuple(sorted(getattr(labels, "variables", {}).items()))
        labels = distributed_labels(labels)
        known = cls.known_labels()
        for key in sorted(labels):
            if key not in known:
                meant = closest_key(key, known)
                hint = "" if meant is None else f" (did you mean {meant}?)"
                problems.append(describe(
                    f"label {key}", labels[key],
                    f"a known label{hint}; known: " + ", ".join(sorted(known)),
                ))
        fields = {k: v for k, v in labels.items() if k in known and k not in _PORT_LABELS}
        ports = {name: labels[label] for name, label in _LABEL_OF.items() if label in labels}
        try:
            policy = cls.model_validate(
                {**fields, "ports": ports, "given": tuple(sorted(labels)),
                 "variables": variables})
        except ValidationError as exc:
            problems += [_named_by_variable(problem, variables)
                         for problem in errors_of(_by_label(exc), kind="label ")]
            policy = None
        if problems:
            raise LabelError(join_problems(problems))
        assert policy is not None
        return policy

    def __hash__(self) -> int:
        # Frozen, so hashable: the ports dict as its items.
        return hash(tuple(tuple(v.items()) if isinstance(v, dict) else v
                          for v in self.__dict__.values()))

    @classmethod
    def known_labels(cls) -> frozenset[str]:
        """Every label this policy reads: the fields' and the FRAMEWORKS port labels."""
        return frozenset(
            {f.alias for f in cls.model_fields.values() if f.alias} | set(_PORT_LABELS))

    def label_or_default(self, field: str) -> str:
        """Provenance of a field (or of a port property, ``master_port``): ``label <key>``
        when set, else ``default``."""
        if field in _PORT_FIELDS:
            return self.port_provenance(_PORT_FIELDS[field])
        alias = type(self).model_fields[field].alias
        return self._given(str(alias))

    def port_provenance(self, framework: str) -> str:
        """Provenance of a framework's port: ``label <its port label>`` when set, else
        ``default``. :raises KeyError: a framework without a port label."""
        return self._given(_LABEL_OF[framework])

    def _given(self, label: str) -> str:
        """``variable DERIVE_ENV_<NAME>`` (a session's), ``label <key>`` or ``default``."""
        variable = dict(self.variables).get(label)
        if variable is not None:
            return f"variable {variable}"
        return f"label {label}" if label in self.given else "default"

    @property
    def master_port(self) -> int:
        """The ``master-port`` label (PyTorch's, default 29500): ``ports["pytorch"]``."""
        return self.ports["pytorch"]

    @property
    def tensorflow_port(self) -> int:
        """The ``tensorflow-port`` label (default 2222): ``ports["tensorflow"]``."""
        return self.ports["tensorflow"]

    @property
    def jax_port(self) -> int:
        """The ``jax-port`` label (default 1234): ``ports["jax"]``."""
        return self.ports["jax"]

