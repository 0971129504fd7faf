"""The command line's grammar: one table of options and one check, read by both parsers.

* The click command (:mod:`derive_env.cli.command`) is built from :data:`OPTIONS`: every
  command line but the two click-free forms of :mod:`derive_env.__main__`, with ``--help``,
  ``--version`` and click's messages.
* :func:`parse` reads the dry-run forms (the hook's ``derive-env --dry-run --format shell``,
  an operator's dry run) without click, by the same table.

Both apply the table's grammar, then :func:`check`, then :func:`keywords` to get
:func:`derive_env.cli.run`'s keywords: an option or a check added here is one of both.
:func:`parse` answers only for a command line click's command accepts with the same
meaning, and ``None`` for every other (a command, ``--``, ``--help``, ``--version``, an
unknown option, a missing value, a refused check), which click then parses, so messages and
exit codes are click's (tests/test_fast_path.py runs both).

This module imports neither click nor typing: it is on the hook's path.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from derive_env.render import FORMATS

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing
if TYPE_CHECKING:
    from typing import Any

#: The kinds of option. A flag takes no value (given twice, it is given). A value option
#: takes one: click keeps the last one given, :func:`parse` answers only when it is given
#: once. A repeatable option keeps every value, in order.
FLAG, VALUE, REPEATABLE = "flag", "value", "repeatable"


class Option:
    """One option of the command line.

    :ivar name: the option as typed (``--format``); ``--name VALUE`` and ``--name=VALUE``.
    :ivar keyword: the name of its value: click's parameter, a key of :func:`values_of`.
    :ivar kind: :data:`FLAG`, :data:`VALUE` or :data:`REPEATABLE`; the default follows:
        ``False``, ``None``, ``()``.
    :ivar help: its line in ``--help``.
    :ivar metavar: the value's name in ``--help`` (``PATH``); ``None``: the choices.
    :ivar choices: the values allowed (exact, case-sensitive), or ``None`` for any.
    """

    __slots__ = ("choices", "help", "keyword", "kind", "metavar", "name")

    def __init__(self, name: str, keyword: str, kind: str, help: str,
                 metavar: str | None = None, choices: Sequence[str] | None = None) -> None:
        self.name, self.keyword, self.kind, self.help = name, keyword, kind, help
        self.metavar, self.choices = metavar, choices

    @property
    def default(self) -> Any:
        """The value when the option is not given."""
        return {FLAG: False, VALUE: None, REPEATABLE: ()}[self.kind]


#: Every option, in ``--help`` order. click adds ``--version`` and ``-h``/``--help``.
OPTIONS = (
    Option("--dry-run", "dry_run", FLAG,
           "Print the derived variables (those a command after -- would get); run nothing."),
    Option(
        "--format", "fmt", VALUE, choices=FORMATS,
        help="Dry-run output: KEY=VALUE lines (env, default), one JSON object, a TOML table, "
             "eval-safe `export` lines (shell), the job's nodes for a launcher (hosts, "
             "openmpi-/mpich-/deepspeed-hostfile, horovod-hosts), or the job digest every "
             "node must agree on (digest: `DIGEST NODE_RANK HOST`; digest-facts: the facts "
             "it covers).",
    ),
    Option(
        "--explain", "explain", FLAG,
        "Dry-run output for a person: each variable with its value and where it came from "
        "(implies --dry-run: a command given is not run).",
    ),
    Option(
        "--all-nodes", "all_nodes", FLAG,
        "With --explain: every node's view of the job, derived from the variables all nodes "
        "share, as a table (node, host, node rank, the variables that differ per node).",
    ),
    Option(
        "--label", "label_items", REPEATABLE, metavar="KEY=VALUE",
        help="An image label (repeatable); wins over the labels files.",
    ),
    Option(
        "--frameworks", "frameworks", VALUE, metavar="LIST",
        help="The frameworks label (ai.backend.distributed.frameworks), e.g. pytorch,jax: "
             "opts in a job started without the image's labels file (bare metal, srun "
             "--export=NONE); wins over every other source of that label.",
    ),
    Option(
        "--labels-file", "labels_files", REPEATABLE, metavar="PATH",
        help="Labels as a JSON object, `docker image inspect` output or its {{json .Config}} "
             "('-' for stdin); wins over the image's /etc/derive-env/labels.json, or the "
             "file DERIVE_ENV_LABELS_FILE names (repeatable, later wins).",
    ),
    Option(
        # Repeatable for the grammar, so that check() can say that one is the most.
        "--env-file", "env_files", REPEATABLE, metavar="PATH",
        help="Read the input environment from a file instead of this process's, e.g. to see "
             "what another container or node of the job would get: env -0 or /proc/PID/environ "
             "output, docker inspect output, Backend.AI's environ.txt, or dotenv KEY=VALUE "
             "lines ('-' for stdin).",
    ),
    Option(
        "--source", "source", VALUE, metavar="NAME",
        help="Which source states the topology: auto (default: detect), none (a single "
             "container), or a source name ({sources}). "
             "Default: the DERIVE_ENV_SOURCE variable, else auto.",
    ),
)

_BY_NAME = {option.name: option for option in OPTIONS}


def help_of(option: Option) -> str:
    """An option's ``--help`` text, the source names filled in from the source table (so a
    new source's line is all it takes to list it); for the click command only."""
    if "{sources}" not in option.help:
        return option.help
    from derive_env.sources import SOURCE_NAMES

    return option.help.replace("{sources}", ", ".join(SOURCE_NAMES))


