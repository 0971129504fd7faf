"""app.py: the I/O half of the command line (env files, labels sources, run's error path).

Everything here runs in-process; no test reaches ``os.execve`` (the exec is replaced by a
fake that raises, so a mistake can never replace the test runner).
"""

from __future__ import annotations

import errno
import io
import json
import os
import sys
from pathlib import Path

import pytest

from derive_env import app, launch
from derive_env.app import load_labels, parse_env_file, read_environment, run, run_command
from derive_env.errors import LabelError, UsageError
from helpers import Execed

PREFIX = "ai.backend.distributed."
FW = PREFIX + "frameworks"
LABELS_VAR = "DERIVE_ENV_LABELS_FILE"




@pytest.fixture
def no_default_labels(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Point the default labels path at a file that does not exist (whatever the machine has)."""
    missing = tmp_path / "etc-derive-env" / "labels.json"
    monkeypatch.setattr(app, "DEFAULT_LABELS_FILE", str(missing))
    return missing


def stdin_of(data: bytes) -> io.TextIOWrapper:
    """A stand-in for ``sys.stdin``: derive-env reads stdin's bytes (``.buffer``)."""
    return io.TextIOWrapper(io.BytesIO(data), encoding="utf-8")


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


NO_EQUALS = "a line without '='"
USE_NUL = ("capture the environment with `env -0` (or copy /proc/PID/environ, or "
           "`docker exec CONTAINER env -0`), which --env-file reads exactly")


@pytest.mark.parametrize(
    ("text", "number", "got"),
    [
        ("A=1\nnot a line\n", 2, NO_EQUALS),
        ("# c\n\nA=1\n1A=x\n", 4, "the name '1A'"),
        ("A-B=x\n", 1, "the name 'A-B'"),
        ("=x\n", 1, "the name ''"),
        ("A =x\n", 1, "the name 'A '"),
        ("export\n", 1, NO_EQUALS),
        ("export =x\n", 1, "the name ''"),
        ("A=1\n  KEY VALUE  \n", 2, NO_EQUALS),
    ],
)
def test_env_file_malformed_line_names_file_and_line(text: str, number: int, got: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_env_file(text, "sub2.env")
    assert str(info.value) == (
        f"--env-file sub2.env (dotenv lines), line {number}: expected KEY=VALUE with KEY a "
        f"variable name, got {got}" + ("; if the file is `env` output, the value of A (line "
        f"{number - 1}) may span lines: {USE_NUL}" if "A=1" in text else "")
    )
    assert info.value.exit_code == 2


@pytest.mark.parametrize(
    ("line", "got"),
    [
        ("A B=s3cr3t-value", "the name 'A B'"),
        ("export DB PASSWORD=s3cr3t-value", "the name 'DB PASSWORD'"),
        ("TOKEN s3cr3t-value", NO_EQUALS),
        ("s3cr3t-value", NO_EQUALS),
        ("-s3cr3t-value", NO_EQUALS),
    ],
)
def test_env_file_malformed_line_is_not_echoed(line: str, got: str) -> None:
    # The line may hold a secret (a password after a misspelt name): only the name is shown.
    with pytest.raises(UsageError) as info:
        parse_env_file(f"OK=1\n{line}\n", "secrets.env")
    assert str(info.value) == (
        "--env-file secrets.env (dotenv lines), line 2: expected KEY=VALUE with KEY a "
        f"variable name, got {got}; if the file is `env` output, the value of OK (line 1) "
        f"may span lines: {USE_NUL}"
    )
    assert "s3cr3t" not in str(info.value)


def test_env_file_malformed_long_name_is_shortened() -> None:
    name = "A B" * 100
    with pytest.raises(UsageError) as info:
        parse_env_file(f"{name}=v\n", "x.env")
    assert str(info.value) == (
        "--env-file x.env (dotenv lines), line 1: expected KEY=VALUE with KEY a variable name, "
        f"got the name {name[:60] + '... (300 characters)'!r}"
    )


def test_env_file_lines_are_split_on_newline_only() -> None:
    # A dotenv file is "\n"-separated lines; str.splitlines() also splits on \f, \v, \x1c-\x1e,
    # \x85 and U+2028, which cuts such a value in two and shifts every later line number.
    assert parse_env_file("A=x\x0cy\nB=2\n", "x.env") == {"A": "x\x0cy", "B": "2"}
    with pytest.raises(UsageError, match=r"line 2: .* got a line without '='; if the file"):
        parse_env_file("A=x\u2028y\nbad\n", "x.env")


def test_env_file_nul_is_rejected_with_the_line_number() -> None:
    # No environment variable can hold a NUL; accepting it ends in os.execve's ValueError
    # (a traceback) instead of a usage error that names the line. Changed deliberately
    # (issue 7): a file ENDING in a NUL is a NUL-separated one (env -0), and read as such.
    with pytest.raises(UsageError) as info:
        parse_env_file("A=1\nB=x\x00y\n", "x.env")
    assert str(info.value) == (
        "--env-file x.env (dotenv lines), line 2: contains a NUL byte, which no environment "
        "variable can hold; a NUL-separated file (env -0, /proc/PID/environ) ends in one: this "
        "one does not, so it was read as lines"
    )


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
    assert str(info.value) == (
        f"--env-file {str(path)!r}: cannot be read (No such file or directory)"
    )
    assert info.value.exit_code == 2


def test_read_environment_directory_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as info:
        read_environment(str(tmp_path))
    assert str(info.value) == f"--env-file {str(tmp_path)!r}: cannot be read (Is a directory)"


def test_read_environment_invalid_utf8_is_a_usage_error(tmp_path: Path) -> None:
    path = tmp_path / "latin1.env"
    path.write_bytes(b"A=1\nB=caf\xe9\n")
    with pytest.raises(UsageError) as info:
        read_environment(str(path))
    assert str(info.value) == (
        f"--env-file {str(path)!r}: not UTF-8 text (invalid continuation byte at byte 9)"
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
        [option_file],
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
    assert load_labels({LABELS_VAR: baked}, [option_file]) == {
        FW: "pytorch", PREFIX + "master-port": "2",
    }


def test_later_label_option_wins_and_value_keeps_equals_signs(no_default_labels: Path) -> None:
    labels = load_labels({}, (), [FW + "=tensorflow", FW + "=pytorch", PREFIX + "x=a=b"])
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
        f"labels file ($DERIVE_ENV_LABELS_FILE) {str(path)!r}: cannot be read (No such file or "
        "directory)"
    )
    assert info.value.exit_code == 4


def test_labels_option_naming_a_missing_file_is_an_error(
    no_default_labels: Path, tmp_path: Path
) -> None:
    path = tmp_path / "missing.json"
    with pytest.raises(LabelError) as info:
        load_labels({}, [str(path)])
    assert str(info.value) == (
        f"--labels-file {str(path)!r}: cannot be read (No such file or directory)"
    )


def test_labels_docker_inspect_list(no_default_labels: Path, tmp_path: Path) -> None:
    inspect = [{
        "Id": "sha256:0123",
        "Config": {"Labels": {FW: "pytorch,tensorflow", "maintainer": "someone"}},
    }]
    assert load_labels({}, [write_json(tmp_path / "inspect.json", inspect)]) == {
        FW: "pytorch,tensorflow",
    }


def test_labels_docker_inspect_with_null_labels(no_default_labels: Path, tmp_path: Path) -> None:
    inspect = [{"Id": "sha256:0123", "Config": {"Labels": None}}]
    assert load_labels({}, [write_json(tmp_path / "inspect.json", inspect)]) == {}


def test_labels_from_stdin(
    monkeypatch: pytest.MonkeyPatch, no_default_labels: Path
) -> None:
    monkeypatch.setattr(sys, "stdin", stdin_of(json.dumps({FW: "pytorch"}).encode()))
    assert load_labels({}, ["-"]) == {FW: "pytorch"}


def test_labels_from_stdin_bad_json_names_stdin(
    monkeypatch: pytest.MonkeyPatch, no_default_labels: Path
) -> None:
    monkeypatch.setattr(sys, "stdin", stdin_of(b"{nope"))
    with pytest.raises(LabelError) as info:
        load_labels({}, ["-"])
    assert str(info.value).startswith("labels file stdin: not valid JSON (")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{nope", "labels file {path}: not valid JSON (Expecting property name enclosed in "
                  "double quotes: line 1 column 2 (char 1))"),
        ("", "labels file {path}: empty (expected a JSON object of labels)"),
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
        load_labels({}, [str(path)])
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
        load_labels({}, [str(path)])
    assert str(info.value) == (
        f"--labels-file {str(path)!r}: not UTF-8 text (invalid start byte at byte 0)"
    )


def test_labels_file_that_is_a_directory_is_a_label_error(tmp_path: Path) -> None:
    with pytest.raises(LabelError) as info:
        load_labels({LABELS_VAR: str(tmp_path)})
    assert str(info.value) == (
        f"labels file ($DERIVE_ENV_LABELS_FILE) {str(tmp_path)!r}: cannot be read (Is a "
        "directory)"
    )


def test_deeply_nested_labels_file_is_a_label_error(
    tmp_path: Path, no_default_labels: Path
) -> None:
    # json.loads raises RecursionError (not ValueError) on deep nesting: must still be exit 4.
    path = tmp_path / "labels.json"
    path.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    with pytest.raises(LabelError):
        load_labels({}, [str(path)])


@pytest.mark.parametrize("item", ["no-equals-sign", "=pytorch", "  =x", ""])
def test_bad_label_option_is_a_label_error(no_default_labels: Path, item: str) -> None:
    with pytest.raises(LabelError) as info:
        load_labels({}, (), [item])
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
        "derive-env: error: labels file ($DERIVE_ENV_LABELS_FILE) "
        f"{str(tmp_path / 'missing.json')!r}: cannot be read (No such file or directory)\n"
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


# --------------------------------------------------------------------------- several --labels-file


def test_labels_files_are_a_sequence_and_later_wins(
    no_default_labels: Path, tmp_path: Path
) -> None:
    first = write_json(tmp_path / "first.json", {FW: "tensorflow", PREFIX + "master-port": "1"})
    second = write_json(tmp_path / "second.json", {FW: "pytorch"})
    assert load_labels({}, [first, second]) == {FW: "pytorch", PREFIX + "master-port": "1"}
    assert load_labels({}, (second, first)) == {FW: "tensorflow", PREFIX + "master-port": "1"}


def test_labels_files_mix_stdin_and_files_in_order(
    monkeypatch: pytest.MonkeyPatch, no_default_labels: Path, tmp_path: Path
) -> None:
    monkeypatch.setattr(sys, "stdin", stdin_of(json.dumps({FW: "jax"}).encode()))
    named = write_json(tmp_path / "named.json", {FW: "pytorch", PREFIX + "master-port": "2"})
    assert load_labels({}, [named, "-"], [PREFIX + "master-port=3"]) == {
        FW: "jax", PREFIX + "master-port": "3",
    }


def test_second_labels_file_unreadable_is_an_error_even_after_a_good_one(
    no_default_labels: Path, tmp_path: Path
) -> None:
    good = write_json(tmp_path / "good.json", {FW: "pytorch"})
    missing = tmp_path / "missing.json"
    with pytest.raises(LabelError) as info:
        load_labels({}, [good, str(missing)])
    assert str(info.value) == (
        f"--labels-file {str(missing)!r}: cannot be read (No such file or directory)"
    )


# --------------------------------------------------------------------------- reading input files


def test_path_in_a_read_error_is_quoted_so_control_characters_show(
    no_default_labels: Path, tmp_path: Path
) -> None:
    path = tmp_path / "odd\nname.json"
    with pytest.raises(LabelError) as info:
        load_labels({}, [str(path)])
    assert str(info.value) == (
        f"--labels-file {str(path)!r}: cannot be read (No such file or directory)"
    )
    assert "\n" not in str(info.value)


def test_max_input_bytes_is_one_mib() -> None:
    assert app.MAX_INPUT_BYTES == 1048576


@pytest.mark.parametrize("source", ["labels-file", "labels-variable", "env-file"])
def test_input_file_over_one_mib_is_an_error(
    no_default_labels: Path, tmp_path: Path, source: str
) -> None:
    path = tmp_path / "big"
    # Valid content but one byte too many: the size alone is refused.
    if source == "env-file":
        path.write_bytes(b"A=1\n" + b"#" * (app.MAX_INPUT_BYTES - 3))
    else:
        path.write_bytes(b"{}" + b" " * (app.MAX_INPUT_BYTES - 1))
    assert path.stat().st_size == app.MAX_INPUT_BYTES + 1
    shown = repr(str(path))
    if source == "env-file":
        with pytest.raises(UsageError) as info:
            read_environment(str(path))
        assert str(info.value) == (
            f"--env-file {shown}: larger than 1048576 bytes, too large to be one"
        )
        assert info.value.exit_code == 2
        return
    with pytest.raises(LabelError) as info:
        if source == "labels-file":
            load_labels({}, [str(path)])
        else:
            load_labels({LABELS_VAR: str(path)})
    what = "--labels-file" if source == "labels-file" else "labels file ($DERIVE_ENV_LABELS_FILE)"
    assert str(info.value) == f"{what} {shown}: larger than 1048576 bytes, too large to be one"
    assert info.value.exit_code == 4


def test_input_file_of_exactly_one_mib_is_read(no_default_labels: Path, tmp_path: Path) -> None:
    labels = tmp_path / "labels.json"
    labels.write_bytes(json.dumps({FW: "pytorch"}).encode().ljust(app.MAX_INPUT_BYTES))
    assert labels.stat().st_size == app.MAX_INPUT_BYTES
    assert load_labels({}, [str(labels)]) == {FW: "pytorch"}
    env_file = tmp_path / "x.env"
    env_file.write_bytes(b"A=1\n" + b"#" * (app.MAX_INPUT_BYTES - 4))
    assert env_file.stat().st_size == app.MAX_INPUT_BYTES
    assert read_environment(str(env_file)) == {"A": "1"}


def test_endless_labels_file_is_refused_not_read_forever(no_default_labels: Path) -> None:
    if not os.path.exists("/dev/zero"):
        pytest.skip("no /dev/zero")
    with pytest.raises(LabelError) as info:
        load_labels({}, ["/dev/zero"])
    assert str(info.value) == (
        "--labels-file '/dev/zero': larger than 1048576 bytes, too large to be one"
    )


@pytest.mark.parametrize("via", ["variable", "option", "env-file"])
def test_fifo_is_refused_at_once_not_waited_on(
    via: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_default_labels: Path
) -> None:
    """A FIFO with no writer would block open() forever (and the container start with it)."""
    fifo = tmp_path / "labels.fifo"
    os.mkfifo(fifo)
    tail = (f" {str(fifo)!r}: a FIFO or socket, which can wait for a writer forever; write "
            "it to a file first, or give - for stdin")
    if via == "env-file":
        with pytest.raises(UsageError) as info:
            read_environment(str(fifo))
        assert str(info.value) == "--env-file" + tail
        return
    with pytest.raises(LabelError) as info:
        if via == "variable":
            load_labels({"DERIVE_ENV_LABELS_FILE": str(fifo)})
        else:
            load_labels({}, [str(fifo)])
    what = "labels file ($DERIVE_ENV_LABELS_FILE)" if via == "variable" else "--labels-file"
    assert str(info.value) == what + tail


def test_env_file_json_lone_surrogate_is_a_usage_error(tmp_path: Path) -> None:
    """docker inspect JSON may carry \\ud800: no exec'd environment can hold it (no traceback)."""
    path = tmp_path / "inspect.json"
    path.write_text('{"Env":["PATH=/bin","A=\\ud800"]}', encoding="utf-8")
    with pytest.raises(UsageError) as info:
        read_environment(str(path))
    assert str(info.value) == (
        f"--env-file {path}: variable 'A' holds a lone UTF-16 surrogate (a JSON escape such "
        "as \\ud800), which no environment variable can hold"
    )


def test_labels_file_path_with_a_lone_surrogate_is_an_error(no_default_labels: Path) -> None:
    with pytest.raises(LabelError) as info:
        load_labels({"DERIVE_ENV_LABELS_FILE": "/tmp/\ud800"})
    assert str(info.value) == (
        "labels file ($DERIVE_ENV_LABELS_FILE) '/tmp/\\ud800': not a valid file path"
    )


def test_stdin_over_one_mib_is_an_error(
    monkeypatch: pytest.MonkeyPatch, no_default_labels: Path
) -> None:
    monkeypatch.setattr(sys, "stdin", stdin_of(b"{}" + b" " * app.MAX_INPUT_BYTES))
    with pytest.raises(LabelError) as info:
        load_labels({}, ["-"])
    assert str(info.value) == (
        "--labels-file stdin: larger than 1048576 bytes, too large to be one"
    )


def test_closed_stdin_is_an_error(monkeypatch: pytest.MonkeyPatch, no_default_labels: Path) -> None:
    # `derive-env --labels-file - <&-`: Python sets sys.stdin to None.
    monkeypatch.setattr(sys, "stdin", None)
    with pytest.raises(LabelError) as labels_info:
        load_labels({}, ["-"])
    assert str(labels_info.value) == "--labels-file -: stdin is closed"
    assert labels_info.value.exit_code == 4
    with pytest.raises(UsageError) as env_info:
        read_environment("-")
    assert str(env_info.value) == "--env-file -: stdin is closed"
    assert env_info.value.exit_code == 2


def test_stdin_is_read_as_utf8_bytes_whatever_its_text_encoding(
    monkeypatch: pytest.MonkeyPatch, no_default_labels: Path
) -> None:
    # sys.stdin's own encoding follows the locale (ASCII or latin-1 in a bare container); the
    # bytes are read from sys.stdin.buffer and decoded as UTF-8, like the files.
    data = json.dumps({PREFIX + "note": "pytörch"}, ensure_ascii=False).encode("utf-8")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="latin-1"))
    assert load_labels({}, ["-"]) == {PREFIX + "note": "pytörch"}


def test_stdin_not_utf8_names_stdin(
    monkeypatch: pytest.MonkeyPatch, no_default_labels: Path
) -> None:
    monkeypatch.setattr(sys, "stdin", stdin_of(b"\xff{}"))
    with pytest.raises(LabelError) as info:
        load_labels({}, ["-"])
    assert str(info.value) == "--labels-file stdin: not UTF-8 text (invalid start byte at byte 0)"


def test_env_file_from_stdin_names_stdin_in_messages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", stdin_of(b"A=1\nnot a line\n"))
    with pytest.raises(UsageError) as info:
        read_environment("-")
    assert str(info.value) == (
        "--env-file stdin (dotenv lines), line 2: expected KEY=VALUE with KEY a variable name, "
        "got a line without '='; if the file is `env` output, the value of A (line 1) may span "
        f"lines: {USE_NUL}"
    )
    monkeypatch.setattr(sys, "stdin", stdin_of(b"export A=1\nB='x y'\n"))
    assert read_environment("-") == {"A": "1", "B": "x y"}
    monkeypatch.setattr(sys, "stdin", stdin_of(b""))
    assert read_environment("-") == {}


# ------------------------------------------------------------------------ the default labels file


def test_default_labels_path_that_is_a_directory_is_an_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Only a missing default file (ENOENT) means "no labels"; anything else is reported.
    monkeypatch.setattr(app, "DEFAULT_LABELS_FILE", str(tmp_path))
    with pytest.raises(LabelError) as info:
        load_labels({})
    assert str(info.value) == f"labels file {str(tmp_path)!r}: cannot be read (Is a directory)"
    assert info.value.exit_code == 4


def test_default_labels_path_under_a_file_is_an_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    not_a_dir = tmp_path / "etc-derive-env"
    not_a_dir.write_text("", encoding="utf-8")
    path = not_a_dir / "labels.json"
    monkeypatch.setattr(app, "DEFAULT_LABELS_FILE", str(path))
    with pytest.raises(LabelError) as info:
        load_labels({})
    assert str(info.value) == f"labels file {str(path)!r}: cannot be read (Not a directory)"


def test_default_labels_path_permission_denied_is_an_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # EACCES, e.g. /etc/derive-env without search permission for the container's user
    # (simulated: the tests may run as root, which permissions do not stop).
    path = str(tmp_path / "etc-derive-env" / "labels.json")
    real_open = os.open

    def fake_open(file, *args, **kwargs):
        if file == path:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), file)
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(app, "DEFAULT_LABELS_FILE", path)
    monkeypatch.setattr(app.os, "open", fake_open)
    with pytest.raises(LabelError) as info:
        load_labels({})
    assert str(info.value) == f"labels file {path!r}: cannot be read (Permission denied)"


