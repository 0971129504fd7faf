"""app.py: the I/O half of the command line (env files, labels sources, run's error path).

Everything here runs in-process; no test reaches ``os.execve`` (the exec is replaced by a
fake that raises, so a mistake can never replace the test runner).
"""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path

import pytest

from derive_env import app, launch
from derive_env.app import load_labels, parse_env_file, read_environment, run, run_command
from derive_env.errors import LabelError, UsageError

PREFIX = "ai.backend.distributed."
FW = PREFIX + "frameworks"
LABELS_VAR = "DERIVE_ENV_LABELS_FILE"


class Execed(Exception):
    """Raised by the fake exec: carries what would have been exec'd."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        super().__init__(argv)
        self.argv = argv
        self.env = env


@pytest.fixture
def fake_exec(monkeypatch: pytest.MonkeyPatch) -> None:
    def fake(argv, env):
        raise Execed(list(argv), dict(env))

    monkeypatch.setattr(launch, "exec_command", fake)


@pytest.fixture
def no_default_labels(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Point the default labels path at a file that does not exist (whatever the machine has)."""
    missing = tmp_path / "etc-derive-env" / "labels.json"
    monkeypatch.setattr(app, "DEFAULT_LABELS_FILE", str(missing))
    return missing


def write_json(path: Path, document: object) -> str:
    path.write_text(json.dumps(document), encoding="utf-8")
    return str(path)


# --------------------------------------------------------------------------- parse_env_file


def test_env_file_comments_blank_lines_and_export_prefix() -> None:
    text = (
        "# a comment\n"
        "\n"
        "   \n"
        "   # an indented comment\n"
        "A=1\n"
        "export B=2\n"
        "export    C=3\n"
        "  D=4  \n"
    )
    assert parse_env_file(text, "x.env") == {"A": "1", "B": "2", "C": "3", "D": "4"}


def test_env_file_quotes_are_removed_when_matching_and_nothing_is_unescaped() -> None:
    text = (
        'DQ="a b  c"\n'
        "SQ='single # not a comment'\n"
        "EMPTY_DQ=\"\"\n"
        "EMPTY_SQ=''\n"
        "MIXED=\"a'\n"
        'LONE="\n'
        'NOESC="a\\nb\\"\n'
        "INNER=a \"b\" c\n"
    )
    assert parse_env_file(text, "x.env") == {
        "DQ": "a b  c",
        "SQ": "single # not a comment",
        "EMPTY_DQ": "",
        "EMPTY_SQ": "",
        "MIXED": "\"a'",
        "LONE": '"',
        "NOESC": "a\\nb\\",
        "INNER": 'a "b" c',
    }


def test_env_file_values_verbatim() -> None:
    text = "EQ=a=b=c\nEMPTY=\nBLANKS=a b\tc\nHASH=x # y\nUNI=ünï\n_U9=ok\n"
    assert parse_env_file(text, "x.env") == {
        "EQ": "a=b=c",
        "EMPTY": "",
        "BLANKS": "a b\tc",
        "HASH": "x # y",
        "UNI": "ünï",
        "_U9": "ok",
    }


def test_env_file_later_line_wins_and_crlf_is_accepted() -> None:
    assert parse_env_file("A=1\r\nB=2\r\nA=3\r\n", "x.env") == {"A": "3", "B": "2"}


