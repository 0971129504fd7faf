"""``derive-env`` and ``python -m derive_env``.

Two forms skip click, whose import costs more than a derivation (docs/performance.md):

* the ENTRYPOINT form ``derive-env [--] COMMAND ARG...`` (no option before the command)
  goes straight to the exec path;
* the dry-run forms of the hook and of operators (``derive-env --dry-run --format shell``,
  ``--dry-run --explain``, ``--label``/``--labels-file``/``--env-file``), which
  :func:`derive_env.app.dry_run_options` parses only when click would accept them with the
  same meaning.

Anything else is parsed by the click command in cli.py. All end in
:func:`derive_env.app.run`.
"""

from __future__ import annotations

import os
import sys

#: click's shell-completion switch for prog_name ``derive-env`` (click.core, ``complete_var``):
#: when set, click answers the completion request instead of running the command.
_COMPLETE_VARIABLE = "_DERIVE_ENV_COMPLETE"


def main() -> None:
    """Entry point of the ``derive-env`` console script."""
    args = sys.argv[1:]
    if args and (args[0] == "--" or not args[0].startswith("-")):
        from derive_env.app import run_command

        try:
            status = run_command(args[1:] if args[0] == "--" else args)
        except KeyboardInterrupt:  # e.g. Ctrl-C during a slow name lookup: no traceback
            status = 130
        sys.exit(status)
    from derive_env.app import dry_run_options, run

    options = None if os.environ.get(_COMPLETE_VARIABLE) else dry_run_options(args)
    if options is not None:
        try:
            status = run([], **options)  # type: ignore[arg-type]
        except KeyboardInterrupt:
            status = _aborted()
        _exit_now(status)
    from derive_env.cli import cli

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


def _aborted() -> int:
    """What click's standalone mode does on Ctrl-C, so both dry-run paths end alike: a blank
    line closing the terminal's ``^C`` echo, ``Aborted!``, exit status 1 (click.core)."""
    try:
        sys.stderr.write("\nAborted!\n")
        sys.stderr.flush()
    except (AttributeError, OSError, ValueError):  # stderr closed or gone
        pass
    return 1


if __name__ == "__main__":
    main()
