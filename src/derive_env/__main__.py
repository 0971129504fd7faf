"""``derive-env`` and ``python -m derive_env``: the process itself.

:func:`main` drops the ``PYTHONPATH`` entries from derive-env's own imports, installs the
stand-ins that keep pydantic's first model cheap (every path of the program gets them,
library users never do), then picks the path. Two forms skip click, whose import costs
more than a derivation (docs/performance.md):

* the ENTRYPOINT form ``derive-env [--] COMMAND ARG...`` (no option before the command)
  goes straight to the exec path;
* ``derive-env check ...`` (``check`` as the first word, no ``--`` before it) is the
  preflight, :mod:`derive_env.cli.check`, loaded only then;
* the dry-run forms of the hook and of operators (``derive-env --dry-run --format shell``,
  ``--dry-run --explain``, ``--label``/``--labels-file``/``--env-file``), which
  :func:`derive_env.cli.options.parse` reads only when click would accept them with the
  same meaning.

Anything else is parsed by the click command (:mod:`derive_env.cli.command`), which also
answers a shell's completion request (no argument, ``_DERIVE_ENV_COMPLETE`` set: see
:func:`completion_request`). All end in :func:`derive_env.cli.run`.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing
if TYPE_CHECKING:
    from collections.abc import Mapping

#: click's shell-completion switch for prog_name ``derive-env`` (click.core, ``complete_var``):
#: when set, click answers the completion request instead of running the command.
_COMPLETE_VARIABLE = "_DERIVE_ENV_COMPLETE"
#: Its values click answers (click.shell_completion: ``{shell}_source`` prints the script a
#: shell evaluates, ``{shell}_complete`` the candidates for COMP_WORDS/COMP_CWORD).
_COMPLETE_VALUES = ("bash_source", "bash_complete", "zsh_source", "zsh_complete",
                    "fish_source", "fish_complete")
#: The first word that starts the preflight (:mod:`derive_env.cli.check`) instead of a
#: command: only as the very first word; ``derive-env -- check`` runs a command ``check``.
CHECK = "check"


def drop_pythonpath(path: list[str], pythonpath: str | None, own_dir: str) -> list[str]:
    """``sys.path`` without the entries that came from ``PYTHONPATH``: derive-env's own imports.

    A training image's ``PYTHONPATH`` is meant for the training interpreter, and may hold a
    pydantic 1.x or click 7 that would shadow the ones pip installed beside derive-env (in its
    own venv, see docs/integration.md). The variable itself stays in the environment and
    reaches the user's command unchanged; only this process stops importing from it.

    :param path: ``sys.path`` as Python built it (PYTHONPATH entries made absolute on 3.11+,
        as written on 3.10: both forms are matched).
    :param pythonpath: the ``PYTHONPATH`` value, or None.
    :param own_dir: the folder holding the ``derive_env`` package. When that folder is one of
        the entries, derive-env was installed through ``PYTHONPATH`` (e.g. ``pip install
        --target``) and its dependencies may be there too: nothing is dropped.
    :returns: the new list (``path`` itself when nothing is dropped).
    """
    if not pythonpath:
        return path
    foreign = {os.path.abspath(entry) for entry in pythonpath.split(os.pathsep)}
    if os.path.abspath(own_dir) in foreign:
        return path
    # sys.path[0] is the script's folder (or '' for -c/-m): never a PYTHONPATH entry.
    return path[:1] + [entry for entry in path[1:] if os.path.abspath(entry) not in foreign]


def main() -> None:
    """Entry point of the ``derive-env`` console script."""
    if not sys.flags.ignore_environment:
        own_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        sys.path[:] = drop_pythonpath(sys.path, os.environ.get("PYTHONPATH"), own_dir)
    before_pydantic()
    args = sys.argv[1:]
    if args and args[0] == CHECK:
        from derive_env.cli.check import main as check

        check(args[1:])  # exits
    if args and (args[0] == "--" or not args[0].startswith("-")):
        from derive_env.cli import run_command

        try:
            status = run_command(args[1:] if args[0] == "--" else args)
        except KeyboardInterrupt:  # e.g. Ctrl-C during a slow name lookup: no traceback
            status = 130
        sys.exit(status)
    from derive_env.cli.options import parse

    completing = completion_request(args, os.environ.get(_COMPLETE_VARIABLE), os.environ)
    options = None if completing else parse(args)
    if options is not None:
        from derive_env.cli import interrupted, run

        try:
            status = run([], **options)
        except KeyboardInterrupt:
            status = interrupted()
        _exit_now(status)
    from derive_env.cli.command import cli

    # Not a completion request: "=" is no variable name, so click's switch stays off and a
    # stray _DERIVE_ENV_COMPLETE cannot turn a start into a completion answer.
    try:
        cli(prog_name="derive-env", complete_var=_COMPLETE_VARIABLE if completing else "=")
    except OSError as exc:  # --help or --version into a full or closed stdout (ENOSPC, EIO)
        _stdout_failed(exc)


def completion_request(args: list[str], value: str | None,
                       environ: Mapping[str, str]) -> bool:
    """Whether this start is a shell asking for completion (click's shell_completion).

    click's scripts run ``derive-env`` with no argument and ``_DERIVE_ENV_COMPLETE`` set to
    ``{bash,zsh,fish}_source`` (print the script a user installs) or
    ``{bash,zsh,fish}_complete`` with the words in ``COMP_WORDS`` and ``COMP_CWORD`` (an
    index for bash and zsh, the incomplete word for fish: click.shell_completion's
    ``get_completion_args``). A ``*_complete`` value without them, like anything else (a
    stray variable in a container's environment beside a command line or with another
    value), is a normal start: an ENTRYPOINT with an empty CMD says "no command given".

    :param args: the command line after the program name.
    :param value: ``_DERIVE_ENV_COMPLETE``, or None when unset.
    :param environ: the environment holding ``COMP_WORDS`` and ``COMP_CWORD``.
    """
    if args or value not in _COMPLETE_VALUES:
        return False
    if value.endswith("_source"):
        return True
    cword = environ.get("COMP_CWORD")
    return "COMP_WORDS" in environ and cword is not None and (
        value == "fish_complete" or cword.isdigit())


def _stdout_failed(exc: OSError) -> None:
    """Exit 1 (errors.py: output could not be written) with one line on stderr, instead of
    a traceback and the interpreter's exit 120 from its final flush of the same buffer."""
    from derive_env.cli import say

    say("error", f"cannot write to stdout ({exc.strerror or exc})")
    try:  # drop what is still buffered: the final flush would fail again (exit 120)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass
    sys.exit(1)


def _exit_now(status: int) -> None:
    """End a dry run without the interpreter's teardown, once the output is flushed.

    Nothing is left to do at exit: no atexit handler, no file open for writing; a resolver
    thread still waiting on DNS is a daemon, which a normal exit does not wait for either.
    Should a flush fail, the normal exit runs instead, which reports it as it would have.
    """
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except (OSError, ValueError):
        sys.exit(status)
    os._exit(status)



def before_pydantic() -> None:
    """Install the stand-ins that keep pydantic's first model cheap, before any is built.

    :func:`main` calls it on every path; a library user's process keeps the real modules.
    """
    _without_pydantic_plugins()
    _without_secrets_until_used()


def _without_pydantic_plugins() -> None:
    """Keep pydantic from importing ``importlib.metadata`` to look for plugins.

    When the first model is built, pydantic imports its plugin loader
    (``pydantic.plugin._loader``, private), which imports ``importlib.metadata`` and scans
    every installed distribution. derive-env's models use no plugin, and the exec'd program
    is a new process that loads its own. The stand-in answers ``get_plugins()`` with none and
    hands any other name to the real module, so a pydantic that changes its loader costs
    the speed-up, never a failure.
    """
    def get_plugins(*args: object, **kwargs: object) -> tuple[()]:
        return ()

    _stand_in("pydantic.plugin._loader", get_plugins=get_plugins)


def _without_secrets_until_used() -> None:
    """Keep ``secrets`` (and OpenSSL's libcrypto) unloaded until something uses it.

    ``pydantic.types``, imported with the first model, imports ``secrets`` at module level
    for one call, ``secrets.compare_digest`` in ``Secret.__eq__``, which derive-env's
    models never reach. The stand-in holds nothing: the first use of any name loads the
    real module, as an import would have. Only derive-env's own process is affected: the
    exec'd program starts a new interpreter.
    """
    _stand_in("secrets")


def _stand_in(name: str, **attributes: object) -> None:
    """Put a stand-in for module ``name`` in ``sys.modules``, unless it is loaded already.

    The stand-in has ``attributes``; any other name loads the real module (which then
    replaces the stand-in in ``sys.modules``) and is taken from it. Dunder names raise
    AttributeError, so the import system's probes (``__path__``...) import nothing.
    """
    if name in sys.modules:
        return
    stub = type(sys)(name)  # types.ModuleType, without importing types

    def real(attribute: str) -> object:
        if attribute.startswith("__"):  # the import system probing (__path__ ...)
            raise AttributeError(attribute)
        if sys.modules.get(name) is stub:
            del sys.modules[name]
        from importlib import import_module

        return getattr(import_module(name), attribute)

    vars(stub).update(attributes)
    stub.__getattr__ = real  # type: ignore[attr-defined]
    sys.modules[name] = stub


if __name__ == "__main__":
    main()
