"""``derive-env`` and ``python -m derive_env``.

The plain ENTRYPOINT form ``derive-env [--] COMMAND ARG...`` (no option before the
command) goes straight to the exec path without importing click; anything with options is
parsed by the click command in cli.py. Both end in :func:`derive_env.app.run`.
"""

from __future__ import annotations

import os
import sys


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
        from derive_env.app import run_command

        try:
            status = run_command(args[1:] if args[0] == "--" else args)
        except KeyboardInterrupt:  # e.g. Ctrl-C during a slow name lookup: no traceback
            status = 130
        sys.exit(status)
    from derive_env.cli import cli

    cli(prog_name="derive-env")


if __name__ == "__main__":
    main()
