"""cli/options.py: one table of options and one check, read by click's command and by the
click-free dry-run parser alike (tests/test_fast_path.py runs both on whole starts).

``run()`` is replaced here by a recorder: these tests are about what reaches it.
"""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result

from derive_env.cli import command, options
from derive_env.render import FORMATS
from derive_env.sources import SOURCE_NAMES
from helpers import Execed

PREFIX = "ai.backend.distributed."
FW = PREFIX + "frameworks"
LABELS_VAR = "DERIVE_ENV_LABELS_FILE"
USAGE = "Usage: derive-env [OPTIONS] [--] COMMAND [ARG]...\n"
NO_COMMAND = "no command given: derive-env [OPTIONS] -- COMMAND [ARG]..., or --dry-run."
NEED_DRY_RUN = "--format needs --dry-run."
ALL_NEEDS_EXPLAIN = "--all-nodes is a part of --explain: add --explain."
FOR_A_PERSON = "--explain prints for a person; drop --format."
TWO_ENV_FILES = "--env-file given more than once: one environment at a time."
ONE_STDIN = ("--env-file - and --labels-file - both read stdin, which holds one file: give one "
             "of them a path.")
#: run()'s keywords when no option but --dry-run is given.
DRY_RUN = {"dry_run": True, "fmt": "env", "explain": False, "all_nodes": False,
           "labels_files": (), "label_items": (), "env_file": None, "source": None,
           "frameworks": None}
EXPLAIN = {**DRY_RUN, "explain": True}


@pytest.fixture
def ran(monkeypatch: pytest.MonkeyPatch) -> list[tuple[list[str], dict[str, object]]]:
    """What click's command called run() with: (command, keywords); run() returns 0."""
    calls: list[tuple[list[str], dict[str, object]]] = []

    def recorder(argv: list[str], **keywords: object) -> int:
        calls.append((argv, keywords))
        return 0

    monkeypatch.setattr(command, "run", recorder)
    return calls


def invoke(args: list[str]) -> Result:
    return CliRunner().invoke(command.cli, list(args), prog_name="derive-env")


# ------------------------------------------------------------ both parsers, one grammar

#: The choices in table order (tests/sources/test_sources.py checks the order itself).
BAD_SOURCE = "--source='bogus': expected one of auto, none, " + ", ".join(SOURCE_NAMES)

#: Command lines of options only, which both parsers read: run()'s keywords, or the usage
#: error (click prints it after "Error: ", exit 2; the fast parser hands the line to click).
BOTH: list[tuple[list[str], dict[str, object] | str]] = [
    (["--dry-run"], DRY_RUN),
    (["--dry-run", "--dry-run", "--explain", "--explain"], {**DRY_RUN, "explain": True}),
    (["--format=shell", "--dry-run"], {**DRY_RUN, "fmt": "shell"}),
    *[(["--dry-run", "--format", fmt], {**DRY_RUN, "fmt": fmt}) for fmt in FORMATS],
    (["--label", "a=b", "--dry-run", "--label=c=d", "--labels-file", "-", "--env-file", "E",
      "--source", "none"],
     {**DRY_RUN, "label_items": ("a=b", "c=d"), "labels_files": ("-",), "env_file": "E",
      "source": "none"}),
    (["--dry-run", "--label", "--format"], {**DRY_RUN, "label_items": ("--format",)}),
    (["--dry-run", "--frameworks", "pytorch,jax"], {**DRY_RUN, "frameworks": "pytorch,jax"}),
    (["--frameworks=tensorflow", "--dry-run"], {**DRY_RUN, "frameworks": "tensorflow"}),
    (["--dry-run", "--label="], {**DRY_RUN, "label_items": ("",)}),
    (["--dry-run", "--env-file", "-", "--labels-file", "L"],
     {**DRY_RUN, "env_file": "-", "labels_files": ("L",)}),
    # a source the table does not name: a usage error whether or not the image opted in
    (["--dry-run", "--source", "bogus"], BAD_SOURCE),
    ([], NO_COMMAND),
    (["--label", FW + "=pytorch"], NO_COMMAND),
    (["--env-file", "a", "--env-file", "b"], NO_COMMAND),  # the checks run in order
    (["--format", "json"], NEED_DRY_RUN),
    # --explain implies --dry-run (issue 14)
    (["--explain"], EXPLAIN),
    (["--explain", "--all-nodes"], {**EXPLAIN, "all_nodes": True}),
    (["--all-nodes", "--dry-run", "--explain", "--all-nodes"], {**EXPLAIN, "all_nodes": True}),
    (["--dry-run", "--all-nodes"], ALL_NEEDS_EXPLAIN),
    (["--all-nodes"], ALL_NEEDS_EXPLAIN),
    (["--all-nodes", "--format", "json"], ALL_NEEDS_EXPLAIN),
    (["--explain", "--format", "json"], FOR_A_PERSON),
    (["--dry-run", "--explain", "--format", "json"], FOR_A_PERSON),
    (["--format=toml", "--explain", "--dry-run"], FOR_A_PERSON),
    (["--dry-run", "--env-file", "a", "--env-file", "b"], TWO_ENV_FILES),
    (["--dry-run", "--env-file", "-", "--labels-file", "-"], ONE_STDIN),
    (["--dry-run", "--labels-file=-", "--env-file=-"], ONE_STDIN),
]


