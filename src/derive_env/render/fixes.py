"""A message's fix, written for the start that printed it: its opt-in echoed.

The sources' refusals end with a command line the user copies (``srun --ntasks-per-node=1
derive-env -- torchrun ...``). Each names derive-env as ``derive-env -- COMMAND``, without
an opt-in: the sources do not know how this start opted in. Copied as it stands onto bare
metal (no labels file in an image), that line runs un-opted-in and every node trains alone
with only a warning. :func:`with_opt_in` rewrites each such ``derive-env -- `` for the way
this start opted in (:func:`opt_in_of`), once, where the edge prints the message.

Imported only on the error path (and by ``derive-env check``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from derive_env.errors import LabelError
from derive_env.labels import OPT_IN, parse_label_option, variable_of

__all__ = ["FILE", "NONE", "OPTION", "VARIABLE", "fixed", "opt_in_of", "with_opt_in"]

#: How the frameworks label reached this start: a labels file of the image (nothing to add:
#: every node's image has it), an option (``--frameworks``, ``--label``, a ``--labels-file``
#: outside an image), a ``DERIVE_ENV_FRAMEWORKS`` variable, or nothing.
FILE, OPTION, VARIABLE, NONE = "file", "option", "variable", "none"
#: The words a fix names derive-env with.
_FIX = "derive-env -- "
#: Commands after ``derive-env -- `` that say where derive-env must not run (``derive-env --
#: srun ... runs it there too``): not a recipe, left as written.
_WRONG_PLACE = ("srun", "jsrun", "mpirun", "mpiexec", "flux", "qrsh", "pbsdsh")
#: Commands a ``--frameworks pytorch`` opt-in fits: PyTorch's launchers and a Python script
#: (every fix naming one is PyTorch's recipe).
_PYTORCH = ("torchrun", "python", "python3", "deepspeed", "accelerate")
#: The opt-in a fix gets when nothing opted in and its command names no framework.
PLACEHOLDER = "--frameworks <pytorch|tensorflow|jax>"


def opt_in_of(labels: Mapping[str, str], label_items: Sequence[str]) -> tuple[str, str]:
    """How this start opted in, and the frameworks value.

    :param labels: the gathered labels (:func:`derive_env.labels.gather`: its ``variables``
        names the labels a ``DERIVE_ENV_<NAME>`` variable gave, ``from_image`` those the
        image's labels file gave).
    :param label_items: the ``--label`` items, ``--frameworks LIST`` among them as
        ``ai.backend.distributed.frameworks=LIST`` (:func:`derive_env.cli.run` adds it).
    :returns: ``(how, value)``: one of :data:`FILE`, :data:`OPTION`, :data:`VARIABLE`,
        :data:`NONE` (value ``""``).
    """
    value = labels.get(OPT_IN, "")
    if not value.strip():
        return NONE, ""
    for item in label_items:
        try:
            if parse_label_option(item)[0] == OPT_IN:
                return OPTION, value
        except LabelError:  # already reported by gather
            continue
    if OPT_IN in getattr(labels, "variables", {}):
        return VARIABLE, value
    # The image's own file opted every node in, unless a --labels-file changed the value.
    return (FILE if getattr(labels, "from_image", {}).get(OPT_IN) == value else OPTION), value


def fixed(message: str, labels: Mapping[str, str] | None, label_items: Sequence[str]) -> str:
    """:func:`with_opt_in` for the labels this start gathered (``None``: not read, the
    message unchanged) and its ``--label`` items (:func:`opt_in_of`)."""
    if labels is None or _FIX not in message:
        return message
    return with_opt_in(message, *opt_in_of(labels, label_items))


def with_opt_in(message: str, how: str, value: str) -> str:
    """``message`` with every fix's ``derive-env -- COMMAND`` given this start's opt-in.

    * :data:`OPTION`: ``derive-env --frameworks NAMES -- COMMAND``;
    * :data:`VARIABLE`: the commands as written (the variable reaches them as it reached
      this start), and, when a fix was found, one closing sentence naming the variable and
      ``--frameworks``;
    * :data:`NONE`: ``--frameworks pytorch`` before a PyTorch launcher or a Python script,
      else :data:`PLACEHOLDER`, named as such: nothing is guessed silently;
    * :data:`FILE`: unchanged (the image's labels opt every node in).

    NAMES: ``value`` as the policy reads it (:func:`derive_env.policy.frameworks_of`: lower
    case, stripped, each once), never as typed (a line break would split the message); a
    value it refuses gets :data:`PLACEHOLDER`. A ``derive-env -- srun ...`` that names where
    derive-env must not run stays as it is, and so does the text of a quoted value
    (:func:`_plain`: a host list or label that happens to contain ``derive-env -- ``).
    """
    if how == FILE or _FIX not in message:
        return message
    names = _names(value) if how in (OPTION, VARIABLE) else ""
    out: list[str] = []
    found = False
    for text, plain in _plain(message):
        parts = text.split(_FIX) if plain else [text]
        out.append(parts[0])
        for part in parts[1:]:
            command = part.split(" ", 1)[0].rstrip(")")
            if command in _WRONG_PLACE:
                out.append(_FIX + part)
                continue
            found = True
            if how == NONE:
                opt = "--frameworks pytorch" if command in _PYTORCH else PLACEHOLDER
            else:
                opt = "" if how == VARIABLE and names else (
                    f"--frameworks {names}" if names else PLACEHOLDER)
            out.append(f"derive-env {opt} -- {part}" if opt else _FIX + part)
    text = "".join(out)
    if how == VARIABLE and names and found:
        text += (f" ({variable_of(OPT_IN)}={names} opted this start in: the derive-env of the "
                 f"fix needs it too, in its environment or as --frameworks {names})")
    return text


def _names(value: str) -> str:
    """The frameworks ``value`` as the policy reads it, comma-joined (``" PyTorch,jax"`` ->
    ``pytorch,jax``); ``""`` for a value it refuses (reported on its own)."""
    from derive_env.policy import frameworks_of  # opted in: the policy is already imported

    try:
        return ",".join(frameworks_of(value))
    except ValueError:
        return ""


def _plain(message: str) -> list[tuple[str, bool]]:
    """``message`` cut into ``(text, plain)``: ``plain`` False for a quoted value.

    Messages quote the values they echo as Python does (``{value!r}``): ``'...'``, or
    ``"..."`` around a value holding ``'``, a quote inside escaped with ``\\``. Such a quote
    opens only after a character that is not a letter or digit (``='``, `` '``), so the
    apostrophe of ``job's`` or ``nodes'`` opens none; one that never closes is text.
    """
    pieces: list[tuple[str, bool]] = []
    start = i = 0
    while i < len(message):
        char = message[i]
        if char in "'\"" and (i == 0 or not message[i - 1].isalnum()):
            end = _closing(message, i)
            if end is not None:
                pieces += [(message[start:i], True), (message[i:end + 1], False)]
                start = i = end + 1
                continue
        i += 1
    return [*pieces, (message[start:], True)]


def _closing(message: str, opening: int) -> int | None:
    """The index of the quote closing the one at ``opening`` (a backslash escapes the next
    character), or ``None``."""
    quote, i = message[opening], opening + 1
    while i < len(message):
        if message[i] == "\\":
            i += 2
            continue
        if message[i] == quote:
            return i
        i += 1
    return None
