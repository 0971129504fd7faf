"""The one exception tree of derive-env; each error knows its exit code.

Every error that input can cause (a cluster manager's variables, an image's labels, an
operator's options or files) is a :class:`DeriveEnvError`. The command line prints its
``str()`` on stderr, prefixed with ``derive-env: error:``, and exits with its
``exit_code`` without running the user's command. Anything else escaping is a bug.

Exit codes (documented in docs/operator-guide.md):

====  =====================================================================
code  meaning
====  =====================================================================
1     ``--dry-run`` output could not be written (stdout closed or full)
2     usage: bad option, no command, unreadable or malformed ``--env-file``
3     the cluster manager's topology variables are missing, malformed or
      inconsistent (or a user-set MASTER_ADDR / MASTER_PORT is malformed)
4     an image label or labels file is malformed
5     the derived environment or the command line is too large to exec
126   the command was found but cannot be executed
127   the command was not found
130   interrupted (SIGINT) before the exec
143   SIGTERM while resolving host names (cli.hostfacts.exit_on_signals), also as PID 1
====  =====================================================================
"""

from __future__ import annotations


class DeriveEnvError(Exception):
    """Base of every error caused by input; ``exit_code`` is the process exit status."""

    exit_code = 1

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


def listing(items: list | tuple, limit: int = 8) -> str:
    """``a, b, c`` for a message; past ``limit`` items ``a, b, ..., (N in all)``."""
    shown = ", ".join(str(item) for item in items[:limit])
    return shown if len(items) <= limit else f"{shown}, ... ({len(items)} in all)"


def shorten(text: str, limit: int = 200) -> str:
    """``text`` cut to ``limit`` characters, saying how long it was: input quoted in a
    message must not flood the terminal."""
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} characters)"


#: Ends a message the image may waive: the label that runs the command anyway. Written
#: after ", " by every message that offers it; with that label already set the message is
#: a warning, printed without it (:func:`without_waiver`: no circular advice).
ON_ERROR_WARN = ("or set label ai.backend.distributed.on-error=warn to run the command with "
                 "the environment unchanged")


def without_waiver(message: str) -> str:
    """``message`` without ``", " + ON_ERROR_WARN``: the text of the warning that
    ``on-error=warn`` prints instead of the error (advising that label would be circular)."""
    return message.replace(", " + ON_ERROR_WARN, "")


def printable(text: str, keep: str = "") -> str:
    """``text`` safe to print on a terminal: every character that is not printable (C0 and
    C1 controls such as ESC, DEL, line and paragraph separators, lone surrogates of
    undecodable bytes) written as its Python escape (``\\x1b``, ``\\udc80``), except those in
    ``keep`` (``"\\n"`` for a message of several lines).

    Raw values (``TORCHELASTIC_RUN_ID``, a kept variable, a host name from a file) reach
    ``--explain`` and the messages; an escape code in one must not recolour, move or clear
    the operator's terminal, nor forge a line. Linear in ``len(text)``; the common case (all
    printable) returns ``text`` itself.
    """
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() or char in keep else repr(char)[1:-1]
                   for char in text)


def describe(name: str, value: str, expected: str) -> str:
    """Return the standard sentence: ``NAME='value': expected ...``.

    ``value`` is shown with ``repr`` so blanks and control characters are visible; name and
    value are shortened (:func:`shorten`) so a huge variable cannot flood the terminal.
    """
    return f"{shorten(name, 120)}={shorten(value)!r}: expected {expected}"


class UsageError(DeriveEnvError):
    """Bad command line or ``--env-file`` (exit 2)."""

    exit_code = 2


class TopologyError(DeriveEnvError):
    """Missing, malformed or inconsistent cluster-topology variables (exit 3)."""

    exit_code = 3


class LabelError(DeriveEnvError):
    """Malformed image label or labels file (exit 4)."""

    exit_code = 4


class EnvironmentTooLarge(DeriveEnvError):
    """A ``NAME=value`` string, or environment plus argv, exceeds a kernel limit (exit 5)."""

    exit_code = 5


class CommandNotExecutable(DeriveEnvError):
    """The command exists but cannot be executed: permission, directory, format (exit 126)."""

    exit_code = 126


class CommandNotFound(DeriveEnvError):
    """The command is not in the ``PATH`` of the environment being exec'd (exit 127)."""

    exit_code = 127
