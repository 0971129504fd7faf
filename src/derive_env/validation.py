"""Small parsers shared by the models that read variables and labels.

Each parser takes the raw string and returns the typed value, or raises ``ValueError``
whose text completes the sentence "expected ..." (see :func:`derive_env.errors.describe`).
:func:`first_error` turns a pydantic ``ValidationError`` from such a model back into that
sentence, naming the variable or label by its alias, so pydantic's own wording never
reaches the user.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from pydantic import ValidationError

from derive_env.errors import describe

_DIGITS = re.compile(r"[0-9]+\Z")

#: The most GPUs, or processes, derive-env accepts on one node (a manager's GPU count, the
#: ``nproc-per-node`` label): no node has more GPUs than this, and each would become a
#: process (``PET_NPROC_PER_NODE``) and a device ordinal (JAX's local devices), so a larger
#: count is a corrupted value (``4294967296`` is 2**32, a wrapped counter), refused before
#: anything is built from it.
MAX_PER_NODE = 1024
#: Ends the expectation of a count past :data:`MAX_PER_NODE`.
PER_NODE = (MAX_PER_NODE, "GPUs or processes on a node (no node has more GPUs; a larger "
                          "count is a corrupted value)")


def parse_int(value: object, *, minimum: int, what: str | None = None) -> int:
    """Parse a decimal integer ``>= minimum`` (digits only: no sign, blanks or ``_``)."""
    expected = what or f"an integer >= {minimum}"
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and _DIGITS.match(value):
        if len(value) > 18:
            raise ValueError(f"{expected} of at most 18 digits")
        number = int(value)
    else:
        raise ValueError(expected)
    if number < minimum:
        raise ValueError(expected)
    return number


def at_most(name: str, value: str, number: int, bound: tuple[int, str]) -> int:
    """``number`` (read from ``name=value``) when it is at most ``bound[0]``; else a
    ``TopologyError`` (exit 3): ``NAME='value': expected at most N <bound[1]>``."""
    if number > bound[0]:
        from derive_env.errors import TopologyError

        raise TopologyError(describe(name, value, f"at most {bound[0]} {bound[1]}"))
    return number


def parse_per_node(value: object, *, minimum: int) -> int:
    """:func:`parse_int`, at most :data:`MAX_PER_NODE` (for a model's field or a label)."""
    number = parse_int(value, minimum=minimum)
    if number > MAX_PER_NODE:
        raise ValueError(f"at most {MAX_PER_NODE} {PER_NODE[1]}")
    return number


def count_of(text: str) -> int | None:
    """A count as a user or launcher writes it: decimal digits, blanks around allowed, at
    most 18 digits (int() of a longer string is slow, and refused past 4300 digits);
    ``None`` for anything else. Compared as data, not parsed strictly like a manager's."""
    text = text.strip()
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 18 else None


def static_count(text: str) -> int | None:
    """``N``, or torchrun's ``MIN:MAX`` with MIN == MAX (a static size), as :func:`count_of`;
    ``None`` for anything else (an elastic range, a word)."""
    low, sep, high = text.partition(":")
    low_n = count_of(low)
    return low_n if low_n is not None and low_n == (count_of(high) if sep else low_n) else None


def parse_port(value: object) -> int:
    """Parse a TCP port number, 1-65535."""
    number = parse_int(value, minimum=1, what="a port number 1-65535")
    if number > 65535:
        raise ValueError("a port number 1-65535")
    return number


def errors_of(exc: ValidationError, kind: str = "") -> list[str]:
    """Every error of ``exc`` as ``NAME='value': expected ...`` (see :func:`first_error`)."""
    messages = []
    for error in exc.errors(include_url=False):
        name = ".".join(str(part) for part in error["loc"]) or "input"
        cause = error.get("ctx", {}).get("error")
        expected = str(cause) if isinstance(cause, ValueError) else error["msg"]
        value = error.get("input")
        messages.append(describe(
            f"{kind}{name}", value if isinstance(value, str) else repr(value), expected))
    return messages


def first_error(exc: ValidationError, kind: str = "") -> str:
    """Turn the first error of ``exc`` into ``NAME='value': expected ...``.

    :param exc: raised by ``model_validate`` on a model whose fields have aliases (the
        variable or label names) and parsers raising ``ValueError("<expectation>")``.
    :param kind: put before the name, e.g. ``"label "``.
    """
    return errors_of(exc, kind)[0]


def variable_int(environ: Mapping[str, str], name: str, minimum: int, tail: str = "",
                 maximum: tuple[int, str] | None = None) -> int:
    """``environ[name]`` as a decimal integer >= ``minimum`` (:func:`parse_int`): the one
    integer reader of the sources. A bad value is a ``TopologyError`` (exit 3) naming the
    variable and its value, ``tail`` ending the expectation (``" (the world size)"``,
    ``"; the fix"``); ``maximum``: ``(bound, what)`` for :func:`at_most` (:data:`PER_NODE`,
    a node count).

    :raises KeyError: ``name`` is not in ``environ`` (the caller checks what is optional).
    """
    from derive_env.errors import TopologyError

    value = environ[name]
    try:
        number = parse_int(value, minimum=minimum)
    except ValueError as exc:
        raise TopologyError(describe(name, value, f"{exc}{tail}")) from None
    return number if maximum is None else at_most(name, value, number, maximum)


def variable_index(environ: Mapping[str, str], name: str, count: str | tuple[int, str],
                   why: str) -> int:
    """``environ[name]``, an index (>= 0) below a count no role of its line names: a variable
    already read (AWS Batch's main node index below ``AWS_BATCH_JOB_NUM_NODES``) or ``(count,
    what it counts)`` (``(3, "the 3 hosts of PBS_NODEFILE")``); one wording, ending with
    ``why`` (the manager's fix). Here, beside :func:`variable_int`, so that a source needs no
    other module for it.
    """
    from derive_env.errors import TopologyError

    value = variable_int(environ, name, 0, f" (an index); {why}")
    bound, what = ((int(environ[count]), f"{count}={environ[count]!r}")
                   if isinstance(count, str) else count)
    if value >= bound:
        raise TopologyError(describe(name, environ[name], f"an index below {what}: {why}"))
    return value
