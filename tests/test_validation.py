"""validation.py: the value parsers every source and label reader shares."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from derive_env.errors import TopologyError
from derive_env.validation import (
    count_of,
    errors_of,
    first_error,
    parse_int,
    parse_port,
    static_count,
    variable_int,
)


def test_parse_int_digit_limit() -> None:
    assert parse_int("9" * 18, minimum=1) == 10**18 - 1
    assert parse_int("0" * 18, minimum=0) == 0
    with pytest.raises(ValueError) as info:
        parse_int("0" * 19, minimum=0)
    assert str(info.value) == "an integer >= 0 of at most 18 digits"
    with pytest.raises(ValueError) as info:
        parse_int("1" * 19, minimum=1, what="a count")
    assert str(info.value) == "a count of at most 18 digits"
    with pytest.raises(ValueError) as info:  # not digits: the plain expectation
        parse_int("x" * 19, minimum=1)
    assert str(info.value) == "an integer >= 1"


@pytest.mark.parametrize("value", ["-1", "+1", " 1", "1_000", "1.0", "", "\u0661", True, 1.0])
def test_parse_int_takes_plain_digits_only(value: object) -> None:
    with pytest.raises(ValueError) as info:
        parse_int(value, minimum=0)
    assert str(info.value) == "an integer >= 0"


def test_parse_int_minimum_and_int_input() -> None:
    assert parse_int(3, minimum=1) == 3
    assert parse_int("007", minimum=1) == 7
    with pytest.raises(ValueError) as info:
        parse_int("0", minimum=1)
    assert str(info.value) == "an integer >= 1"


@pytest.mark.parametrize(("value", "port"), [("1", 1), ("65535", 65535), (29500, 29500)])
def test_parse_port(value: object, port: int) -> None:
    assert parse_port(value) == port


@pytest.mark.parametrize("value", ["0", "65536", "http", "-1"])
def test_parse_port_refuses(value: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_port(value)
    assert str(info.value) == "a port number 1-65535"


@pytest.mark.parametrize(("text", "count"), [
    ("4", 4), (" 4 ", 4), ("0", 0), ("9" * 18, 10**18 - 1),
    ("9" * 19, None), ("-1", None), ("four", None), ("\u0664", None), ("", None)])
def test_count_of(text: str, count: int | None) -> None:
    assert count_of(text) == count


@pytest.mark.parametrize(("text", "count"), [
    ("2", 2), ("2:2", 2), (" 3 : 3 ", 3), ("1:4", None), ("2:", None), (":2", None), ("x", None)])
def test_static_count(text: str, count: int | None) -> None:
    assert static_count(text) == count


def test_variable_int_names_variable_and_value() -> None:
    assert variable_int({"SLURM_NODEID": "3"}, "SLURM_NODEID", 0) == 3
    with pytest.raises(TopologyError) as info:
        variable_int({"WORLD_SIZE": "0"}, "WORLD_SIZE", 1, " (the world size)")
    assert str(info.value) == "WORLD_SIZE='0': expected an integer >= 1 (the world size)"
    assert info.value.exit_code == 3
    with pytest.raises(KeyError):
        variable_int({}, "WORLD_SIZE", 1)


class _Model(BaseModel):
    model_config = ConfigDict(populate_by_name=False)

    size: int = Field(alias="SIZE")
    port: int = Field(alias="PORT")

    @field_validator("size", "port", mode="before")
    @classmethod
    def _parse(cls, value: object) -> int:
        return parse_int(value, minimum=1)


def test_errors_of_words_every_error_with_the_alias() -> None:
    with pytest.raises(ValidationError) as info:
        _Model.model_validate({"SIZE": "x", "PORT": "0"})
    assert errors_of(info.value) == ["SIZE='x': expected an integer >= 1",
                                     "PORT='0': expected an integer >= 1"]
    assert first_error(info.value, "label ") == "label SIZE='x': expected an integer >= 1"
