"""``--env-file``: another container's environment, in the four formats it comes in.

Loaded only when ``--env-file`` is given (never on a container start). The file is read by
the package's bounded reader (:func:`derive_env.cli.read_text`: 1 MiB, FIFOs refused,
strict UTF-8), which hands its text here; this module detects its format from its content
and parses it.
"""

from __future__ import annotations

import json
import re

from derive_env.errors import UsageError, shorten

#: A variable name, as dotenv and environ.txt lines must start.
_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

#: How the formats are named in messages (the format assumed is always said).
_LINES = "dotenv lines"
_ENVIRON_TXT = "Backend.AI environ.txt lines"
_NUL = "NUL-separated, as /proc/PID/environ and env -0"
_INSPECT = "docker inspect JSON"
_USE_NUL = ("capture the environment with `env -0` (or copy /proc/PID/environ, or "
            "`docker exec CONTAINER env -0`), which --env-file reads exactly")


def parse_env_file(text: str, origin: str) -> dict[str, str]:
    """Parse an ``--env-file``, detecting its format from its content.

    Formats (the one assumed is named in every error, after the file name):

    * NUL-separated ``KEY=VALUE`` entries, each ending in a NUL byte: ``/proc/PID/environ``,
      ``env -0``, ``docker exec CONTAINER env -0``. Exact: values may span lines, exported
      shell functions (``BASH_FUNC_f%%``) are carried as they are. Chosen when the text
      ends in a NUL byte.
    * ``docker inspect CONTAINER`` (or IMAGE) output: a JSON list of one object whose
      ``Config.Env`` lists ``KEY=VALUE`` strings; also the object alone, ``{{json .Config}}``
      (an object with ``Env``) and ``{{json .Config.Env}}`` (the list of strings). Chosen
      when the text starts with ``[`` or ``{`` (no variable name does).
    * Backend.AI's ``/home/config/environ.txt`` (a file of that name): ``KEY=VALUE`` lines
      taken as written, split at the first ``=``, as Backend.AI's kernel runner reads it.
    * Otherwise dotenv / ``env`` output ``KEY=VALUE`` lines: blank lines and lines starting
      with ``#`` are skipped; an ``export`` prefix is allowed; a value wholly inside matching
      single or double quotes loses them (no escapes are interpreted); otherwise the value
      is taken as written, less blanks at the line's ends. Lines end at ``\n`` (``\r\n``
      too). A value spanning lines or an exported shell function cannot be read from lines
      exactly: the error says to capture with ``env -0``.

    :param origin: how to name the file in messages (its path, or ``stdin``).
    :raises UsageError: (exit 2) an entry or line that is not ``KEY=VALUE``, JSON that is
        not ``docker inspect`` output, a NUL byte in a line file; the message names the file,
        the format assumed and the line or entry, never the value (it may be a secret).
    """
    if text.endswith("\0"):
        return _parse_nul(text, origin)
    if text.lstrip()[:1] in ("[", "{"):
        return _parse_inspect(text, origin)
    literal = origin.replace("\\", "/").rsplit("/", 1)[-1] == "environ.txt"
    return _parse_lines(text, origin, literal)


def _entry(item: str, where: str, entry_kind: str, number: int) -> tuple[str, str]:
    """``KEY=VALUE`` of one NUL-separated or JSON entry (any name but an empty one)."""
    key, sep, value = item.partition("=")
    if not sep or not key:
        got = "an empty name" if sep else "no '='"
        raise UsageError(f"{where}, {entry_kind} {number}: expected KEY=VALUE, got {got}")
    return key, value


def _parse_nul(text: str, origin: str) -> dict[str, str]:
    where = f"--env-file {origin} ({_NUL})"
    result: dict[str, str] = {}
    for number, item in enumerate(text[:-1].split("\0"), start=1):
        if item:  # an empty entry holds no variable
            key, value = _entry(item, where, "entry", number)
            result[key] = value
    return result


