"""cli/envfile.py: ``--env-file`` in its formats, and reading it as the input environment.

The NUL-separated and ``docker inspect`` formats are fuzzed, with their messages, in
tests/properties/test_input_fuzz.py.
"""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from derive_env.cli import read_environment
from derive_env.cli.envfile import parse_env_file
from derive_env.errors import UsageError


def stdin_of(data: bytes) -> io.TextIOWrapper:
    """A stand-in for ``sys.stdin``: derive-env reads stdin's bytes (``.buffer``)."""
    return io.TextIOWrapper(io.BytesIO(data), encoding="utf-8")


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


def test_env_file_json_low_surrogate_is_not_turned_into_a_byte(tmp_path: Path) -> None:
    """Issue 15, item 7: os.fsencode made the JSON escape \\udc80 the byte 0x80."""
    path = tmp_path / "inspect.json"
    path.write_text('[{"Config": {"Env": ["A=x\\udc80"]}}]', encoding="utf-8")
    with pytest.raises(UsageError) as info:
        read_environment(str(path))
    assert str(info.value) == (
        f"--env-file {path}: variable 'A' holds a lone UTF-16 surrogate (a JSON escape such "
        "as \\ud800), which no environment variable can hold"
    )


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