def test_default_labels_path_empty_file_is_an_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = tmp_path / "labels.json"
    path.write_text("", encoding="utf-8")
    monkeypatch.setattr(app, "DEFAULT_LABELS_FILE", str(path))
    with pytest.raises(LabelError) as info:
        load_labels({})
    assert str(info.value) == f"labels file {path}: empty (expected a JSON object of labels)"


# --------------------------------------------------------------------------- empty labels input


@pytest.mark.parametrize("content", ["", "\n", "  \t\r\n  "])
def test_empty_labels_file_is_an_error(
    no_default_labels: Path, tmp_path: Path, content: str
) -> None:
    path = tmp_path / "labels.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(LabelError) as info:
        load_labels({}, [str(path)])
    assert str(info.value) == f"labels file {path}: empty (expected a JSON object of labels)"
    assert info.value.exit_code == 4


def test_empty_labels_stdin_is_an_error(
    monkeypatch: pytest.MonkeyPatch, no_default_labels: Path
) -> None:
    monkeypatch.setattr(sys, "stdin", stdin_of(b""))
    with pytest.raises(LabelError) as info:
        load_labels({}, ["-"])
    assert str(info.value) == "labels file stdin: empty (expected a JSON object of labels)"


# ------------------------------------------------------------------------ stray labels, no opt-in


