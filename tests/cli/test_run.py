"""cli/__init__.py: the command line's I/O (labels sources, the bounded readers, the host
facts every start reads, run's error path and output).

Everything here runs in-process; no test reaches ``os.execve`` (the exec is replaced by a
fake that raises, so a mistake can never replace the test runner).
"""

from __future__ import annotations

import errno
import io
import json
import os
import re
import sys
from pathlib import Path

import pytest

from derive_env import cli, launch
from derive_env.cli import load_labels, read_environment, run, run_command
from derive_env.cli.envfile import parse_env_file
from derive_env.errors import LabelError, UsageError
from derive_env.ports import parse_port_range
from helpers import Execed, value_error

PREFIX = "ai.backend.distributed."
FW = PREFIX + "frameworks"
LABELS_VAR = "DERIVE_ENV_LABELS_FILE"




@pytest.fixture
def no_default_labels(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Point the default labels path at a file that does not exist (whatever the machine has)."""
    missing = tmp_path / "etc-derive-env" / "labels.json"
    monkeypatch.setattr(cli, "DEFAULT_LABELS_FILE", str(missing))
    return missing


def stdin_of(data: bytes) -> io.TextIOWrapper:
    """A stand-in for ``sys.stdin``: derive-env reads stdin's bytes (``.buffer``)."""
    return io.TextIOWrapper(io.BytesIO(data), encoding="utf-8")


def write_json(path: Path, document: object) -> str:
    path.write_text(json.dumps(document), encoding="utf-8")
    return str(path)


# --------------------------------------------------------------------------- read_environment


def test_read_environment_without_file_is_a_copy_of_the_process_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DERIVE_ENV_TEST_MARKER", "here")
    environ = read_environment(None)
    assert environ == dict(os.environ)
    environ["DERIVE_ENV_TEST_MARKER"] = "changed"
    assert os.environ["DERIVE_ENV_TEST_MARKER"] == "here"


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
    monkeypatch.setattr(cli, "DEFAULT_LABELS_FILE", path)
    assert load_labels({}) == {FW: "pytorch"}


def test_labels_variable_wins_over_default_path(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(
        cli, "DEFAULT_LABELS_FILE", write_json(tmp_path / "default.json", {FW: "tensorflow"})
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


@pytest.mark.parametrize("options", [{}, {"frameworks": "pytorch"}, {"fmt": "json"}])
def test_run_without_command_nor_dry_run_is_a_usage_error(
    clean_environ: Path, fake_exec: None, capsys: pytest.CaptureFixture[str], options: dict
) -> None:
    """The Python API as the ENTRYPOINT path: an empty command never reaches the exec."""
    assert run([], **options) == 2
    assert capsys.readouterr() == ("", (
        "derive-env: error: no command given. Usage: derive-env [OPTIONS] -- COMMAND [ARG]... "
        "or derive-env --dry-run (see derive-env --help)\n"))


def test_run_explain_without_command_is_a_dry_run(
    clean_environ: Path, fake_exec: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """--explain is a dry run with a command or without: no note, no exec, the explanation."""
    assert run([], explain=True, frameworks="pytorch") == 0
    assert run([], dry_run=True, explain=True, frameworks="pytorch") == 0
    out, err = capsys.readouterr()
    out = re.sub(r"RUN_ID = [0-9a-f]{16}\n", "RUN_ID = <random>\n", out)  # each start's own
    first, second = out[:len(out) // 2], out[len(out) // 2:]
    assert (first, err) == (second, "")
    assert first.startswith("source: standalone, single container\nframeworks: pytorch (")


def test_run_takes_a_single_str_as_one_labels_file_and_one_label(
    no_default_labels: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_json(tmp_path / "lab.json", {FW: "pytorch", PREFIX + "master-port": "29511"})
    env = tmp_path / "step.env"
    env.write_text("MASTER_ADDR=10.0.0.1\nWORLD_SIZE=1\nRANK=0\n", encoding="utf-8")
    capsys.readouterr()
    assert run([], dry_run=True, fmt="json", env_file=str(env), labels_files=path,
               label_items=PREFIX + "jax-port=1299") == 0
    assert run([], dry_run=True, fmt="json", env_file=str(env), labels_files=(path,),
               label_items=(PREFIX + "jax-port=1299",)) == 0
    out, err = capsys.readouterr()
    first, second = out[:len(out) // 2], out[len(out) // 2:]
    assert (first, err) == (second, "")
    assert json.loads(first)["MASTER_PORT"] == "29511"


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
    assert cli.MAX_INPUT_BYTES == 1048576


@pytest.mark.parametrize("source", ["labels-file", "labels-variable", "env-file"])
def test_input_file_over_one_mib_is_an_error(
    no_default_labels: Path, tmp_path: Path, source: str
) -> None:
    path = tmp_path / "big"
    # Valid content but one byte too many: the size alone is refused.
    if source == "env-file":
        path.write_bytes(b"A=1\n" + b"#" * (cli.MAX_INPUT_BYTES - 3))
    else:
        path.write_bytes(b"{}" + b" " * (cli.MAX_INPUT_BYTES - 1))
    assert path.stat().st_size == cli.MAX_INPUT_BYTES + 1
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
    labels.write_bytes(json.dumps({FW: "pytorch"}).encode().ljust(cli.MAX_INPUT_BYTES))
    assert labels.stat().st_size == cli.MAX_INPUT_BYTES
    assert load_labels({}, [str(labels)]) == {FW: "pytorch"}
    env_file = tmp_path / "x.env"
    env_file.write_bytes(b"A=1\n" + b"#" * (cli.MAX_INPUT_BYTES - 4))
    assert env_file.stat().st_size == cli.MAX_INPUT_BYTES
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


def test_labels_file_path_with_a_lone_surrogate_is_an_error(no_default_labels: Path) -> None:
    with pytest.raises(LabelError) as info:
        load_labels({"DERIVE_ENV_LABELS_FILE": "/tmp/\ud800"})
    assert str(info.value) == (
        "labels file ($DERIVE_ENV_LABELS_FILE) '/tmp/\\ud800': not a valid file path"
    )


def test_stdin_over_one_mib_is_an_error(
    monkeypatch: pytest.MonkeyPatch, no_default_labels: Path
) -> None:
    monkeypatch.setattr(sys, "stdin", stdin_of(b"{}" + b" " * cli.MAX_INPUT_BYTES))
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


# ------------------------------------------------------------------------ the default labels file


def test_default_labels_path_that_is_a_directory_is_an_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Only a missing default file (ENOENT) means "no labels"; anything else is reported.
    monkeypatch.setattr(cli, "DEFAULT_LABELS_FILE", str(tmp_path))
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
    monkeypatch.setattr(cli, "DEFAULT_LABELS_FILE", str(path))
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

    monkeypatch.setattr(cli, "DEFAULT_LABELS_FILE", path)
    monkeypatch.setattr(cli.os, "open", fake_open)
    with pytest.raises(LabelError) as info:
        load_labels({})
    assert str(info.value) == f"labels file {path!r}: cannot be read (Permission denied)"


def test_default_labels_path_empty_file_is_an_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = tmp_path / "labels.json"
    path.write_text("", encoding="utf-8")
    monkeypatch.setattr(cli, "DEFAULT_LABELS_FILE", str(path))
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
    monkeypatch.setattr(cli, "gather_facts", lambda full=True, environ=None: facts)


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


# ----------------------------------------------- peers not ready yet (issue 16 item 8, pitfall 4)

POD_NOT_READY = (
    "label ai.backend.distributed.socket-ifname=auto: llama-0.llama.default, "
    "llama-0-1.llama.default did not resolve within 0.3 s: on Kubernetes a pod's name resolves "
    "only once the pod is ready, so the subnet rule was not checked; not an error, the peers "
    "may still be starting (derive-env check, as an init container of every pod, waits for "
    "every name within its bound)"
)
POD_NO_ROUTE = (
    "label ai.backend.distributed.socket-ifname=auto: no interface routes to the master "
    "'llama-0.llama.default' (resolved: not resolvable); GLOO_SOCKET_IFNAME and "
    "NCCL_SOCKET_IFNAME not set"
)


@pytest.fixture
def pod_before_its_peers(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[str]:
    """Worker 2 of a LeaderWorkerSet group of 3 whose peers are not ready: the edge's own
    resolver (cli/hostfacts.py) with ``socket.getaddrinfo`` stubbed (this pod's name resolves,
    no peer's ever does) and the one deadline cut to 0.3 s. :returns: the names looked up."""
    import socket

    from derive_env.frameworks import context, network

    for key in list(os.environ):
        if key.startswith(("BACKENDAI_", "DERIVE_ENV_", "PET_", "TF_", "JAX_", "GLOO_", "NCCL_",
                           "LWS_", "KUBERNETES_")) or key in {
                "MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "RANK", "WORLD_SIZE", "GROUP_RANK",
                "GPU_COUNT", "N_GPUS", "HOSTNAME", "TORCHELASTIC_RUN_ID"}:
            monkeypatch.delenv(key)
    for key, value in {"LWS_LEADER_ADDRESS": "llama-0.llama.default", "LWS_GROUP_SIZE": "3",
                       "LWS_WORKER_INDEX": "2", "HOSTNAME": "llama-0-2",
                       "KUBERNETES_SERVICE_HOST": "10.96.0.1"}.items():
        monkeypatch.setenv(key, value)
    labels = write_json(tmp_path / "labels.json", {FW: "pytorch", PREFIX + "socket-ifname": "auto"})
    monkeypatch.setenv(LABELS_VAR, labels)
    asked: list[str] = []

    def lookup(host, port, type=0):
        asked.append(host)
        if host == "llama-0-2":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.244.1.7", 0))]
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", lookup)
    monkeypatch.setattr(socket, "gethostname", lambda: "llama-0-2")
    monkeypatch.setattr(context, "RESOLVE_SECONDS", 0.3)   # the deadline (5 s at a start)
    monkeypatch.setattr(network, "RESOLVE_SECONDS", 0.3)   # and its message
    return asked


def test_peers_not_ready_warn_on_the_exec_path(
    pod_before_its_peers: list[str], capsys: pytest.CaptureFixture[str], fake_exec: None
) -> None:
    import time

    start = time.monotonic()
    with pytest.raises(Execed) as info:
        run(["cmd"])
    assert time.monotonic() - start < 2.0   # the one deadline, then the exec: never a hang
    assert info.value.argv == ["cmd"]
    assert info.value.env["NODE_RANK"] == "2"
    assert capsys.readouterr() == ("", f"derive-env: warning: {POD_NOT_READY}\n"
                                       f"derive-env: warning: {POD_NO_ROUTE}\n")
    assert {"llama-0.llama.default", "llama-0-1.llama.default", "llama-0-2"} <= set(
        pod_before_its_peers)


def test_peers_not_ready_warn_on_the_hook_path(
    pod_before_its_peers: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert run([], dry_run=True, fmt="shell") == 0
    out, err = capsys.readouterr()
    assert "export NODE_RANK='2'" in out.splitlines()
    assert err == (f"derive-env: warning: {POD_NOT_READY}\n"
                   f"derive-env: warning: {POD_NO_ROUTE}\n")


def test_the_docs_show_the_not_ready_warning_as_it_is() -> None:
    docs = Path(__file__).resolve().parents[2] / "docs"
    line = f"derive-env: warning: {POD_NOT_READY.replace('0.3 s', '5 s')}"
    assert line in (docs / "sources" / "kubernetes.md").read_text(encoding="utf-8").splitlines()
    # The errors index of the operator guide has a row starting as the warning's text.
    rows = re.findall(r"^\| `(label ai\.backend\.distributed\.socket-ifname=auto: [^`]*)` \|",
                      (docs / "operator-guide.md").read_text(encoding="utf-8"), re.M)
    text = line.removeprefix("derive-env: warning: ")
    assert any(re.match("".join(".*?" if p == "…" else re.escape(p)
                                for p in re.split("(…)", row)), text) for row in rows), text


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


# ----------------------------------------------------------- the host facts every start reads


def test_gather_facts_without_the_label_only_looks_for_baimulti0(monkeypatch) -> None:
    looked = []
    monkeypatch.setattr(os.path, "exists", lambda path: looked.append(path) or True)

    def no_listdir(path):
        raise AssertionError("listdir called")

    monkeypatch.setattr(os, "listdir", no_listdir)
    facts = cli.gather_facts(full=False)
    assert (facts.interfaces, looked) == (("baimulti0",), ["/sys/class/net/baimulti0"])
    assert (facts.routes_v4, facts.hosts, facts.hostname) == ("", "", "")
    monkeypatch.setattr(os.path, "exists", lambda path: False)
    assert cli.gather_facts(full=False).interfaces == ()


def test_the_port_range_is_read_only_when_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kernel's ephemeral range, read with or without label socket-ifname, but only when
    the facts' reader is called (a hashed port: ports.overlap_warning); unreadable: ``None``.
    ip_local_reserved_ports is no longer read: no sysctl moves a port (contract section 10)."""
    port_range = tmp_path / "ip_local_port_range"
    monkeypatch.setattr(cli, "PORT_RANGE_FILE", str(port_range))
    assert not hasattr(cli, "RESERVED_PORTS_FILE")
    port_range.write_text("40000\t50000\n")
    for full in (False, True):
        facts = cli.gather_facts(full)
        assert parse_port_range(facts.port_range()) == (40000, 50000)
    port_range.write_bytes(b"\xff\n")
    assert (
        value_error(parse_port_range, cli.gather_facts(full=False).port_range())
        == "two port numbers 'low high', not '\ufffd'"
    )
    port_range.unlink()
    assert cli.gather_facts(full=False).port_range() is None
    opened: list[str] = []
    real_open = open
    monkeypatch.setattr("builtins.open", lambda path, *a, **k: (
        opened.append(str(path)), real_open(path, *a, **k))[1])
    cli.gather_facts(full=False)
    assert str(port_range) not in opened


def test_this_machines_port_range_is_read() -> None:
    facts = cli.gather_facts(full=False)
    path = Path(cli.PORT_RANGE_FILE)
    if path.exists():
        fields = path.read_text().split()
        assert parse_port_range(facts.port_range()) == (int(fields[0]), int(fields[1]))


def test_source_files_are_read_without_blocking_and_only_when_regular(tmp_path) -> None:
    """SLURM_HOSTFILE as the edge reads it: a FIFO never hangs a start (issue 9)."""
    import os

    from derive_env.cli import MAX_SOURCE_FILE_BYTES, read_files

    regular = tmp_path / "hosts"
    regular.write_bytes(b"gpu-a100-11\nn\xff\n")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    big = tmp_path / "big"
    big.write_bytes(b"n\n" * (MAX_SOURCE_FILE_BYTES // 2 + 1))
    got = read_files([str(regular), str(fifo), str(tmp_path), str(big), str(tmp_path / "no")])
    assert got == {str(regular): "gpu-a100-11\nn\udcff\n", str(fifo): None, str(tmp_path): None,
                   str(big): None, str(tmp_path / "no"): None}


# ------------------------------------------- --explain: a dry run, every node, errors (issue 14)


@pytest.fixture
def in_session(clean_environ: Path, monkeypatch: pytest.MonkeyPatch, backendai_env):
    """Put this process in container ``host`` of a session main1, sub1, sub2 (PyTorch)."""
    clean_environ.write_text(json.dumps({FW: "pytorch"}), encoding="utf-8")
    monkeypatch.delenv("ON_EVERY_NODE", raising=False)
    monkeypatch.delenv("_BACKEND_BATCH_MODE", raising=False)

    def enter(host: str, **extra: str) -> None:
        for key, value in {**backendai_env(["main1", "sub1", "sub2"], host), **extra}.items():
            monkeypatch.setenv(key, value)

    return enter


def test_explain_with_a_command_explains_and_does_not_run_it(
    in_session, fake_exec: None, capsys: pytest.CaptureFixture[str]
) -> None:
    in_session("sub1")
    assert run(["torchrun", "train.py"], dry_run=True, explain=True) == 0
    out, err = capsys.readouterr()
    assert err == "derive-env: note: --explain is a dry run: the command was not run\n"
    assert "\nNODE_RANK         = 1\n" in out


def test_explain_all_nodes_adds_the_table(
    in_session, capsys: pytest.CaptureFixture[str]
) -> None:
    in_session("sub2")
    assert run([], dry_run=True, explain=True, all_nodes=True) == 0
    out, err = capsys.readouterr()
    assert err == ""
    explained, _, table = out.partition("\nall nodes, each derived here")
    assert explained.startswith("source: backendai session sess-0123, 3 nodes")
    assert table.splitlines()[8:12] == [
        "  node rank  host   NODE_RANK/PET_NODE_RANK",
        "  0          main1  0                        (master)",
        "  1          sub1   1",
        "  2          sub2   2                        (this node)",
    ]


def test_an_error_keeps_the_picture_and_its_exit_code(
    in_session, capsys: pytest.CaptureFixture[str]
) -> None:
    in_session("sub1", NODE_RANK="0")
    assert run([], dry_run=True, explain=True) == 3
    out, err = capsys.readouterr()
    assert "  1          sub1   1!         1              (this node)\n" in out
    assert ("  ! NODE_RANK is set to 0 in the environment (a job-wide value: the same on "
            "every node), but is derived as 1 on sub1 (node rank 1), 2 on sub2 (node "
            "rank 2)\n") in out
    assert err.startswith("derive-env: error: NODE_RANK='0': expected '1', this node's node rank")
    # without --explain: the error alone, as before
    assert run([], dry_run=True) == 3
    assert capsys.readouterr().out == ""


def test_an_error_without_a_topology_prints_only_the_error(
    in_session, capsys: pytest.CaptureFixture[str]
) -> None:
    in_session("sub1", BACKENDAI_CLUSTER_SIZE="4")
    assert run([], dry_run=True, explain=True) == 3
    out, err = capsys.readouterr()
    assert out == ""
    assert err == ("derive-env: error: BACKENDAI_CLUSTER_REPLICAS='main:1,sub:2': expected "
                   "counts adding up to BACKENDAI_CLUSTER_SIZE=4; they add up to 3\n")


MAIN1_HINT = (
    "derive-env: warning: only this container (main1 of 3) runs torchrun train.py: Backend.AI "
    "starts the batch command in main1 alone, so the other containers never join the job. "
    "Start it on every node: on-every-node torchrun train.py (docs/backendai.md, \"Only main1 "
    "started the job\")\n")


def test_the_main1_hint(in_session, fake_exec: None,
                        capsys: pytest.CaptureFixture[str]) -> None:
    in_session("main1", _BACKEND_BATCH_MODE="1")  # the batch command, from the kernel runner
    with pytest.raises(Execed) as info:
        run(["torchrun", "train.py"])
    assert info.value.env["NODE_RANK"] == "0"  # a warning: the command still runs
    assert capsys.readouterr() == ("", MAIN1_HINT)


@pytest.mark.parametrize(("host", "extra", "command"), [
    ("sub1", {}, ["torchrun", "train.py"]),  # a sub container: started by someone else
    ("main1", {"ON_EVERY_NODE": "1"}, ["torchrun", "train.py"]),  # on-every-node started it
    ("main1", {}, ["on-every-node", "torchrun", "train.py"]),
    ("main1", {}, ["/usr/bin/mpirun", "-np", "6", "python", "train.py"]),
    ("main1", {}, ["sh", "-c", "cd /home/work/x && deepspeed --hostfile h train.py"]),
    ("main1", {"BACKENDAI_CLUSTER_SIZE": "1", "BACKENDAI_CLUSTER_HOSTS": "main1",
               "BACKENDAI_CLUSTER_REPLICAS": "main:1"}, ["python", "train.py"]),
    # Docker/Compose: the ENTRYPOINT runs the command in every container, no kernel runner
    ("main1", {"_BACKEND_BATCH_MODE": None}, ["torchrun", "train.py"]),
], ids=["sub1", "ON_EVERY_NODE", "on-every-node", "mpirun", "sh -c deepspeed", "one container",
        "compose"])
def test_no_main1_hint(in_session, fake_exec: None, capsys: pytest.CaptureFixture[str],
                       host: str, extra: dict[str, str | None], command: list[str]) -> None:
    if "_BACKEND_BATCH_MODE" in extra:  # None: not set at all
        extra = {k: v for k, v in extra.items() if v is not None}
    else:
        extra = {**extra, "_BACKEND_BATCH_MODE": "1"}  # the runner's batch command
    in_session(host, **extra)
    with pytest.raises(Execed):
        run(command)
    assert capsys.readouterr() == ("", "")


def test_no_main1_hint_on_the_hooks_dry_run(in_session,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    in_session("main1")
    assert run([], dry_run=True, fmt="shell") == 0
    assert capsys.readouterr().err == ""


# ------------------------------------------------ labels for one session (contract section 9)


def test_session_variables_rank_between_the_files_and_label_options(
        tmp_path: Path, no_default_labels: Path) -> None:
    """--label > DERIVE_ENV_<NAME> > labels files > default; the variables a label came from
    are kept for --explain."""
    baked = write_json(tmp_path / "baked.json", {FW: "pytorch", PREFIX + "master-port": "1000",
                                                 PREFIX + "tensorflow-port": "1001"})
    option_file = write_json(tmp_path / "option.json", {PREFIX + "nproc-per-node": "2"})
    environ = {LABELS_VAR: baked, "DERIVE_ENV_MASTER_PORT": "2000",
               "DERIVE_ENV_TENSORFLOW_PORT": "2001", "DERIVE_ENV_NPROC_PER_NODE": "4",
               "DERIVE_ENV_TENSORFLOW_ROLES": "main:chief,*:worker", "DERIVE_ENV_SOURCE": "auto"}
    labels = load_labels(environ, [option_file], [PREFIX + "tensorflow-port=3001"])
    assert labels == {FW: "pytorch", PREFIX + "master-port": "2000",
                      PREFIX + "tensorflow-port": "3001", PREFIX + "nproc-per-node": "4",
                      PREFIX + "tensorflow-roles": "main:chief,*:worker"}
    assert labels.variables == {
        PREFIX + "master-port": "DERIVE_ENV_MASTER_PORT",
        PREFIX + "nproc-per-node": "DERIVE_ENV_NPROC_PER_NODE",
        PREFIX + "tensorflow-roles": "DERIVE_ENV_TENSORFLOW_ROLES"}


def test_only_derive_env_frameworks_opts_in(no_default_labels: Path, capsys) -> None:
    """A session's DERIVE_ENV_MASTER_PORT reaches images that did not opt in: not an opt-in,
    not a stray label; DERIVE_ENV_FRAMEWORKS is the opt-in."""
    environ = {"DERIVE_ENV_MASTER_PORT": "4000", "DERIVE_ENV_TENSORFLOW_ROLES": "main:chief"}
    labels = load_labels(environ)
    assert not cli.is_opted_in(labels)
    cli._check_not_opted_in(labels)  # no error
    opted = load_labels({**environ, "DERIVE_ENV_FRAMEWORKS": "pytorch"})
    assert cli.is_opted_in(opted)
    assert opted.variables[FW] == "DERIVE_ENV_FRAMEWORKS"


@pytest.mark.parametrize(("name", "meant", "label"), [
    ("DERIVE_ENV_TENSORFLOW_ROLE", "DERIVE_ENV_TENSORFLOW_ROLES", "tensorflow-roles"),
    ("DERIVE_ENV_FRAMEWORK", "DERIVE_ENV_FRAMEWORKS", "frameworks"),
    ("derive_env_master_port", "DERIVE_ENV_MASTER_PORT", "master-port"),
    ("DERIVE_ENV_MASTERPORT", "DERIVE_ENV_MASTER_PORT", "master-port"),
    ("DERIVE_ENV_ON_ERRORS", "DERIVE_ENV_ON_ERROR", "on-error"),
])
def test_a_near_miss_of_a_session_variable_names_the_intended_one(
        no_default_labels: Path, name: str, meant: str, label: str) -> None:
    with pytest.raises(LabelError) as info:
        load_labels({name: "x"})
    assert info.value.exit_code == 4
    assert str(info.value) == (
        f"variable {name}='x': expected the name {meant} (label {PREFIX}{label} for this "
        "job); derive-env reads only DERIVE_ENV_<LABEL NAME> exactly (upper case, - as "
        "_), so this one would be ignored. Rename it")


@pytest.mark.parametrize(("name", "meant"), [
    ("DERIVE_ENV_SOURCES", "DERIVE_ENV_SOURCE"),
    ("derive_env_source", "DERIVE_ENV_SOURCE"),
    ("DERIVE_ENV_NODES", "DERIVE_ENV_NNODES"),
    ("DERIVE_ENV_LABEL_FILE", "DERIVE_ENV_LABELS_FILE"),
])
def test_a_near_miss_of_derive_envs_own_variable_names_it(
        no_default_labels: Path, name: str, meant: str) -> None:
    """A misspelt DERIVE_ENV_SOURCE would be ignored (the job would run auto-detected): it is
    an error naming the intended variable, as for a label's variable."""
    with pytest.raises(LabelError) as info:
        load_labels({name: "none"})
    assert info.value.exit_code == 4
    assert str(info.value) == (
        f"variable {name}='none': expected the name {meant} (one of derive-env's own "
        "variables); derive-env reads it only exactly (upper case), so this one would be "
        "ignored. Rename it")


def test_a_bad_value_from_a_session_variable_names_the_variable(no_default_labels: Path) -> None:
    """The user set DERIVE_ENV_MASTER_PORT, not the label: the message names both."""
    from derive_env.policy import ImagePolicy

    labels = load_labels({"DERIVE_ENV_FRAMEWORKS": "pytorch", "DERIVE_ENV_MASTER_PORT": "abc"})
    with pytest.raises(LabelError) as info:
        ImagePolicy.from_labels(labels)
    assert str(info.value) == ("DERIVE_ENV_MASTER_PORT (label ai.backend.distributed.master-port)"
                               "='abc': expected a port number 1-65535")
    by_label = load_labels({"DERIVE_ENV_FRAMEWORKS": "pytorch"},
                           label_items=[PREFIX + "master-port=abc"])
    with pytest.raises(LabelError) as info:
        ImagePolicy.from_labels(by_label)
    assert str(info.value) == ("label ai.backend.distributed.master-port='abc': expected a "
                               "port number 1-65535")


@pytest.mark.parametrize("name", ["DERIVE_ENV_LABELS_FILE", "DERIVE_ENV_SOURCE",
                                  "DERIVE_ENV_TEST_MARKER", "DERIVE_ENV_NNODES"])
def test_derive_envs_own_variables_are_not_labels_nor_near_misses(
        no_default_labels: Path, name: str, tmp_path: Path) -> None:
    value = write_json(tmp_path / "l.json", {}) if name == LABELS_VAR else "auto"
    labels = load_labels({name: value})
    assert (labels, labels.variables) == ({}, {})


def test_an_empty_session_variable_is_unset(no_default_labels: Path) -> None:
    assert load_labels({"DERIVE_ENV_FRAMEWORKS": "", "DERIVE_ENV_TENSORFLOW_ROLE": ""}) == {}


@pytest.mark.parametrize(("value", "status", "out"), [
    ("", 0, "{}\n"),  # a template's blank: unset, not opted in (docs/behaviour.md section 9)
    (" ", 4, ""),     # blanks are a value: not a comma list of frameworks
])
def test_an_empty_frameworks_variable_is_unset_and_blanks_are_an_error(
        no_default_labels: Path, capsys, monkeypatch: pytest.MonkeyPatch,
        value: str, status: int, out: str) -> None:
    monkeypatch.setattr(os, "environ", {"PATH": "/usr/bin", "DERIVE_ENV_FRAMEWORKS": value})
    assert run([], dry_run=True, fmt="json") == status
    captured = capsys.readouterr()
    assert captured.out == out
    assert ("DERIVE_ENV_FRAMEWORKS (label ai.backend.distributed.frameworks)=' '" in
            captured.err) == bool(status)


def test_explain_names_the_session_variable(no_default_labels: Path, capsys,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "environ", {"PATH": "/usr/bin", "DERIVE_ENV_FRAMEWORKS": "pytorch",
                                        "DERIVE_ENV_MASTER_PORT": "4000"})
    assert run([], dry_run=True, explain=True) == 0
    out = capsys.readouterr().out
    assert ("frameworks: pytorch (mode torchrun)\n"
            "label ai.backend.distributed.frameworks from variable DERIVE_ENV_FRAMEWORKS\n"
            "label ai.backend.distributed.master-port from variable DERIVE_ENV_MASTER_PORT\n"
            ) in out
    assert ("MASTER_PORT       = 4000\n"
            "                    source: variable DERIVE_ENV_MASTER_PORT\n") in out


def test_frameworks_option_is_the_frameworks_label(no_default_labels: Path, capsys,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """--frameworks LIST opts in a job started without the labels file (contract 11), and
    wins over DERIVE_ENV_FRAMEWORKS."""
    monkeypatch.setattr(os, "environ", {"PATH": "/usr/bin", "DERIVE_ENV_FRAMEWORKS": "pytorch"})
    assert run([], dry_run=True, fmt="json", frameworks="jax") == 0
    document = json.loads(capsys.readouterr().out)
    run_id = document.pop("DERIVE_ENV_RUN_ID")  # a fresh one: no manager here
    assert len(run_id) == 16 and set(run_id) <= set("0123456789abcdef")
    assert document == {"JAX_COORDINATOR_ADDRESS": "127.0.0.1:1234", "JAX_NUM_PROCESSES": "1",
                        "JAX_PROCESS_ID": "0"}


def test_the_not_opted_in_note_on_both_paths(no_default_labels: Path, capsys, fake_exec,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Contract section 11: inside a SkyPilot task of 2 nodes, an image that did not opt in
    says that nothing was derived, on the hook's path and on the ENTRYPOINT path."""
    from helpers import not_opted_in_note

    job = ("a SkyPilot task states a job of more than one node (SKYPILOT_NUM_NODES='2')")
    monkeypatch.setattr(os, "environ", {"PATH": "/usr/bin", "SKYPILOT_NUM_NODES": "2",
                                        "SKYPILOT_NODE_RANK": "1"})
    assert run([], dry_run=True, fmt="shell") == 0
    assert capsys.readouterr() == ("", not_opted_in_note(job, image=False))
    with pytest.raises(Execed):
        run_command(["true"])
    assert capsys.readouterr().err == not_opted_in_note(job, image=False)
    # A job of one: nothing said.
    monkeypatch.setattr(os, "environ", {"PATH": "/usr/bin", "SKYPILOT_NUM_NODES": "1"})
    assert run([], dry_run=True, fmt="shell") == 0
    assert capsys.readouterr() == ("", "")


#: A Kubeflow PyTorchJob's worker pod of 3 pods x 2 processes, as the training operator sets
#: it (training-operator pkg/controller.v1/pytorch/envvar.go setPodEnv).
PYTORCHJOB_WORKER = {"PATH": "/usr/bin", "MASTER_ADDR": "bert-1-master-0", "MASTER_PORT": "23456",
                     "RANK": "2", "WORLD_SIZE": "6", "PET_NODE_RANK": "2", "PET_NNODES": "3",
                     "PET_NPROC_PER_NODE": "2", "PET_MASTER_ADDR": "bert-1-master-0",
                     "PET_MASTER_PORT": "23456"}


@pytest.mark.parametrize("environ", [
    PYTORCHJOB_WORKER,
    # TrainJob v2 (kubeflow/trainer plugins/torch/torch.go): no RANK.
    {"PATH": "/usr/bin", "PET_NNODES": "2", "PET_NODE_RANK": "1", "PET_NPROC_PER_NODE": "1",
     "PET_MASTER_ADDR": "llm-node-0-0.llm", "PET_MASTER_PORT": "29500"},
    # a TFJob's TF_CONFIG of 2 workers, which TensorFlow reads itself
    {"PATH": "/usr/bin", "TF_CONFIG": json.dumps({
        "cluster": {"worker": ["tf-worker-0:2222", "tf-worker-1:2222"]},
        "task": {"type": "worker", "index": 1}})},
    # torchrun's workers: torch reads them
    {"PATH": "/usr/bin", "TORCHELASTIC_RUN_ID": "r", "RANK": "1", "LOCAL_RANK": "1",
     "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "0", "GROUP_WORLD_SIZE": "1",
     "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"},
], ids=["pytorchjob", "trainjob", "tfjob", "torchrun"])
def test_no_note_where_the_managers_variables_configure_the_launcher(
        no_default_labels: Path, capsys, fake_exec, monkeypatch: pytest.MonkeyPatch,
        environ: dict[str, str]) -> None:
    """Issue 25: an image that did not opt in under a Kubeflow PyTorchJob (TrainJob, TFJob,
    torchrun) is not alone: torchrun, torch and TensorFlow read the operator's variables. No
    "every node runs the command as a job of its own", on either path; the environment is
    passed on unchanged."""
    monkeypatch.setattr(os, "environ", dict(environ))
    assert run([], dry_run=True, fmt="shell") == 0
    assert capsys.readouterr() == ("", "")
    with pytest.raises(Execed):
        run_command(["true"])
    assert capsys.readouterr().err == ""


def test_the_note_still_comes_where_no_launcher_is_configured(
        no_default_labels: Path, capsys, fake_exec, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Volcano Job's pod sets no variable torch reads: the note stays (issue 25)."""
    from helpers import not_opted_in_note

    monkeypatch.setattr(os, "environ", {"PATH": "/usr/bin", "VC_TASK_INDEX": "1",
                                        "VC_WORKER_NUM": "2",
                                        "VC_WORKER_HOSTS": "vj-worker-0.vj,vj-worker-1.vj"})
    with pytest.raises(Execed):
        run_command(["true"])
    assert capsys.readouterr().err == not_opted_in_note(
        "a Volcano Job states a job of more than one pod (VC_WORKER_NUM='2')", image=False)


def test_messages_on_stderr_are_escaped(capsys) -> None:
    """Issue 15, item 7: every message goes through errors.printable (newlines of a list
    kept), so an escape code in a raw value cannot reach the terminal."""
    from derive_env.cli import say

    say("warning", "2 problems:\n  1. a \x1b]0;title\x07\n  2. b")
    assert capsys.readouterr().err == (
        "derive-env: warning: 2 problems:\n  1. a \\x1b]0;title\\x07\n  2. b\n")


def test_an_env_file_reads_no_file_of_this_machine(tmp_path: Path) -> None:
    """Another container's --env-file: its manager's files (a node file on a shared file
    system) are read, this machine's routes and /etc/hosts are not (they describe it, not
    that container: an AWS Batch main node would get this machine's address)."""
    shared = tmp_path / "nodefile"
    shared.write_text("n1\nn2\n")
    got = cli._job_files(["/proc/net/route", "/etc/hosts", str(shared), "/proc/net/fib_trie"])
    assert got == {"/proc/net/route": None, "/etc/hosts": None, str(shared): "n1\nn2\n",
                   "/proc/net/fib_trie": None}
    assert cli.read_files(["/proc/net/route"])["/proc/net/route"] is not None


def test_an_aws_batch_main_node_from_an_env_file_needs_its_address(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], no_default_labels: Path) -> None:
    env = tmp_path / "main.env"
    env.write_text("AWS_BATCH_JOB_ID=abc#0\nAWS_BATCH_JOB_NUM_NODES=2\n"
                   "AWS_BATCH_JOB_NODE_INDEX=0\nAWS_BATCH_JOB_MAIN_NODE_INDEX=0\n")
    assert run([], dry_run=True, env_file=str(env), frameworks="pytorch") == 3
    assert "/proc/net/route and /proc/net/fib_trie cannot be read here" in capsys.readouterr().err
