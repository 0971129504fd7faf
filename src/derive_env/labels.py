"""Image labels: where they come from and how they are read, without pydantic.

This module gathers the raw ``ai.backend.distributed.*`` labels into a flat
``{label: value}`` dict (docs/behaviour.md section 4), and also keeps the near misses of a
derive-env label (a wrong letter case or prefix, :func:`near_miss`) and reports them
(:func:`label_problems`), so that a misspelt opt-in label is an error, not a silent
opt-out; :mod:`derive_env.policy` validates the labels into an
:class:`~derive_env.policy.ImagePolicy`. It stays free of pydantic so that the
not-opted-in path (no ``frameworks`` label) can exec the command without importing it.

Sources, later wins: the labels file baked into the image (default
``/etc/derive-env/labels.json`` or ``$DERIVE_ENV_LABELS_FILE``), ``--labels-file``, the
session's ``DERIVE_ENV_<NAME>`` variables (docs/behaviour.md section 9, :func:`session_labels`),
``--label KEY=VALUE``. A container cannot read its own image's labels, so the image writes
the file at build time from the same build ``ARG`` as its ``LABEL`` (see docker/).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence

from derive_env.errors import LabelError, shorten

PREFIX = "ai.backend.distributed."
OPT_IN = PREFIX + "frameworks"
DEFAULT_LABELS_FILE = "/etc/derive-env/labels.json"
_JSON_TYPES = {str: "string", int: "number", float: "number", bool: "boolean",
               type(None): "null", list: "array"}
LABELS_FILE_VARIABLE = "DERIVE_ENV_LABELS_FILE"
#: A label for one session: ``DERIVE_ENV_<NAME>``, the name upper-cased, ``-`` as ``_``.
VARIABLE_PREFIX = "DERIVE_ENV_"
#: The ``DERIVE_ENV_*`` variables derive-env reads that are not labels (nor near misses of
#: one): the labels file, the source choice (sources.SOURCE_VARIABLE), the path of
#: SageMaker's resource config (sources/managers/sagemaker.py, CONFIG_VARIABLE), the Indexed
#: Job's pod count and subdomain and the JobSet's replicated jobs (sources/managers/jobset.py),
#: and the run id derive-env sets and keeps (merge.py, RUN_ID).
NOT_LABELS = frozenset({LABELS_FILE_VARIABLE, "DERIVE_ENV_SOURCE", "DERIVE_ENV_RUN_ID",
                        "DERIVE_ENV_SAGEMAKER_RESOURCE_CONFIG", "DERIVE_ENV_NNODES",
                        "DERIVE_ENV_SUBDOMAIN", "DERIVE_ENV_REPLICATED_JOBS",
                        "DERIVE_ENV_DETERMINED_RENDEZVOUS"})
#: The label names under :data:`PREFIX` that are not a framework's port label, here so that
#: the near-miss check needs no pydantic (:func:`label_names` adds the port labels).
SETTING_LABELS = ("pytorch-mode", "nproc-per-node", "tensorflow-roles", "socket-ifname",
                  "on-error")
_BACKEND = "ai.backend."
#: The 3-grams of "distributed": two edits destroy at most six of these nine, so a key within
#: two edits of a derive-env key contains one of them (a cheap filter before the distance).
_GRAMS = ("dis", "ist", "str", "tri", "rib", "ibu", "but", "ute", "ted")


class Labels(dict):  # type: ignore[type-arg]
    """``{label: value}`` that also knows which labels a session variable gave.

    :ivar variables: label -> the ``DERIVE_ENV_<NAME>`` variable it came from, for
        ``--explain``'s provenance and the opt-in rule.
    :ivar image: a labels file (the default or ``$DERIVE_ENV_LABELS_FILE``) was read, so
        messages may speak of "the image"; else (bare metal) they speak of the job.
    :ivar from_image: the labels that file gave (later sources may change them): every
        node's image has these (render/fixes.py: a fix needs no opt-in the image gave).
    """

    def __init__(self, *args: object, **kwargs: str) -> None:
        super().__init__(*args, **kwargs)
        self.variables: dict[str, str] = {}
        self.image, self.from_image = False, {}


def variable_of(label: str) -> str:
    """The session variable of a label: ``tensorflow-roles`` (or its full key) ->
    ``DERIVE_ENV_TENSORFLOW_ROLES``."""
    name = label[len(PREFIX):] if label.startswith(PREFIX) else label
    return VARIABLE_PREFIX + name.upper().replace("-", "_")


def session_labels(environ: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """The labels the session gives as ``DERIVE_ENV_<NAME>`` variables
    (docs/behaviour.md section 9),
    and the near misses of such a name (``DERIVE_ENV_TENSORFLOW_ROLE``) or of one of
    :data:`NOT_LABELS` (``DERIVE_ENV_SOURCES``): one message each.

    A variable set to the empty string counts as unset. :data:`NOT_LABELS` are neither
    labels nor near misses. Cheap when none is set: one pass over the names, and the label
    names (the frameworks table) are looked at only when a candidate is there.

    :returns: ``({full label key: value}, problems)``.
    """
    candidates = sorted(k for k, v in environ.items()
                        if v and "DERIV" in k.upper() and k not in NOT_LABELS)
    if not candidates:
        return {}, []
    by_variable = {variable_of(name): PREFIX + name for name in label_names()}
    labels: dict[str, str] = {}
    problems: list[str] = []
    for key in candidates:
        if key in by_variable:
            labels[by_variable[key]] = environ[key]
            continue
        meant = next((v for v in by_variable if key.upper() == v), None) or next(
            (v for v in by_variable if _within_two_edits(key.upper(), v)), None)
        own = next((v for v in sorted(NOT_LABELS)
                    if key.upper() == v or _within_two_edits(key.upper(), v)), None)
        if meant is None and own is not None:
            problems.append(
                f"variable {shorten(key, 120)}={shorten(environ[key])!r}: expected the name "
                f"{own} (one of derive-env's own variables); derive-env reads it only "
                "exactly (upper case), so this one would be ignored. Rename it")
        elif meant is not None:
            problems.append(
                f"variable {shorten(key, 120)}={shorten(environ[key])!r}: expected the name "
                f"{meant} (label {by_variable[meant]} for this job); derive-env reads only "
                f"{VARIABLE_PREFIX}<LABEL NAME> exactly (upper case, - as _), so this one "
                "would be ignored. Rename it")
    return labels, problems


def join_problems(problems: list[str]) -> str:
    """One message for every problem found: the problem itself, or a numbered list."""
    if len(problems) == 1:
        return problems[0]
    return f"{len(problems)} label problems:\n" + "\n".join(
        f"  {n}. {p}" for n, p in enumerate(problems, start=1))


def _within_two_edits(a: str, b: str, edits: int = 2) -> bool:
    """Levenshtein distance <= ``edits`` (insertions, deletions, substitutions), cheaply.

    A band of that width around the diagonal: a few hundred steps for label-length keys,
    and none for the many labels whose length differs by more (difflib costs an import).
    """
    if abs(len(a) - len(b)) > edits:
        return False
    previous = list(range(len(b) + 1))
    for i, char in enumerate(a, start=1):
        current = [i] + [edits + 1] * len(b)
        for j in range(max(1, i - edits), min(len(b), i + edits) + 1):
            current[j] = min(previous[j] + 1, current[j - 1] + 1,
                             previous[j - 1] + (char != b[j - 1]))
        if min(current) > edits:
            return False
        previous = current
    return previous[-1] <= edits


def closest_key(key: str, known: Iterable[str]) -> str | None:
    """The known label ``key`` (under :data:`PREFIX`) was probably meant to be, for "did you
    mean": equal to it but for letter case, spaces or ``_`` for ``-``, else the first (sorted)
    one edit from it, else two; None when none is that close. The rule of the misspelt
    ``DERIVE_ENV_`` variables (:func:`_within_two_edits`)."""
    folded, known = key.strip().lower().replace("_", "-"), sorted(known)
    if folded in known:
        return folded
    return next((candidate for edits in (1, 2) for candidate in known
                 if _within_two_edits(folded, candidate, edits)), None)


def label_names() -> tuple[str, ...]:
    """Every label name under :data:`PREFIX`: ``frameworks``, the port labels of
    :data:`derive_env.frameworks.FRAMEWORKS` in its order, then :data:`SETTING_LABELS`
    (the keys of :class:`~derive_env.policy.ImagePolicy`; a test keeps them equal)."""
    from derive_env.frameworks import FRAMEWORKS  # a table of tuples: imports nothing

    ports = tuple(str(line.port_label) for line in FRAMEWORKS if line.port_label is not None)
    return (OPT_IN[len(PREFIX):], *ports, *SETTING_LABELS)


def near_miss(key: str) -> tuple[str, str] | None:
    """The ``ai.backend.distributed.*`` key that ``key`` was probably meant to be.

    A near miss: equal to such a key but for letter case; a known label name (or
    one edit from one) right under ``ai.backend.`` (``ai.backend.frameworks``); a prefix at
    most two edits from ``ai.backend.distributed.``; or the whole key at most two edits
    from a known label.
    Keys starting exactly with the prefix are not near misses (unknown ones are reported by
    the policy).

    :returns: ``(meant, why)``, or ``None``.
    """
    if key.startswith(PREFIX):
        return None
    lowered = key.lower()
    if lowered.startswith(PREFIX):
        return lowered, "the same but for letter case"
    if lowered.startswith(_BACKEND):
        rest = lowered[len(_BACKEND):]
        for label in label_names():  # the prefix lost "distributed.", the name one edit at most
            if rest == label or _within_two_edits(rest, label, edits=1):
                return PREFIX + label, f"a derive-env label name under {_BACKEND}"
    if not any(gram in lowered for gram in _GRAMS):
        return None
    prefix, dot, name = key.rpartition(".")
    if dot and _within_two_edits(prefix.lower() + ".", PREFIX):
        return PREFIX + name.lower(), "its prefix is two edits or fewer from " + PREFIX
    if lowered.startswith(_BACKEND[:2]):  # "ai" (two edits may touch the rest)
        for label in label_names():
            if _within_two_edits(lowered, PREFIX + label):
                return PREFIX + label, "two edits or fewer from it"
    return None


def label_problems(labels: Mapping[str, str]) -> list[str]:
    """Messages for the keys that are near misses of a derive-env label (see :func:`near_miss`).

    Pydantic-free and cheap: it runs on the not-opted-in path too, where a misspelt opt-in
    label would otherwise silently turn distribution off.
    """
    problems = []
    for key in sorted(labels):
        miss = near_miss(key)
        if miss is not None:
            meant, why = miss
            problems.append(
                f"label {shorten(key, 120)}={shorten(labels[key])!r}: expected the key {meant} "
                f"({why}); derive-env reads only keys starting exactly with {PREFIX}, so this "
                "label would be ignored. Rename it"
            )
    return problems


def parse_labels_document(text: str, origin: str) -> dict[str, str]:
    """Parse a labels file into the ``ai.backend.distributed.*`` labels it holds.

    Accepted shapes (the formats of docs/behaviour.md section 4):

    * a flat JSON object ``{"ai.backend.distributed.frameworks": "pytorch", ...}``, as
      also printed by ``docker image inspect --format '{{json .Config.Labels}}'``;
    * the output of ``docker image inspect IMAGE``: a JSON list of one item with
      ``Config.Labels`` (``null`` there means no labels); that item alone is accepted too;
    * ``docker inspect --format '{{json .Config}}'``: an object with ``Labels``.

    Labels outside the ``ai.backend.distributed.`` prefix are dropped (images carry many),
    but near misses of it (:func:`near_miss`) are kept, for :func:`label_problems` to report.

    :param text: the file's content, already decoded.
    :param origin: how to name the file in messages (its path, or ``stdin``).
    :returns: the distributed labels, values as given.
    :raises LabelError: not JSON, a key twice in one object, not one of the shapes above
        (`[{}]`, two images, `{"Labels": "x"}` are errors, not "no labels"), or a distributed label
        whose value is not a string (Docker labels are strings; ``"29500"``, not ``29500``).
    """
    if not text.strip():
        raise LabelError(f"labels file {origin}: empty (expected a JSON object of labels)")
    try:
        document = json.loads(text, object_pairs_hook=_unique_keys)
    except _DuplicateKey as exc:
        raise LabelError(
            f"labels file {origin}: the key {shorten(exc.key, 120)!r} appears twice in one "
            "JSON object (which value is meant?); keep one") from None
    except ValueError as exc:
        raise LabelError(f"labels file {origin}: not valid JSON ({shorten(str(exc))})") from None
    except RecursionError:
        raise LabelError(f"labels file {origin}: JSON nested too deeply to be labels") from None
    document = _labels_object(document, origin)
    if document is None:
        return {}
    result: dict[str, str] = {}
    problems: list[str] = []
    for key, value in document.items():
        if not key.startswith(PREFIX) and near_miss(key) is None:
            continue
        if not isinstance(value, str):
            shown = shorten(json.dumps(value), 80)
            hint = f', write "{shown}"' if isinstance(value, int | float | bool) else ""
            problems.append(
                f"labels file {origin}: label {shorten(key, 120)} = {shown}: expected a JSON "
                f"string (Docker label values are strings{hint})"
            )
            continue
        result[key] = value
    if problems:
        raise LabelError(join_problems(problems))
    return result


class _DuplicateKey(ValueError):
    """A JSON object of a labels file names one key twice (``json`` keeps the last)."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    """``object_pairs_hook`` for :func:`json.loads`: a dict, refusing a key given twice."""
    document = dict(pairs)
    if len(document) != len(pairs):
        seen: set[str] = set()  # the first key seen before (set.add returns None)
        raise _DuplicateKey(next(key for key, _v in pairs if key in seen or seen.add(key)))
    return document


def _labels_object(document: object, origin: str) -> dict | None:
    """The labels object of one of the accepted shapes (:func:`parse_labels_document`);
    ``None`` for ``Config.Labels: null`` (an image without labels).

    :raises LabelError: any other shape, named: ``[{}]`` or ``{"Labels": "x"}`` are not
        "no labels".
    """
    inspect = ("`docker image inspect` output (a list whose first item is an object with "
               "Config.Labels)")
    if isinstance(document, list):
        if not document or not isinstance(document[0], dict):
            raise LabelError(f"labels file {origin}: a JSON list must be {inspect}")
        if not isinstance(document[0].get("Config"), dict):
            raise LabelError(f"labels file {origin}: a JSON list must be {inspect}; its "
                             "first item has no Config object")
        if len(document) > 1:  # which image's labels? (--env-file refuses 2 containers alike)
            raise LabelError(f"labels file {origin}: holds {len(document)} images; inspect one "
                             "(docker image inspect IMAGE > FILE)")
        document = document[0]
    if isinstance(document, dict) and isinstance(document.get("Config"), dict):
        document = document["Config"]
        if "Labels" not in document or document["Labels"] is None:
            return None
        document = document["Labels"]
    elif (isinstance(document, dict) and "Labels" in document
          and not any(isinstance(k, str) and k.startswith(PREFIX) for k in document)):
        if not isinstance(document["Labels"], dict | None):  # {{json .Config}}
            raise LabelError(f"labels file {origin}: Labels must be a JSON object of labels "
                             f"or null, not a JSON {_json_type(document['Labels'])}")
        document = document["Labels"] or {}
    if not isinstance(document, dict):
        raise LabelError(
            f"labels file {origin}: expected a JSON object of labels or `docker image inspect` "
            f"output, got a JSON {_json_type(document)}"
        )
    return document


def _json_type(value: object) -> str:
    """The JSON name of a decoded value's type (``array``, ``string``...)."""
    return _JSON_TYPES.get(type(value), "object" if isinstance(value, dict) else "value")


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
    distribution off (docs/behaviour.md section 4).

    Also a near miss of a derive-env key (:func:`label_problems`), such as
    ``ai.backend.distibuted.frameworks``: that is how a misspelt opt-in label looks.

    :raises LabelError: naming the near misses and the first stray label, in one message.
    """
    problems = label_problems(labels)
    # A session variable never opts an image in by itself (docs/behaviour.md section 9): the
    # session's DERIVE_ENV_MASTER_PORT reaches images that did not opt in too.
    given = getattr(labels, "variables", {})
    stray = sorted(k for k in labels if k.startswith(PREFIX) and k not in given)
    if stray:
        problems.append(
            f"label {shorten(stray[0], 120)}={shorten(labels[stray[0]])!r} is set but {OPT_IN} "
            "is not, so the image did not opt in and nothing would be derived: is the "
            f"frameworks label misspelt? Set {OPT_IN}, or remove the ai.backend.distributed.* "
            "labels"
        )
    if problems:
        raise LabelError(join_problems(problems))


def is_opted_in(labels: Mapping[str, str]) -> bool:
    """True when the image opted in: the ``ai.backend.distributed.frameworks`` label is set.

    Its value is validated later (an empty or unknown value is an error, never "off").
    """
    return OPT_IN in labels


def on_error_of(labels: Mapping[str, str]) -> str:
    """The ``on-error`` choice, read on its own so that it applies to the other labels' errors.

    Here, without pydantic, so the not-opted-in path can honour it too. Letter case does not
    matter (``Warn``), as for every keyword value (docs/operator-guide.md). An invalid value
    reads as ``fail`` (and is reported by :meth:`ImagePolicy.from_labels`).
    """
    value = labels.get(PREFIX + "on-error", "fail").lower()
    return value if value in ("fail", "warn") else "fail"


def gather(environ: Mapping[str, str], baked: tuple[str | None, str],
           given: tuple[Sequence[str], Sequence[str]],
           read: Callable[[str, str, bool], str | None]) -> Labels:
    """Gather the image's labels, later wins: labels file, ``--labels-file``s, the session's
    ``DERIVE_ENV_<NAME>`` variables (docs/behaviour.md section 9), ``--label``s.

    :param baked: ``(own, default)``: the baked-in file is ``$DERIVE_ENV_LABELS_FILE`` (from
        ``environ``, else ``own``, this process's) or ``default``
        (``/etc/derive-env/labels.json``); only a default file that does not exist means no
        labels, any other failure to read it is an error.
    :param given: the command line's ``--labels-file`` paths and ``--label`` items, in order.
    :param read: ``(path, what, missing_ok) -> text``, ``None`` for a missing file when
        ``missing_ok`` (the edge's bounded reader, ``cli.read_text``); raises LabelError.
    :returns: the labels (:class:`Labels`: which came from a variable, which from the image).
    :raises LabelError: a file that cannot be read (but the missing default) or parsed, a
        near miss of a ``DERIVE_ENV_<NAME>`` variable, or a ``--label`` that cannot be
        parsed: every such problem of every source in one message.
    """
    labels = Labels()
    problems: list[str] = []

    def read_one(path: str, what: str, missing_ok: bool = False) -> bool:
        try:
            text = read(path, what, missing_ok)
            if text is not None or not missing_ok:
                labels.update(parse_labels_document(text or "", "stdin" if path == "-" else path))
            return text is not None
        except LabelError as exc:
            problems.append(str(exc))
            return True

    labels_files, label_items = given
    named = environ.get(LABELS_FILE_VARIABLE) or baked[0] or None
    labels.image = read_one(named or baked[1], f"labels file (${LABELS_FILE_VARIABLE})"
                            if named else "labels file", named is None)
    labels.from_image = dict(labels)  # read first: all the labels so far are the file's
    for labels_file in labels_files:
        read_one(labels_file, "--labels-file")
    from_session, near = session_labels(environ)
    problems += near
    labels.update(from_session)
    labels.variables.update({key: variable_of(key) for key in from_session})
    for item in label_items:
        try:
            key, value = parse_label_option(item)
        except LabelError as exc:
            problems.append(str(exc))
            continue
        labels[key] = value
        labels.variables.pop(key, None)
    if problems:
        raise LabelError(join_problems(problems))
    return labels