def stray_message(label: str, value: str) -> str:
    return (
        f"label {label}={value!r} is set but {FW} is not, so the image did not opt in and "
        "nothing would be derived: is the frameworks label misspelt? Set "
        f"{FW}, or remove the ai.backend.distributed.* labels"
    )


def env_file_with_labels(tmp_path: Path, labels: dict[str, str], extra: str = "") -> Path:
    env_file = tmp_path / "in.env"
    env_file.write_text(
        f"{LABELS_VAR}={write_json(tmp_path / 'labels.json', labels)}\nPATH=/bin\n{extra}",
        encoding="utf-8",
    )
    return env_file


def test_run_misspelt_frameworks_label_is_an_error_and_nothing_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fake_exec: None
) -> None:
    env_file = env_file_with_labels(tmp_path, {PREFIX + "framework": "pytorch"})
    assert run(["cmd"], env_file=str(env_file)) == 4  # no Execed: nothing was exec'd
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        f"derive-env: error: {stray_message(PREFIX + 'framework', 'pytorch')}\n"
        "derive-env: note: the command was not run (exit 4)\n"
    )
    assert run([], dry_run=True, fmt="json", env_file=str(env_file)) == 4
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == (
        "", f"derive-env: error: {stray_message(PREFIX + 'framework', 'pytorch')}\n"
    )