@pytest.mark.parametrize(
    ("text", "number", "line"),
    [
        ("A=1\nnot a line\n", 2, "not a line"),
        ("# c\n\nA=1\n1A=x\n", 4, "1A=x"),
        ("A-B=x\n", 1, "A-B=x"),
        ("=x\n", 1, "=x"),
        ("A =x\n", 1, "A =x"),
        ("export\n", 1, "export"),
        ("export =x\n", 1, "export =x"),
        ("A=1\n  KEY VALUE  \n", 2, "  KEY VALUE  "),
    ],
)
def test_env_file_malformed_line_names_file_and_line(text: str, number: int, line: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_env_file(text, "sub2.env")
    assert str(info.value) == (
        f"--env-file sub2.env, line {number}: expected KEY=VALUE with KEY a variable name, "
        f"got {line!r}"
    )
    assert info.value.exit_code == 2


def test_env_file_lines_are_split_on_newline_only() -> None:
    # A dotenv file is "\n"-separated lines; str.splitlines() also splits on \f, \v, \x1c-\x1e,
    # \x85 and U+2028, which cuts such a value in two and shifts every later line number.
    assert parse_env_file("A=x\x0cy\nB=2\n", "x.env") == {"A": "x\x0cy", "B": "2"}
    with pytest.raises(UsageError, match=r"line 2: .* got 'bad'"):
        parse_env_file("A=x\u2028y\nbad\n", "x.env")


def test_env_file_nul_is_rejected_with_the_line_number() -> None:
    # No environment variable can hold a NUL; accepting it ends in os.execve's ValueError
    # (a traceback) instead of a usage error that names the line.
    with pytest.raises(UsageError, match=r"x\.env, line 2"):
        parse_env_file("A=1\nB=x\x00y\n", "x.env")


# --------------------------------------------------------------------------- read_environment


def test_read_environment_without_file_is_a_copy_of_the_process_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DERIVE_ENV_TEST_MARKER", "here")
    environ = read_environment(None)
    assert environ == dict(os.environ)
    environ["DERIVE_ENV_TEST_MARKER"] = "changed"
    assert os.environ["DERIVE_ENV_TEST_MARKER"] == "here"


def test_read_environment_from_file_replaces_the_process_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("DERIVE_ENV_TEST_MARKER", "here")
    env_file = tmp_path / "sub1.env"
    env_file.write_text("BACKENDAI_CLUSTER_SIZE=2\nexport PATH=/bin\n", encoding="utf-8")
    assert read_environment(str(env_file)) == {"BACKENDAI_CLUSTER_SIZE": "2", "PATH": "/bin"}


def test_read_environment_missing_file_is_a_usage_error(tmp_path: Path) -> None:
    path = tmp_path / "nope.env"
    with pytest.raises(UsageError) as info:
        read_environment(str(path))
    assert str(info.value) == f"--env-file {path}: cannot be read (No such file or directory)"
    assert info.value.exit_code == 2


def test_read_environment_directory_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as info:
        read_environment(str(tmp_path))
    assert str(info.value) == f"--env-file {tmp_path}: cannot be read (Is a directory)"


def test_read_environment_invalid_utf8_is_a_usage_error(tmp_path: Path) -> None:
    path = tmp_path / "latin1.env"
    path.write_bytes(b"A=1\nB=caf\xe9\n")
    with pytest.raises(UsageError) as info:
        read_environment(str(path))
    assert str(info.value) == (
        f"--env-file {path}: not UTF-8 text (invalid continuation byte at byte 9)"
    )


# --------------------------------------------------------------------------- load_labels


def test_labels_precedence_file_then_labels_file_then_label(tmp_path: Path) -> None:
    baked = write_json(tmp_path / "baked.json", {
        FW: "pytorch",
        PREFIX + "master-port": "1000",
        PREFIX + "pytorch-mode": "torchrun",
        "org.opencontainers.image.title": "dropped: not a distributed label",
    })
    option_file = write_json(tmp_path / "option.json", {
        PREFIX + "master-port": "2000",
        PREFIX + "nproc-per-node": "4",
    })
    labels = load_labels(
        {LABELS_VAR: baked},
        option_file,
        [PREFIX + "master-port=3000", PREFIX + "on-error=warn"],
    )
    assert labels == {
        FW: "pytorch",
        PREFIX + "master-port": "3000",
        PREFIX + "pytorch-mode": "torchrun",
        PREFIX + "nproc-per-node": "4",
        PREFIX + "on-error": "warn",
    }


def test_labels_file_wins_over_baked_file(tmp_path: Path) -> None:
    baked = write_json(tmp_path / "baked.json", {FW: "pytorch", PREFIX + "master-port": "1"})
    option_file = write_json(tmp_path / "option.json", {PREFIX + "master-port": "2"})
    assert load_labels({LABELS_VAR: baked}, option_file) == {
        FW: "pytorch", PREFIX + "master-port": "2",
    }


def test_later_label_option_wins_and_value_keeps_equals_signs(no_default_labels: Path) -> None:
    labels = load_labels({}, None, [FW + "=tensorflow", FW + "=pytorch", PREFIX + "x=a=b"])
    assert labels == {FW: "pytorch", PREFIX + "x": "a=b"}


def test_labels_default_path_missing_means_no_labels(no_default_labels: Path) -> None:
    assert not no_default_labels.exists()
    assert load_labels({}) == {}


def test_labels_empty_variable_means_default_path(no_default_labels: Path) -> None:
    assert load_labels({LABELS_VAR: ""}) == {}


def test_labels_default_path_present_is_read(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = write_json(tmp_path / "labels.json", {FW: "pytorch"})
    monkeypatch.setattr(app, "DEFAULT_LABELS_FILE", path)
    assert load_labels({}) == {FW: "pytorch"}


def test_labels_variable_wins_over_default_path(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(
        app, "DEFAULT_LABELS_FILE", write_json(tmp_path / "default.json", {FW: "tensorflow"})
    )
    named = write_json(tmp_path / "named.json", {FW: "pytorch"})
    assert load_labels({LABELS_VAR: named}) == {FW: "pytorch"}


def test_labels_variable_naming_a_missing_file_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "missing.json"
    with pytest.raises(LabelError) as info:
        load_labels({LABELS_VAR: str(path)})
    assert str(info.value) == (
        f"labels file ($DERIVE_ENV_LABELS_FILE) {path}: cannot be read (No such file or directory)"
    )
    assert info.value.exit_code == 4


def test_labels_option_naming_a_missing_file_is_an_error(
    no_default_labels: Path, tmp_path: Path
) -> None:
    path = tmp_path / "missing.json"
    with pytest.raises(LabelError) as info:
        load_labels({}, str(path))
    assert str(info.value) == f"--labels-file {path}: cannot be read (No such file or directory)"


def test_labels_docker_inspect_list(no_default_labels: Path, tmp_path: Path) -> None:
    inspect = [{
        "Id": "sha256:0123",
        "Config": {"Labels": {FW: "pytorch,tensorflow", "maintainer": "someone"}},
    }]
    assert load_labels({}, write_json(tmp_path / "inspect.json", inspect)) == {
        FW: "pytorch,tensorflow",
    }


def test_labels_docker_inspect_with_null_labels(no_default_labels: Path, tmp_path: Path) -> None:
    inspect = [{"Id": "sha256:0123", "Config": {"Labels": None}}]
    assert load_labels({}, write_json(tmp_path / "inspect.json", inspect)) == {}


def test_labels_from_stdin(
    monkeypatch: pytest.MonkeyPatch, no_default_labels: Path
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps({FW: "pytorch"})))
    assert load_labels({}, "-") == {FW: "pytorch"}


def test_labels_from_stdin_bad_json_names_stdin(
    monkeypatch: pytest.MonkeyPatch, no_default_labels: Path
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("{nope"))
    with pytest.raises(LabelError) as info:
        load_labels({}, "-")
    assert str(info.value).startswith("labels file stdin: not valid JSON (")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{nope", "labels file {path}: not valid JSON (Expecting property name enclosed in "
                  "double quotes: line 1 column 2 (char 1))"),
        ("", "labels file {path}: not valid JSON (Expecting value: line 1 column 1 (char 0))"),
        ("[]", "labels file {path}: a JSON list must be `docker image inspect` output (a list "
               "whose first item is an object with Config.Labels)"),
        ("[1]", "labels file {path}: a JSON list must be `docker image inspect` output (a list "
                "whose first item is an object with Config.Labels)"),
        ('"pytorch"', "labels file {path}: expected a JSON object of labels or `docker image "
                      "inspect` output, got a JSON string"),
        ("null", "labels file {path}: expected a JSON object of labels or `docker image "
                 "inspect` output, got a JSON null"),
        ('{"Config": {"Labels": []}}',
         "labels file {path}: expected a JSON object of labels or `docker image inspect` "
         "output, got a JSON array"),
        ('{"ai.backend.distributed.master-port": 29500}',
         "labels file {path}: label ai.backend.distributed.master-port = 29500: expected a "
         'JSON string (Docker label values are strings, write "29500")'),
    ],
)
def test_bad_labels_file_is_a_label_error(
    tmp_path: Path, no_default_labels: Path, content: str, message: str
) -> None:
    path = tmp_path / "labels.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(LabelError) as info:
        load_labels({}, str(path))
    assert str(info.value) == message.format(path=path)
    assert info.value.exit_code == 4


def test_bad_baked_labels_file_is_a_label_error(tmp_path: Path) -> None:
    path = tmp_path / "labels.json"
    path.write_text("{", encoding="utf-8")
    with pytest.raises(LabelError, match=r"^labels file .*labels\.json: not valid JSON"):
        load_labels({LABELS_VAR: str(path)})


def test_binary_labels_file_is_a_label_error(tmp_path: Path, no_default_labels: Path) -> None:
    path = tmp_path / "labels.json"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff")
    with pytest.raises(LabelError) as info:
        load_labels({}, str(path))
    assert str(info.value) == f"--labels-file {path}: not UTF-8 text (invalid start byte at byte 0)"


def test_labels_file_that_is_a_directory_is_a_label_error(tmp_path: Path) -> None:
    with pytest.raises(LabelError) as info:
        load_labels({LABELS_VAR: str(tmp_path)})
    assert str(info.value) == (
        f"labels file ($DERIVE_ENV_LABELS_FILE) {tmp_path}: cannot be read (Is a directory)"
    )


def test_deeply_nested_labels_file_is_a_label_error(
    tmp_path: Path, no_default_labels: Path
) -> None:
    # json.loads raises RecursionError (not ValueError) on deep nesting: must still be exit 4.
    path = tmp_path / "labels.json"
    path.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    with pytest.raises(LabelError):
        load_labels({}, str(path))


@pytest.mark.parametrize("item", ["no-equals-sign", "=pytorch", "  =x", ""])
def test_bad_label_option_is_a_label_error(no_default_labels: Path, item: str) -> None:
    with pytest.raises(LabelError) as info:
        load_labels({}, None, [item])
    assert str(info.value) == f"--label {item!r}: expected KEY=VALUE"


# --------------------------------------------------------------------------- run / run_command


def test_run_error_prints_message_and_note_and_returns_exit_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fake_exec: None
) -> None:
    env_file = tmp_path / "bad.env"
    env_file.write_text(
        f"{LABELS_VAR}={write_json(tmp_path / 'labels.json', {FW: 'pytorch'})}\n"
        "BACKENDAI_CLUSTER_SIZE=abc\n",
        encoding="utf-8",
    )
    assert run(["true"], env_file=str(env_file)) == 3
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        "derive-env: error: BACKENDAI_CLUSTER_SIZE='abc': expected an integer >= 1\n"
        "derive-env: note: the command was not run (exit 3)\n"
    )