def check(values: Mapping[str, Any]) -> str | None:
    """The rules between options, which no option's own grammar states.

    :param values: every option's value by keyword, as click's command receives them, and
        ``command``: the words after the options (a tuple).
    :returns: the usage error of the first rule broken (click prints it after ``Error:``,
        exit 2), or ``None``.
    """
    env_files = values["env_files"]
    if values["all_nodes"] and not values["explain"]:
        return "--all-nodes is a part of --explain: add --explain."
    if not (values["dry_run"] or values["explain"]):  # --explain implies --dry-run
        if values["fmt"] is not None:
            return "--format needs --dry-run."
        if not values["command"]:
            return "no command given: derive-env [OPTIONS] -- COMMAND [ARG]..., or --dry-run."
    elif values["explain"] and values["fmt"] is not None:
        return "--explain prints for a person; drop --format."
    # docs/behaviour.md section 2: the first non-option word is the command; a dry run with
    # one (--dry-run or --explain) prints what that command would get and runs nothing (a
    # note says so): torchrun and python train.py can get different variables.
    if len(env_files) > 1:
        return "--env-file given more than once: one environment at a time."
    if "-" in env_files and "-" in values["labels_files"]:
        return ("--env-file - and --labels-file - both read stdin, which holds one file: give "
                "one of them a path.")
    if values["source"] is not None:
        # Also for an image that did not opt in: a mistyped option is a usage error on
        # every node alike, not only on opted-in images (the table is read only here).
        from derive_env.errors import UsageError
        from derive_env.sources import choice_of

        try:
            choice_of({}, values["source"])
        except UsageError as exc:
            return str(exc)
    return None


def keywords(values: Mapping[str, Any]) -> dict[str, Any]:
    """:func:`derive_env.cli.run`'s keywords (``command`` excluded) from checked values."""
    env_files = values["env_files"]
    return {
        # --explain implies --dry-run: explaining and then running would start the job
        # while the operator reads (docs/operator-guide.md, "Dry run").
        "dry_run": values["dry_run"] or values["explain"], "fmt": values["fmt"] or "env",
        "explain": values["explain"], "all_nodes": values["all_nodes"],
        "labels_files": values["labels_files"],
        "label_items": values["label_items"], "env_file": env_files[0] if env_files else None,
        "source": values["source"], "frameworks": values["frameworks"],
    }


def values_of(args: Sequence[str]) -> dict[str, Any] | None:
    """Every option's value for a command line of options only, read by the table, without
    click.

    :param args: the command line without the program name.
    :returns: the values by keyword, as click's command would receive them, ``command``
        ``()``; ``None`` when click must read the line: a word that is not an option of the
        table (a command, ``--``, ``-h``), a flag given a value, a missing value, a value
        option given twice, a value not among its choices. Values are taken verbatim, the
        next word whatever it is, as click takes them.
    """
    given: dict[str, list[str]] = {option.keyword: [] for option in OPTIONS}
    position = 0
    while position < len(args):
        arg = args[position]
        position += 1
        option = _BY_NAME.get(arg)
        if option is not None and option.kind == FLAG:
            given[option.keyword].append(arg)
            continue
        name, equals, value = arg.partition("=")
        option = _BY_NAME.get(name)
        if option is None or option.kind == FLAG:
            return None
        if not equals:
            if position == len(args):
                return None
            value = args[position]
            position += 1
        given[option.keyword].append(value)
    values: dict[str, Any] = {"command": ()}
    for option in OPTIONS:
        found = given[option.keyword]
        if not found:
            values[option.keyword] = option.default
        elif option.kind == FLAG:
            values[option.keyword] = True
        elif option.kind == REPEATABLE:
            values[option.keyword] = tuple(found)
        elif len(found) > 1 or (option.choices is not None and found[0] not in option.choices):
            return None
        else:
            values[option.keyword] = found[0]
    return values


def parse(args: Sequence[str]) -> dict[str, Any] | None:
    """:func:`derive_env.cli.run`'s keywords for a dry-run command line, without click.

    :param args: the command line without the program name.
    :returns: the keywords (``command`` excluded: there is none), or ``None`` for a line
        :func:`values_of` leaves to click or :func:`check` refuses (click then says why).
    """
    values = values_of(args)
    if values is None or check(values) is not None:
        return None
    return keywords(values)
