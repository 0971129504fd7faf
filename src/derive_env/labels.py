"""Image labels: where they come from and how they are read, without pydantic.

This module only gathers the raw ``ai.backend.distributed.*`` labels into a flat
``{label: value}`` dict (contract section 4); :mod:`derive_env.policy` validates them into
an :class:`~derive_env.policy.ImagePolicy`. It stays free of pydantic so that the
not-opted-in path (no ``frameworks`` label) can exec the command without importing it.

Sources, later wins: the labels file baked into the image (default
``/etc/derive-env/labels.json`` or ``$DERIVE_ENV_LABELS_FILE``), ``--labels-file``,
``--label KEY=VALUE``. A container cannot read its own image's labels, so the image writes
the file at build time from the same build ``ARG`` as its ``LABEL`` (see docker/).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from derive_env.errors import LabelError, shorten

PREFIX = "ai.backend.distributed."
OPT_IN = PREFIX + "frameworks"
DEFAULT_LABELS_FILE = "/etc/derive-env/labels.json"
_JSON_TYPES = {str: "string", int: "number", float: "number", bool: "boolean",
               type(None): "null", list: "array"}
LABELS_FILE_VARIABLE = "DERIVE_ENV_LABELS_FILE"


def parse_labels_document(text: str, origin: str) -> dict[str, str]:
    """Parse a labels file into the ``ai.backend.distributed.*`` labels it holds.

    Accepted shapes (the formats of contract section 4):

    * a flat JSON object ``{"ai.backend.distributed.frameworks": "pytorch", ...}``, as
      also printed by ``docker image inspect --format '{{json .Config.Labels}}'``;
    * the output of ``docker image inspect IMAGE``: a JSON list whose first item has
      ``Config.Labels`` (``null`` there means no labels); a single such item is accepted too.

    Labels outside the ``ai.backend.distributed.`` prefix are dropped (images carry many).

    :param text: the file's content, already decoded.
    :param origin: how to name the file in messages (its path, or ``stdin``).
    :returns: the distributed labels, values as given.
    :raises LabelError: not JSON, not one of the shapes above, or a distributed label whose
        value is not a string (Docker labels are always strings; ``"29500"``, not ``29500``).
    """
    if not text.strip():
        raise LabelError(f"labels file {origin}: empty (expected a JSON object of labels)")
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise LabelError(f"labels file {origin}: not valid JSON ({shorten(str(exc))})") from None
    except RecursionError:
        raise LabelError(f"labels file {origin}: JSON nested too deeply to be labels") from None
    if isinstance(document, list):
        if not document or not isinstance(document[0], dict):
            raise LabelError(
                f"labels file {origin}: a JSON list must be `docker image inspect` output "
                "(a list whose first item is an object with Config.Labels)"
            )
        document = document[0]
    if isinstance(document, dict) and isinstance(document.get("Config"), dict):
        labels = document["Config"].get("Labels")
        if labels is None:
            return {}
        document = labels
    if not isinstance(document, dict):
        raise LabelError(
            f"labels file {origin}: expected a JSON object of labels or `docker image inspect` "
            f"output, got a JSON {_JSON_TYPES.get(type(document), 'value')}"
        )
    result: dict[str, str] = {}
    for key, value in document.items():
        if not key.startswith(PREFIX):
            continue
        if not isinstance(value, str):
            shown = shorten(json.dumps(value), 80)
            hint = f', write "{shown}"' if isinstance(value, int | float | bool) else ""
            raise LabelError(
                f"labels file {origin}: label {shorten(key, 120)} = {shown}: expected a JSON "
                f"string (Docker label values are strings{hint})"
            )
        result[key] = value
    return result


def parse_label_option(item: str) -> tuple[str, str]:
    """Split one ``--label KEY=VALUE`` into ``(key, value)``.

    :raises LabelError: no ``=``, or an empty key.
    """
    key, sep, value = item.partition("=")
    if not sep or not key.strip():
        raise LabelError(f"--label {shorten(item)!r}: expected KEY=VALUE")
    return key.strip(), value


def distributed_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """Keep the ``ai.backend.distributed.*`` labels of ``labels``."""
    return {k: v for k, v in labels.items() if k.startswith(PREFIX)}


def check_not_opted_in(labels: Mapping[str, str]) -> None:
    """For an image without the opt-in label: no other distributed label may be set.

    Another ``ai.backend.distributed.*`` label without ``frameworks`` is almost always a
    misspelt ``frameworks`` (``framework``, ``Frameworks``): a typo must not silently turn
    distribution off (contract section 4).

    :raises LabelError: naming the first such label.
    """
    stray = sorted(k for k in labels if k.startswith(PREFIX))
    if stray:
        raise LabelError(
            f"label {shorten(stray[0], 120)}={shorten(labels[stray[0]])!r} is set but {OPT_IN} "
            "is not, so the image did not opt in and nothing would be derived: is the "
            f"frameworks label misspelt? Set {OPT_IN}, or remove the ai.backend.distributed.* "
            "labels"
        )


def is_opted_in(labels: Mapping[str, str]) -> bool:
    """True when the image opted in: the ``ai.backend.distributed.frameworks`` label is set.

    Its value is validated later (an empty or unknown value is an error, never "off").
    """
    return OPT_IN in labels


def on_error_of(labels: Mapping[str, str]) -> str:
    """The ``on-error`` choice, read on its own so that it applies to the other labels' errors.

    Here, without pydantic, so the not-opted-in path can honour it too. An invalid value
    reads as ``fail`` (and is reported by :meth:`ImagePolicy.from_labels`).
    """
    value = labels.get(PREFIX + "on-error", "fail")
    return value if value in ("fail", "warn") else "fail"