def test_run_dry_run_error_has_no_note(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env_file = tmp_path / "bad.env"
    env_file.write_text(f"{LABELS_VAR}={tmp_path / 'missing.json'}\n", encoding="utf-8")
    assert run([], dry_run=True, env_file=str(env_file)) == 4
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        f"derive-env: error: labels file ($DERIVE_ENV_LABELS_FILE) {tmp_path / 'missing.json'}: "
        "cannot be read (No such file or directory)\n"
    )


def test_run_not_opted_in_execs_with_the_environment_unchanged(
    tmp_path: Path, fake_exec: None
) -> None:
    env_file = tmp_path / "in.env"
    env_file.write_text(
        f"{LABELS_VAR}={write_json(tmp_path / 'labels.json', {})}\n"
        "BACKENDAI_CLUSTER_SIZE=2\nBACKENDAI_CLUSTER_HOSTS=main1,sub1\n"
        "BACKENDAI_CLUSTER_HOST=sub1\n",
        encoding="utf-8",
    )
    with pytest.raises(Execed) as info:
        run(["cmd", "arg"], env_file=str(env_file))
    assert info.value.argv == ["cmd", "arg"]
    assert info.value.env == parse_env_file(env_file.read_text(encoding="utf-8"), "x")


def test_run_opted_in_execs_with_input_plus_changes(tmp_path: Path, fake_exec: None) -> None:
    env_file = tmp_path / "in.env"
    env_file.write_text(
        f"{LABELS_VAR}={write_json(tmp_path / 'labels.json', {FW: 'pytorch'})}\n"
        "BACKENDAI_CLUSTER_SIZE=2\nBACKENDAI_CLUSTER_HOSTS=sub1,main1\n"
        "BACKENDAI_CLUSTER_HOST=sub1\nMASTER_PORT=1234\nOTHER=kept as is\n",
        encoding="utf-8",
    )
    with pytest.raises(Execed) as info:
        run(["cmd"], env_file=str(env_file))
    env = info.value.env
    assert env["OTHER"] == "kept as is"
    assert env["MASTER_PORT"] == "1234"
    assert env["PET_MASTER_PORT"] == "1234"
    assert env["MASTER_ADDR"] == env["PET_MASTER_ADDR"] == "main1"
    assert env["NODE_RANK"] == env["PET_NODE_RANK"] == "1"
    assert env["PET_NNODES"] == "2"


def test_run_command_without_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_command([]) == 2
    assert capsys.readouterr().err == (
        "derive-env: error: no command given. Usage: derive-env [OPTIONS] -- COMMAND [ARG]... "
        "or derive-env --dry-run (see derive-env --help)\n"
    )