def test_run_stray_label_with_on_error_warn_warns_and_runs_unchanged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fake_exec: None
) -> None:
    labels = {PREFIX + "framework": "pytorch", PREFIX + "on-error": "warn"}
    env_file = env_file_with_labels(tmp_path, labels, "BACKENDAI_CLUSTER_SIZE=1\n")
    with pytest.raises(Execed) as info:
        run(["cmd", "arg"], env_file=str(env_file))
    assert info.value.argv == ["cmd", "arg"]
    assert info.value.env == parse_env_file(env_file.read_text(encoding="utf-8"), "x")
    warning = f"derive-env: warning: {stray_message(PREFIX + 'framework', 'pytorch')}\n"
    assert capsys.readouterr() == ("", warning)
    assert run([], dry_run=True, fmt="json", env_file=str(env_file)) == 0
    assert capsys.readouterr() == ("{}\n", warning)


def test_run_stray_label_with_an_invalid_on_error_is_still_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fake_exec: None
) -> None:
    # on-error reads as fail unless it is "warn" (as for an opted-in image). Changed
    # deliberately (issue 7): keyword values ignore letter case, so "Warn" now warns.
    labels = {PREFIX + "framework": "pytorch", PREFIX + "on-error": "ignore"}
    env_file = env_file_with_labels(tmp_path, labels)
    assert run(["cmd"], env_file=str(env_file)) == 4
    assert capsys.readouterr().err.startswith(
        f"derive-env: error: {stray_message(PREFIX + 'framework', 'pytorch')}\n"
    )


