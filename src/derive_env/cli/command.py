"""The click command, built from the option table of :mod:`derive_env.cli.options`.

It parses every command line that :mod:`derive_env.__main__` does not run without click (a
command after options, ``--help``, ``--version``, shell completion, every usage error),
then calls :func:`derive_env.cli.run`. No derivation logic here.
"""

from __future__ import annotations

import sys
from typing import Any  # click imports typing anyway

import click

from derive_env import __version__
from derive_env.cli import interrupted, run
from derive_env.cli.options import FLAG, OPTIONS, REPEATABLE, check, help_of, keywords
from derive_env.errors import printable

_EPILOG = """\b
Exit codes: 0 ok (or the command's own status), 1 dry-run output not written, 2 usage,
3 bad cluster variables, 4 bad image label, 5 environment too large, 126 command not
executable, 127 not found, 130 interrupted.
143 SIGTERM while resolving host names (label socket-ifname=auto); 130 for SIGINT there.
Preflight on every node before a job: derive-env check (see derive-env check --help).
Docs, and troubleshooting by message (operator-guide.md):
https://github.com/derive-env/derive-env/tree/main/docs"""


#: ``ctx.meta`` key of the words before the one being completed (:class:`_Command`).
_WORDS = "derive_env.words"


class _Command(click.Command):
    """click's command, keeping the words it parses: the completion of the first word
    (``check``) must know that none came before it, not even ``--``; after ``check`` the
    words are the preflight's, completed by its own command (:func:`_check_completions`)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta[_WORDS] = tuple(args)
        return super().parse_args(ctx, args)

    def shell_complete(self, ctx: click.Context, incomplete: str) -> list:
        after_check = _check_completions(ctx, incomplete)
        return super().shell_complete(ctx, incomplete) if after_check is None else after_check


def _check_completions(ctx: click.Context, incomplete: str) -> list | None:
    """After ``derive-env check``: the candidates of check's own command (``--timeout``,
    its options' values; not the start's ``--format``, which check rejects), through
    click's ``ShellComplete.get_completions``; ``None`` when ``check`` is not the first
    word."""
    words = ctx.meta.get(_WORDS, ())
    if not words or words[0] != "check" or (len(words) == 1 and incomplete == words[0]):
        return None
    from click.shell_completion import ShellComplete

    from derive_env.cli.check import command

    own = command(0.0, _COMPLETIONS)
    return ShellComplete(own, {}, "derive-env check", "").get_completions(
        list(words[1:]), incomplete)


def _complete_source(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
    """``--source``: auto, none and every source name (the source table's)."""
    from derive_env.sources import AUTO, NONE, SOURCE_NAMES

    return [name for name in (AUTO, NONE, *SOURCE_NAMES) if name.startswith(incomplete)]


def _complete_frameworks(ctx: click.Context, param: click.Parameter,
                         incomplete: str) -> list[str]:
    """``--frameworks LIST``: the next framework name after the ones typed (``pytorch,j``)."""
    from derive_env.frameworks import FRAMEWORKS

    typed, comma, last = incomplete.rpartition(",")
    return [typed + comma + f.name for f in FRAMEWORKS if not f.always
            and f.name.startswith(last) and f.name not in typed.split(",")]


def _complete_path(ctx: click.Context, param: click.Parameter, incomplete: str) -> list:
    """A ``PATH`` value: the shell's own file completion."""
    from click.shell_completion import CompletionItem

    return [CompletionItem(incomplete, type="file")]


def _complete_command(ctx: click.Context, param: click.Parameter, incomplete: str) -> list:
    """The first word: the ``check`` subcommand (:mod:`derive_env.__main__` reads it only
    there) or ``--``; any later word, or after options: a file (the command and its
    arguments)."""
    from click.shell_completion import CompletionItem

    after_check = _check_completions(ctx, incomplete)
    if after_check is not None:
        return after_check
    if not ctx.meta.get(_WORDS):
        first = [word for word in ("check", "--") if word.startswith(incomplete)]
        if first:
            return first
    return [CompletionItem(incomplete, type="file")]


def _check_after_options(command: tuple[str, ...]) -> str | None:
    """Why a command ``check`` right after options (``derive-env --frameworks pytorch
    check``) is refused: the preflight is read only as the first word, and running a
    program named ``check`` is rarely meant; ``derive-env [OPTIONS] -- check`` runs it."""
    ctx = click.get_current_context()
    words = ctx.meta.get(_WORDS, ())
    start = len(words) - len(command)
    if not command or command[0] != "check" or (start > 0 and words[start - 1] == "--"):
        return None
    return ("check must come first: derive-env check --frameworks pytorch (options "
            "after the word); to run a command named check, put -- before it")


#: Each option's completion beyond click's own (a ``--format`` choice, a flag's name).
_COMPLETIONS = {"source": _complete_source, "frameworks": _complete_frameworks,
                "labels_files": _complete_path, "env_files": _complete_path}


def _table_options(function):
    """Give ``function`` the click option of each line of the table, in table order."""
    for option in reversed(OPTIONS):  # decorators apply bottom-up
        attributes: dict[str, object] = {"help": help_of(option)}
        if option.keyword in _COMPLETIONS:
            attributes["shell_complete"] = _COMPLETIONS[option.keyword]
        if option.kind == FLAG:
            attributes["is_flag"] = True
        elif option.kind == REPEATABLE:
            attributes["multiple"] = True
        else:
            attributes["default"] = option.default
        if option.metavar is not None:
            attributes["metavar"] = option.metavar
        if option.choices is not None:
            attributes["type"] = click.Choice(option.choices)
        function = click.option(option.name, option.keyword, **attributes)(function)
    return function


@click.command(
    cls=_Command,
    context_settings={
        "help_option_names": ["-h", "--help"],
        "allow_interspersed_args": False,
        "max_content_width": 100,
    },
    epilog=_EPILOG,
)
@_table_options
@click.version_option(__version__, prog_name="derive-env")
@click.argument("command", nargs=-1, type=click.UNPROCESSED, metavar="[--] COMMAND [ARG]...",
                shell_complete=_complete_command)
def cli(**values: Any) -> None:
    """Derive distributed-training variables from the cluster manager's, then exec COMMAND.

    Reads the cluster topology from every cluster manager and launcher whose variables are
    set (Backend.AI, Slurm, PBS, LSF, Flux, Grid Engine, HTCondor, MPI launchers, torchrun,
    Kubernetes: Kubeflow, JobSet, LeaderWorkerSet, Volcano, Indexed Jobs, TPU slices;
    SageMaker, AWS Batch, Azure ML, Vertex AI, SkyPilot, dstack, Determined, Ray Train: the
    list is --source's) and the opt-in (--frameworks, DERIVE_ENV_FRAMEWORKS or the image's
    ai.backend.distributed.* labels), sets MASTER_ADDR, RANK..., torchrun's PET_* defaults,
    TF_CONFIG or JAX's coordinator address, and replaces itself with COMMAND (same PID).
    Not opted in (no ai.backend.distributed.frameworks label) the environment is passed
    unchanged.

    \b
      derive-env -- torchrun train.py
      srun --ntasks-per-node=2 derive-env --frameworks pytorch -- python train.py
      derive-env --dry-run --explain
      exports=$(derive-env --dry-run --format shell) && eval "$exports"

    A sourced hook must check the exit status, as the last line does: a bare eval of a
    failed run would start the command without the variables (docker/bootstrap.sh).
    """
    problem = check(values) or _check_after_options(values["command"])
    if problem is not None:
        raise click.UsageError(printable(problem, keep="\n"))  # a --source value, escaped
    try:
        status = run(list(values["command"]), **keywords(values))
    except KeyboardInterrupt:  # 130 as on the other paths, not click's "Aborted!" exit 1
        status = interrupted()
    sys.exit(status)