def _parse_inspect(text: str, origin: str) -> dict[str, str]:
    where = f"--env-file {origin} ({_INSPECT}, as it starts with {text.lstrip()[0]!r})"
    try:
        document = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise UsageError(f"{where}: not valid JSON ({shorten(str(exc))})") from None
    if isinstance(document, list) and document and all(isinstance(i, dict) for i in document):
        if len(document) > 1:
            raise UsageError(
                f"{where}: holds {len(document)} containers; inspect one (docker inspect "
                "CONTAINER > FILE)"
            )
        document = document[0]
    if isinstance(document, dict):
        config = document.get("Config")
        holder = config if isinstance(config, dict) else document
        if "Env" not in holder:
            raise UsageError(
                f"{where}: expected `docker inspect` output, an object with Config.Env (or "
                "Env); found none"
            )
        document = holder["Env"] if holder["Env"] is not None else []
    if not isinstance(document, list) or not all(isinstance(i, str) for i in document):
        raise UsageError(f"{where}: expected Config.Env to be a list of KEY=VALUE strings")
    result: dict[str, str] = {}
    for number, item in enumerate(document, start=1):
        key, value = _entry(item, where, "Env entry", number)
        if "\0" in item:
            raise UsageError(f"{where}, Env entry {number}: {key} contains a NUL byte, which "
                             "no environment variable can hold")
        result[key] = value
    return result


def _parse_lines(text: str, origin: str, literal: bool) -> dict[str, str]:
    where = f"--env-file {origin} ({_ENVIRON_TXT if literal else _LINES})"
    if "\0" in text:
        line = text[: text.index("\0")].count("\n") + 1
        raise UsageError(
            f"{where}, line {line}: contains a NUL byte, which no environment variable can "
            "hold; a NUL-separated file (env -0, /proc/PID/environ) ends in one: this one "
            "does not, so it was read as lines"
        )
    result: dict[str, str] = {}
    previous: tuple[str, int] | None = None  # the last variable read, for the hint
    # Lines end at \n only (and a \r before it): str.splitlines() would also cut values at
    # form feeds, \x1c-\x1e, \x85 and U+2028.
    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw[:-1] if raw.endswith("\r") else raw
        if literal:
            if not line:
                continue
            key, sep, value = line.partition("=")
        else:
            stripped = line.strip()
            if not stripped or stripped.startswith("#"):
                continue
            if stripped.startswith("export "):
                stripped = stripped[len("export "):].lstrip()
            key, sep, value = stripped.partition("=")
        if not sep or not _ENV_KEY.match(key):
            raise UsageError(_line_problem(where, number, (key, sep, value), previous))
        if not literal and len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        result[key] = value
        previous = (key, number)
    return result


def _line_problem(
    where: str, number: int, parts: tuple[str, str, str], previous: tuple[str, int] | None
) -> str:
    """Why line ``number`` (``parts``: its ``str.partition("=")``) is not ``KEY=VALUE``,
    without showing it (it may hold a secret)."""
    key, sep, value = parts
    if sep and key.startswith("BASH_FUNC_") and value.lstrip().startswith("()"):
        return (f"{where}, line {number}: {shorten(key, 60)} is an exported shell function, "
                f"which `env` prints over several lines; {_USE_NUL}")
    got = f"the name {shorten(key, 60)!r}" if sep else "a line without '='"
    message = f"{where}, line {number}: expected KEY=VALUE with KEY a variable name, got {got}"
    if previous is not None:
        message += (f"; if the file is `env` output, the value of {shorten(previous[0], 60)} "
                    f"(line {previous[1]}) may span lines: {_USE_NUL}")
    return message


def env_file_variables(text: str, path: str) -> dict[str, str]:
    """The variables of the ``--env-file`` at ``path`` (``-``: stdin), whose ``text``
    :func:`derive_env.cli.read_text` read, any format of :func:`parse_env_file`.

    :raises UsageError: (exit 2) the file is not in one of the formats, or holds a value no
        exec'd environment can hold (a lone UTF-16 surrogate from a JSON escape).
    """
    origin = "stdin" if path == "-" else path
    parsed = parse_env_file(text, origin)
    for key, value in parsed.items():
        try:  # strict UTF-8, not os.fsencode: that turns \udc80..\udcff into raw bytes
            key.encode("utf-8")
            value.encode("utf-8")
        except UnicodeEncodeError:
            # JSON's \ud800 or \udc80 escapes (the file itself was strict UTF-8): a lone
            # surrogate, which no exec'd environment can hold and no byte stands for.
            raise UsageError(
                f"--env-file {origin}: variable {shorten(ascii(key), 120)} holds a lone "
                "UTF-16 surrogate (a JSON escape such as \\ud800), which no environment "
                "variable can hold"
            ) from None
    return parsed