@pytest.mark.parametrize(("argv", "expected"), BOTH, ids=[" ".join(a) or "(none)" for a, _ in BOTH])
def test_click_and_the_fast_parser_accept_and_refuse_alike(
    argv: list[str], expected: dict[str, object] | str, ran: list[object]
) -> None:
    result = invoke(argv)
    values = options.values_of(argv)
    assert values is not None
    if isinstance(expected, dict):
        assert (result.exit_code, ran) == (0, [([], expected)]), result.output
        assert options.check(values) is None
        assert options.parse(argv) == expected
        return
    assert (result.exit_code, ran, result.stdout) == (2, [], "")
    assert result.stderr.startswith(USAGE)
    assert result.stderr.endswith(f"\nError: {expected}\n")
    assert options.check(values) == expected
    assert options.parse(argv) is None


#: Command lines only click reads (:func:`options.values_of` says None): what click makes of
#: them, run()'s (command, keywords) or the end of its error.
CLICK_ONLY: list[tuple[list[str], tuple[list[str], dict[str, object]] | str]] = [
    (["--dry-run", "--format", "json", "--format", "shell"], ([], {**DRY_RUN, "fmt": "shell"})),
    (["--dry-run", "--source", "none", "--source", "auto"], ([], {**DRY_RUN, "source": "auto"})),
    # a dry run with a command prints what that command would get (run() says it is not run)
    (["--dry-run", "--", "true"], (["true"], DRY_RUN)),
    (["--dry-run", "python", "train.py"], (["python", "train.py"], DRY_RUN)),
    (["--source=slurm", "--", "true"], BAD_SOURCE.replace("bogus", "slurm")),
    (["--label", "a=b", "--", "cmd", "--dry-run"],
     (["cmd", "--dry-run"], {**DRY_RUN, "dry_run": False, "label_items": ("a=b",)})),
    (["--format", "json", "--", "true"], NEED_DRY_RUN),
    # a command after --explain: explained, not run (cli.run says so on stderr)
    (["--explain", "--", "true"], (["true"], EXPLAIN)),
    (["--explain", "--all-nodes", "train.py"], (["train.py"], {**EXPLAIN, "all_nodes": True})),
    (["--all-nodes", "--", "true"], ALL_NEEDS_EXPLAIN),
    (["--env-file", "a", "--env-file", "b", "--", "cmd"], TWO_ENV_FILES),
    (["--dry-run", "--format", "yaml"],
     "Invalid value for '--format': 'yaml' is not one of 'env', 'json', 'toml', 'shell', "
     "'hosts', 'openmpi-hostfile', 'mpich-hostfile', 'deepspeed-hostfile', 'horovod-hosts', "
     "'digest', 'digest-facts'."),
    (["--dry-run", "--format", "SHELL"], "Invalid value for '--format': 'SHELL' is not one of "
     "'env', 'json', 'toml', 'shell', 'hosts', 'openmpi-hostfile', 'mpich-hostfile', "
     "'deepspeed-hostfile', 'horovod-hosts', 'digest', 'digest-facts'."),
    (["--dry-run", "--format"], "Option '--format' requires an argument."),
    (["--dry-run=1"], "Option '--dry-run' does not take a value."),
    (["--dry-run", "--bogus"], "No such option '--bogus'."),
]


@pytest.mark.parametrize(("argv", "expected"), CLICK_ONLY,
                         ids=[" ".join(a) for a, _ in CLICK_ONLY])
def test_what_the_fast_parser_leaves_to_click(
    argv: list[str], expected: tuple[list[str], dict[str, object]] | str, ran: list[object]
) -> None:
    assert options.values_of(argv) is None
    assert options.parse(argv) is None
    result = invoke(argv)
    if isinstance(expected, tuple):
        assert (result.exit_code, ran) == (0, [expected]), result.output
        return
    assert (result.exit_code, ran) == (2, [])
    assert result.stderr.endswith(f"Error: {expected}\n")


def test_the_click_command_is_the_table() -> None:
    """Each line of the table is one click option, in order, with its name, value, choices,
    help (the defaults: test_click_and_the_fast_parser_accept_and_refuse_alike); then
    click's own --version and the command."""
    params = command.cli.params
    table = [p for p in params if isinstance(p, click.Option) and p.name != "version"]
    assert [p.opts for p in table] == [[o.name] for o in options.OPTIONS]
    for param, option in zip(table, options.OPTIONS, strict=True):
        assert param.name == option.keyword
        assert (param.is_flag, param.multiple) == (
            option.kind == options.FLAG, option.kind == options.REPEATABLE)
        assert param.help == options.help_of(option)
        choices = getattr(param.type, "choices", None)
        assert (tuple(choices) if choices else None) == option.choices
        assert (param.metavar or None) == option.metavar
    assert [p.name for p in params[len(table):]] == ["version", "command"]


