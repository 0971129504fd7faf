"""environ.merge / changes: user-set values win, empty counts as unset."""

from __future__ import annotations

from derive_env.environ import changes, merge
from derive_env.frameworks import DerivedVariable


def var(name: str, value: str) -> DerivedVariable:
    return DerivedVariable(name=name, value=value, source="test", framework="pytorch")


DERIVED = [var("MASTER_ADDR", "main1"), var("MASTER_PORT", "29500"), var("NODE_RANK", "2")]


def test_nothing_set_nothing_kept() -> None:
    merged = merge({"PATH": "/bin"}, DERIVED)
    assert merged == DERIVED
    assert changes(merged) == {"MASTER_ADDR": "main1", "MASTER_PORT": "29500", "NODE_RANK": "2"}


def test_user_value_kept_with_derived_recorded() -> None:
    merged = merge({"MASTER_ADDR": "10.0.0.9"}, DERIVED)
    assert merged[0] == DerivedVariable(
        name="MASTER_ADDR", value="10.0.0.9", source="test", framework="pytorch", kept=True,
        derived="main1",
    )
    assert merged[1:] == DERIVED[1:]
    assert changes(merged) == {"MASTER_PORT": "29500", "NODE_RANK": "2"}


def test_identical_user_value_kept() -> None:
    merged = merge({"NODE_RANK": "2"}, DERIVED)
    assert merged[2].kept
    assert (merged[2].value, merged[2].derived) == ("2", "2")
    assert "NODE_RANK" not in changes(merged)


def test_empty_user_value_counts_as_unset() -> None:
    merged = merge({"MASTER_ADDR": "", "MASTER_PORT": ""}, DERIVED)
    assert merged == DERIVED
    assert changes(merged)["MASTER_ADDR"] == "main1"


def test_blank_user_value_is_a_value() -> None:
    merged = merge({"NODE_RANK": " "}, DERIVED)
    assert merged[2].kept and merged[2].value == " "


def test_order_preserved_and_inputs_untouched() -> None:
    environ = {"MASTER_PORT": "1"}
    merged = merge(environ, DERIVED)
    assert [v.name for v in merged] == ["MASTER_ADDR", "MASTER_PORT", "NODE_RANK"]
    assert environ == {"MASTER_PORT": "1"}
    assert DERIVED[1].value == "29500" and not DERIVED[1].kept


def test_empty() -> None:
    assert merge({}, []) == []
    assert changes([]) == {}
