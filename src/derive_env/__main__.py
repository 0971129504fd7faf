"""``derive-env`` and ``python -m derive_env``.

Two forms skip click, whose import costs more than a derivation (docs/performance.md):

* the ENTRYPOINT form ``derive-env [--] COMMAND ARG...`` (no option before the command)
  goes straight to the exec path;
* the dry-run forms of the hook and of operators (``derive-env --dry-run --format shell``,
  ``--dry-run --explain``, ``--label``/``--labels-file``/``--env-file``), which
  :func:`derive_env.cli.dry_run_options` parses only when click would accept them with the
  same meaning.

Anything else is parsed by the click command in cli/command.py. All end in
:func:`derive_env.cli.run`.
"""

from __future__ import annotations

import os
import sys

#: click's shell-completion switch for prog_name ``derive-env`` (click.core, ``complete_var``):
#: when set, click answers the completion request instead of running the command.
_COMPLETE_VARIABLE = "_DERIVE_ENV_COMPLETE"


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
    args = sys.argv[1:]
    if args and (args[0] == "--" or not args[0].startswith("-")):
        from derive_env.cli import run_command

        try:
            status = run_command(args[1:] if args[0] == "--" else args)
        except KeyboardInterrupt:  # e.g. Ctrl-C during a slow name lookup: no traceback
            status = 130
        sys.exit(status)
    from derive_env.cli import dry_run_options, run

    options = None if os.environ.get(_COMPLETE_VARIABLE) else dry_run_options(args)
    if options is not None:
        try:
            status = run([], **options)  # type: ignore[arg-type]
        except KeyboardInterrupt:
            from derive_env.cli import interrupted

            status = interrupted()
        _exit_now(status)
    from derive_env.cli.command import cli

    cli(prog_name="derive-env")


def _exit_now(status: int) -> None:
    """End a dry run without the interpreter's teardown, once the output is flushed.

    Nothing is left to do at exit (no atexit handler, no file open for writing; a resolver
    thread still waiting on DNS is a daemon, which a normal exit does not wait for either),
    and tearing down the modules (pydantic's, when opted in) costs about 8% of the hook's
    run on every container start (docs/performance.md). Should a flush fail, the normal
    exit runs instead, which reports it as it would have.
    """
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except (OSError, ValueError):
        sys.exit(status)
    os._exit(status)


if __name__ == "__main__":
    main()
