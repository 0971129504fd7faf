"""sources/roles.py: the one reader of a line's roles, and the kit of the manager modules."""

from __future__ import annotations

import pytest

from derive_env.errors import TopologyError
from derive_env.sources.roles import checked_master, parsed


def test_checked_master_reads_host_and_port() -> None:
    environ = {"MASTER_ADDR": "n1", "MASTER_PORT": "29500"}
    assert checked_master(environ, "MASTER_ADDR", "MASTER_PORT", "fix") == ("n1", 29500)


@pytest.mark.parametrize(("environ", "message"), [
    ({"MASTER_ADDR": "-n1", "MASTER_PORT": "1"}, "MASTER_ADDR='-n1': expected "),
    ({"MASTER_ADDR": "n1", "MASTER_PORT": "0"}, "MASTER_PORT='0': expected "),
])
def test_checked_master_names_the_bad_variable_and_ends_with_the_fix(
        environ: dict[str, str], message: str) -> None:
    with pytest.raises(TopologyError) as caught:
        checked_master(environ, "MASTER_ADDR", "MASTER_PORT", "the fix")
    assert str(caught.value).startswith(message)
    assert str(caught.value).endswith("; the fix")


def test_parsed_names_the_variable() -> None:
    assert parsed({"A": "3"}, "A", int) == 3
    with pytest.raises(TopologyError) as caught:
        parsed({"A": "x"}, "A", lambda text: int(text) if text.isdigit() else
               (_ for _ in ()).throw(ValueError("a number")))
    assert str(caught.value) == "A='x': expected a number"