# --------------------------------------------------------------------------- warnings and --explain


ROUTE_HEADER = (
    "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
)
NO_ROUTE_WARNING = (
    "label ai.backend.distributed.socket-ifname=auto: no interface routes to the master "
    "'main1' (resolved: 198.18.0.10); GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME not set"
)


@pytest.fixture
def warning_session(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, backendai_env
) -> None:
    """This process is sub1 of a 3-node session whose derivation warns (no route to main1)."""
    from derive_env.frameworks.context import HostFacts

    for key in list(os.environ):
        if key.startswith(("BACKENDAI_", "DERIVE_ENV_", "PET_", "TF_", "JAX_", "GLOO_", "NCCL_")
                          ) or key in {"MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "RANK",
                                       "WORLD_SIZE", "GROUP_RANK", "GPU_COUNT", "N_GPUS"}:
            monkeypatch.delenv(key)
    for key, value in backendai_env(["sub2", "sub1", "main1"], "sub1").items():
        monkeypatch.setenv(key, value)
    labels = write_json(tmp_path / "labels.json", {FW: "pytorch", PREFIX + "socket-ifname": "auto"})
    monkeypatch.setenv(LABELS_VAR, labels)
    # sub1 resolves: a name that does not would add a warning of its own.
    names = {"main1": ("198.18.0.10",), "sub1": ("198.18.0.11",)}
    facts = HostFacts(interfaces=("lo", "eth0"), routes_v4=ROUTE_HEADER, hostname="sub1",
                      resolve=lambda wanted: {n: names.get(n, ()) for n in wanted})
    monkeypatch.setattr(app, "gather_facts", lambda full=True: facts)


