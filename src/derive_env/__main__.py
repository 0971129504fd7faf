"""``derive-env`` and ``python -m derive_env``.

The plain ENTRYPOINT form ``derive-env [--] COMMAND ARG...`` (no option before the
command) goes straight to the exec path without importing click; anything with options is
parsed by the click command in cli.py. Both end in :func:`derive_env.app.run`.
"""

from __future__ import annotations

import sys


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
    from derive_env.cli import cli

    cli(prog_name="derive-env")


if __name__ == "__main__":
    main()
