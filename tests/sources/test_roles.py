"""sources/roles.py: the one reader of a line's roles, and the kit of the manager modules."""

from __future__ import annotations

import pytest

from derive_env.errors import TopologyError
from derive_env.sources import Source, states_of
from derive_env.sources.report import Processes
from derive_env.sources.roles import checked_master, parsed, read


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


def _line(**roles: object) -> Source:
    return Source("example", "an example job", "roles", ("X",), 4, roles=roles)


def test_a_host_list_gives_the_nodes_its_count_and_the_rank_below_it() -> None:
    line = _line(hosts=("HOSTS", "ips"), num_nodes="N", node_rank="R", why="set by hand")
    report = read({"HOSTS": "10.0.0.1\n10.0.0.2", "N": "2", "R": "1"}, line)
    assert [node.host for node in report.nodes] == ["10.0.0.1", "10.0.0.2"]
    assert (report.node_rank, report.num_nodes, report.inputs["nodes"]) == (1, None, ("HOSTS",))
    with pytest.raises(TopologyError) as caught:
        read({"HOSTS": "10.0.0.1\n10.0.0.2", "N": "3", "R": "1"}, line)
    assert str(caught.value) == "N='3': expected 2, the 2 hosts in HOSTS; set by hand"
    with pytest.raises(TopologyError) as caught:
        read({"HOSTS": "a,b", "N": "1", "R": "0"}, _line(hosts=("HOSTS", "comma"),
                                                         num_nodes="N", node_rank="R"))
    assert str(caught.value) == "N='1': expected 2, the 2 hosts in HOSTS"


@pytest.mark.parametrize(("text", "message"), [
    ("a,,b", "HOSTS='a,,b': expected one host per entry, none empty: entry 2 is empty; why"),
    ("a,-b", "HOSTS='a,-b': expected one host per entry: entry 2 ('-b'): "),
    ("a,A", "HOSTS='a,A': expected distinct hosts, one per node: 'A' is listed twice; why"),
])
def test_a_bad_host_list_names_the_entry(text: str, message: str) -> None:
    with pytest.raises(TopologyError) as caught:
        read({"HOSTS": text, "R": "0"}, _line(hosts=("HOSTS", "comma"), node_rank="R", why="why"))
    assert str(caught.value).startswith(message)


def test_the_process_layer_and_its_relations() -> None:
    line = _line(rank="R", local_rank="L", world_size="W", local_world_size="LW", job="J",
                 same=(("R2", "rank"),), why="both are the launcher's")
    environ = {"R": "3", "L": "1", "W": "4", "LW": "2", "J": " job-7 ", "R2": "3"}
    report = read(environ, line)
    assert report.processes == Processes(3, 1, 4, 2)
    assert (report.job, report.session_id) == (("example", "job-7", ""), "job-7")
    assert report.notes == ("R2 agrees with R",)
    assert report.inputs == {"processes": ("R", "L", "W", "LW"), "rank": ("R",),
                             "local_rank": ("L",), "world_size": ("W",),
                             "local_world_size": ("LW",), "ports": ("J",)}
    for changes, message in [
            ({"R": "4"}, "R='4': expected a global rank below W='4': both are the launcher's"),
            ({"LW": "5", "L": "0"},
             "LW='5': expected a local world size at most W='4': both are the launcher's"),
            ({"R2": "2"}, "R2='2': expected the same global rank as R='3': both are the "
                          "launcher's"),
            ({"W": "0"}, "W='0': expected an integer >= 1 (the world size)")]:
        with pytest.raises(TopologyError) as caught:
            read({**environ, **changes}, line)
        assert str(caught.value) == message


def test_a_node_rank_without_a_count_is_below_the_world_size() -> None:
    line = _line(rank="R", local_rank="L", world_size="W", local_world_size="LW",
                 node_rank="N")
    with pytest.raises(TopologyError) as caught:
        read({"R": "0", "L": "0", "W": "2", "LW": "1", "N": "2"}, line)
    assert str(caught.value) == "N='2': expected a node rank below W='2'"


def test_states_are_derived_from_the_roles() -> None:
    line = _line(num_nodes="N", node_rank="R", job="J")
    assert states_of(line) == (("N", 1), ("R", 0))
    assert states_of(_line()) == ()