def test_explain_prints_warnings_in_its_output_only(
    warning_session: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run([], dry_run=True, explain=True) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    assert captured.out.splitlines()[-1] == f"warning: {NO_ROUTE_WARNING}"
    assert captured.out.count(NO_ROUTE_WARNING) == 1


@pytest.mark.parametrize("fmt", ["env", "json", "toml", "shell"])
def test_machine_formats_print_warnings_on_stderr(
    warning_session: None, capsys: pytest.CaptureFixture[str], fmt: str
) -> None:
    assert run([], dry_run=True, fmt=fmt) == 0
    captured = capsys.readouterr()
    assert captured.err == f"derive-env: warning: {NO_ROUTE_WARNING}\n"
    assert NO_ROUTE_WARNING not in captured.out


def test_exec_path_prints_warnings_on_stderr(
    warning_session: None, capsys: pytest.CaptureFixture[str], fake_exec: None
) -> None:
    with pytest.raises(Execed) as info:
        run(["cmd"])
    assert info.value.env["MASTER_ADDR"] == "main1"
    assert capsys.readouterr() == ("", f"derive-env: warning: {NO_ROUTE_WARNING}\n")


# --------------------------------------------------------------------------- on-error=warn


BAD_SIZE = (
    "BACKENDAI_CLUSTER_SIZE=3\nBACKENDAI_CLUSTER_HOSTS=main1,sub1\nBACKENDAI_CLUSTER_HOST=sub1\n"
)
BAD_SIZE_MESSAGE = (
    "BACKENDAI_CLUSTER_HOSTS='main1,sub1': expected exactly 3 entries "
    "(BACKENDAI_CLUSTER_SIZE=3), got 2"
)


@pytest.mark.parametrize(
    ("fmt", "explain", "output"),
    [
        ("json", False, "{}\n"),
        ("env", False, ""),
        ("toml", False, ""),
        ("shell", False, ""),
        ("env", True, "nothing derived: on-error=warn (see the warning above)\n"),
    ],
)
def test_on_error_warn_dry_run_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str, explain: bool, output: str
) -> None:
    env_file = env_file_with_labels(tmp_path, {FW: "pytorch", PREFIX + "on-error": "warn"},
                                    BAD_SIZE)
    assert run([], dry_run=True, fmt=fmt, explain=explain, env_file=str(env_file)) == 0
    assert capsys.readouterr() == (output, (
        f"derive-env: warning: {BAD_SIZE_MESSAGE}\n"
        "derive-env: warning: on-error=warn: nothing derived\n"
    ))


