"""errors.py: the exception tree, its exit codes, and the standard sentence."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from derive_env import errors
from derive_env.errors import (
    CommandNotExecutable,
    CommandNotFound,
    DeriveEnvError,
    EnvironmentTooLarge,
    LabelError,
    TopologyError,
    UsageError,
    describe,
    shorten,
)

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "operator-guide.md"


@pytest.mark.parametrize(("cls", "code"), [
    (DeriveEnvError, 1), (UsageError, 2), (TopologyError, 3), (LabelError, 4),
    (EnvironmentTooLarge, 5), (CommandNotExecutable, 126), (CommandNotFound, 127),
])
def test_each_error_knows_its_exit_code(cls: type[DeriveEnvError], code: int) -> None:
    error = cls("NAME='x': expected y")
    assert error.exit_code == code
    assert isinstance(error, DeriveEnvError)
    assert str(error) == error.message == "NAME='x': expected y"


def test_exit_codes_of_the_tree_are_the_documented_ones() -> None:
    """Every class's code is in the module's table and in the operator guide's table."""
    documented = {int(code) for code in re.findall(r"^(\d+) ", errors.__doc__, re.M)}
    guide = {int(code) for code in re.findall(r"^\| (\d+) \|", GUIDE.read_text(), re.M)}
    codes = {cls.exit_code for cls in vars(errors).values()
             if isinstance(cls, type) and issubclass(cls, DeriveEnvError)}
    assert codes == {1, 2, 3, 4, 5, 126, 127}
    assert codes <= documented
    assert documented - {0} <= guide


def test_describe_is_the_standard_sentence() -> None:
    assert describe("WORLD_SIZE", "x y", "an integer >= 1") == (
        "WORLD_SIZE='x y': expected an integer >= 1")
    # repr shows control characters instead of printing them
    assert describe("A", "1\n2", "one line") == "A='1\\n2': expected one line"


def test_describe_shortens_name_and_value() -> None:
    message = describe("N" * 500, "v" * 5000, "less")
    value = repr("v" * 200 + "... (5000 characters)")
    assert message == "N" * 120 + f"... (500 characters)={value}: expected less"


def test_shorten() -> None:
    assert shorten("abc", 3) == "abc"
    assert shorten("abcd", 3) == "abc... (4 characters)"
    assert shorten("x" * 200) == "x" * 200


def test_printable_escapes_what_a_terminal_would_obey() -> None:
    """Issue 15, item 7: the one helper every printed raw value goes through."""
    from derive_env.errors import printable

    text = "ok ünï"
    assert printable(text) is text
    assert printable("a\x1b[2J\x07\x7f\x9b\u2028\udc80\tb") == (
        "a\\x1b[2J\\x07\\x7f\\x9b\\u2028\\udc80\\tb")
    assert printable("1. a\n2. \x1b", keep="\n") == "1. a\n2. \\x1b"
    assert printable("\n") == "\\n"


def test_listing_shows_at_most_its_limit() -> None:
    from derive_env.errors import listing

    assert listing(["a", "b"]) == "a, b"
    assert listing([str(n) for n in range(10)], 3) == "0, 1, 2, ... (10 in all)"