def test_parse_keywords() -> None:
    """The exact keywords click's command would pass to run() for the same line."""
    assert options.parse(
        ["--label=a=b", "--dry-run", "--labels-file", "L1", "--format=toml", "--label", "c=d",
         "--labels-file=L2", "--env-file", "E"]
    ) == {"dry_run": True, "fmt": "toml", "explain": False, "all_nodes": False,
          "labels_files": ("L1", "L2"),
          "label_items": ("a=b", "c=d"), "env_file": "E", "source": None, "frameworks": None}
    assert options.parse(["--dry-run"]) == {
        "dry_run": True, "fmt": "env", "explain": False, "all_nodes": False, "labels_files": (),
        "label_items": (), "env_file": None, "source": None, "frameworks": None}
    assert options.parse(["--dry-run", "--source=slurm-step"])["source"] == "slurm-step"
    # --frameworks LIST: the frameworks label (contract section 11), on both parsers.
    assert options.parse(["--dry-run", "--frameworks", "pytorch,jax"])["frameworks"] == (
        "pytorch,jax")
    assert options.parse(["--frameworks=jax", "--dry-run"])["frameworks"] == "jax"
    assert options.parse(["--dry-run", "--frameworks"]) is None  # a missing value: click's


# ------------------------------------------------------------------------ click's messages


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "Error: no command given: derive-env [OPTIONS] -- COMMAND [ARG]..., or --dry-run.\n"),
        (["--label", FW + "=pytorch"],
         "Error: no command given: derive-env [OPTIONS] -- COMMAND [ARG]..., or --dry-run.\n"),
        (["--label", FW + "=pytorch", "--"],
         "Error: no command given: derive-env [OPTIONS] -- COMMAND [ARG]..., or --dry-run.\n"),
        (["--format", "json", "--", "true"], "Error: --format needs --dry-run.\n"),
        (["--all-nodes", "true"], "Error: --all-nodes is a part of --explain: add --explain.\n"),
        (["--format", "json"], "Error: --format needs --dry-run.\n"),
        (["--dry-run", "--explain", "--format", "json"],
         "Error: --explain prints for a person; drop --format.\n"),
        (["--dry-run", "--format", "yaml"], "Error: Invalid value for '--format': 'yaml' is "
                                            "not one of 'env', 'json', 'toml', 'shell', 'hosts', "
                                            "'openmpi-hostfile', 'mpich-hostfile', "
                                            "'deepspeed-hostfile', 'horovod-hosts', 'digest', "
                                            "'digest-facts'.\n"),
    ],
)
def test_usage_errors_exit_2(
    clean_environ: Path, fake_exec: None, args: list[str], message: str
) -> None:
    result = invoke(args)
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert result.stderr.startswith("Usage: derive-env [OPTIONS] [--] COMMAND [ARG]...\n")
    assert result.stderr.endswith(message)
    # the hint is one line
    assert len(message.strip().splitlines()) == 1


def test_option_value_missing_is_a_usage_error(clean_environ: Path) -> None:
    result = invoke(["--label"])
    assert result.exit_code == 2
    assert "Error: Option '--label' requires an argument." in result.stderr


@pytest.mark.parametrize("tail", [["--dry-run"], ["--", "cmd"]], ids=["dry-run", "exec"])
def test_env_file_given_twice_is_a_usage_error(
    clean_environ: Path, tmp_path: Path, fake_exec: None, tail: list[str]
) -> None:
    sub1_env, other = tmp_path / "sub1.env", tmp_path / "main1.env"
    sub1_env.write_text("BACKENDAI_CLUSTER_HOST=sub1\n", encoding="utf-8")
    other.write_text("BACKENDAI_CLUSTER_HOST=main1\n", encoding="utf-8")
    result = invoke(["--env-file", str(sub1_env), "--env-file", str(other), *tail])
    assert result.exit_code == 2, result.output
    assert not isinstance(result.exception, Execed)
    assert result.stdout == ""
    assert result.stderr.startswith("Usage: derive-env [OPTIONS] [--] COMMAND [ARG]...\n")
    assert result.stderr.endswith(
        "Error: --env-file given more than once: one environment at a time.\n"
    )


def test_help_lists_every_source_of_the_table() -> None:
    """--source's help is built from SOURCES: a new line is listed without another edit."""
    from derive_env.sources import SOURCE_NAMES

    text = options.help_of(next(o for o in options.OPTIONS if o.name == "--source"))
    assert f"or a source name ({', '.join(SOURCE_NAMES)})." in text
    assert "{sources}" not in text