def _arg_max_fitting(argv: list[str], env: dict[str, str]) -> int:
    """The smallest ARG_MAX for which ``argv`` and ``env`` pass launch.check_limits."""
    low, high = 1, 1 << 24
    while low < high:
        middle = (low + high) // 2
        try:
            launch.check_limits(argv, env, middle)
        except launch.EnvironmentTooLarge:
            low = middle + 1
        else:
            high = middle
    return low


def test_on_error_warn_size_check_counts_the_commands_argv(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    fake_exec: None,
) -> None:
    # The input environment plus the command fit exactly; the derived variables would not.
    # on-error=warn then runs the command unchanged (it would fit), instead of deriving and
    # failing later at the exec with exit 5 because the argv was left out of the check.
    env_file = env_file_with_labels(
        tmp_path, {FW: "pytorch", PREFIX + "on-error": "warn"}, "BACKENDAI_CLUSTER_SIZE=1\n"
    )
    environ = read_environment(str(env_file))
    command = ["cmd", "a" * 100_000]
    arg_max = _arg_max_fitting(command, environ)
    real_sysconf = os.sysconf
    monkeypatch.setattr(
        os, "sysconf", lambda name: arg_max if name == "SC_ARG_MAX" else real_sysconf(name)
    )
    with pytest.raises(Execed) as info:
        run(command, env_file=str(env_file))
    assert info.value.argv == command
    assert info.value.env == environ
    err = capsys.readouterr().err
    assert err.startswith("derive-env: warning: environment and command line take ")
    assert f"the kernel's ARG_MAX is {arg_max} bytes" in err
    assert err.endswith(
        "derive-env: warning: on-error=warn: running the command with the environment "
        "unchanged\n"
    )


