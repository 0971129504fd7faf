"""What one source saw (sources/report.py): every fact optional, the node count either way."""

from __future__ import annotations

import pytest

from derive_env.sources.report import Processes, Report
from derive_env.topology import Node


def test_a_report_states_nothing_but_its_name_by_default() -> None:
    report = Report(source="openmpi", title="Open MPI (mpirun)")
    assert (report.nodes, report.node_rank, report.num_nodes, report.processes) == (
        (), None, None, None)
    assert (report.master, report.master_port, report.reserved_ports, report.job) == (
        None, None, (), None)
    assert (report.preset, report.renumbers, report.problem) == (frozenset(), False, None)
    assert dict(report.inputs) == {}
    with pytest.raises(TypeError):
        report.inputs["nodes"] = ("X",)  # the shared default is read-only


def test_the_node_count_is_the_host_list_or_the_count_alone() -> None:
    assert Report("a", "A").count() is None
    assert Report("a", "A", num_nodes=3).count() == 3
    assert Report("a", "A", nodes=(Node(host="n1"), Node(host="n2"))).count() == 2
    assert Report("a", "A", nodes=(Node(host="n1"),), num_nodes=5).count() == 1


def test_processes_state_the_tasks_per_node_only_when_known() -> None:
    assert Processes(3, 1, 6, 2).tasks_per_node == ()
    assert Processes(3, 1, 6, 2, (2, 2, 2))._replace(rank=4).rank == 4