def test_on_error_warn_cannot_help_when_the_command_alone_is_too_large(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    fake_exec: None,
) -> None:
    env_file = env_file_with_labels(
        tmp_path, {FW: "pytorch", PREFIX + "on-error": "warn"}, "BACKENDAI_CLUSTER_SIZE=1\n"
    )
    environ = read_environment(str(env_file))
    command = ["cmd", "a" * 100_000]
    arg_max = _arg_max_fitting(command, environ) - 1
    real_sysconf = os.sysconf
    monkeypatch.setattr(
        os, "sysconf", lambda name: arg_max if name == "SC_ARG_MAX" else real_sysconf(name)
    )
    assert run(command, env_file=str(env_file)) == 5  # no Execed
    err = capsys.readouterr().err
    assert err.startswith("derive-env: error: environment and command line take ")
    assert err.endswith("derive-env: note: the command was not run (exit 5)\n")


def test_pydantic_plugin_stand_in_answers_no_plugins_and_falls_back(monkeypatch) -> None:
    """The stand-in for pydantic's plugin loader (startup cost, docs/performance.md) reports no
    plugins, and any other name is served by the real module: a pydantic that changes its
    loader loses the speed-up, never the start."""
    import sys

    from derive_env import app

    name = "pydantic.plugin._loader"
    monkeypatch.delitem(sys.modules, name, raising=False)
    app._without_pydantic_plugins()
    stub = sys.modules[name]
    assert stub.get_plugins() == ()
    assert stub.get_plugins("any", extra=1) == ()
    with pytest.raises(AttributeError):
        stub.__path__  # noqa: B018  (the import system probes dunders: no real import)
    assert sys.modules[name] is stub
    real_value = stub._plugins  # not in the stand-in: the real module is imported
    assert sys.modules[name] is not stub
    assert real_value is sys.modules[name]._plugins
    app._without_pydantic_plugins()  # a loaded loader is left alone
    assert sys.modules[name] is not stub


def test_secrets_stand_in_loads_the_real_module_on_first_use(monkeypatch) -> None:
    """``secrets`` (OpenSSL's libcrypto behind it) waits for a use (startup cost,
    docs/performance.md); the first use of a name gets the real module's."""
    import sys

    from derive_env import app

    monkeypatch.delitem(sys.modules, "secrets", raising=False)
    app._without_secrets_until_used()
    stub = sys.modules["secrets"]
    with pytest.raises(AttributeError):
        stub.__path__  # noqa: B018  (the import system probes dunders: no real import)
    assert sys.modules["secrets"] is stub
    assert stub.compare_digest(b"derive", b"derive") is True
    assert stub.compare_digest(b"derive", b"env") is False
    real = sys.modules["secrets"]
    assert real is not stub and real.compare_digest is stub.compare_digest
    app._without_secrets_until_used()  # a loaded module is left alone
    assert sys.modules["secrets"] is real


def test_source_files_are_read_without_blocking_and_only_when_regular(tmp_path) -> None:
    """SLURM_HOSTFILE as the edge reads it: a FIFO never hangs a start (issue 9)."""
    import os

    from derive_env.app import MAX_SOURCE_FILE_BYTES, read_files

    regular = tmp_path / "hosts"
    regular.write_bytes(b"gpu-a100-11\nn\xff\n")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    big = tmp_path / "big"
    big.write_bytes(b"n\n" * (MAX_SOURCE_FILE_BYTES // 2 + 1))
    got = read_files([str(regular), str(fifo), str(tmp_path), str(big), str(tmp_path / "no")])
    assert got == {str(regular): "gpu-a100-11\nn\udcff\n", str(fifo): None, str(tmp_path): None,
                   str(big): None, str(tmp_path / "no"): None}
