"""What one source saw (sources/report.py): every fact optional, the node count either way."""

from __future__ import annotations

import pytest

from derive_env.sources.report import Processes, Report, layer_lines
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


def test_layer_lines_say_why_a_step_was_shadowed() -> None:
    mpi = Report("openmpi", "Open MPI (mpirun)", processes=Processes(0, 0, 2, 2))
    step = Report("slurm-step", "a Slurm step (srun)", processes=Processes(0, 0, 2, 1, (1, 1)))
    alloc = Report("slurm-allocation", "a Slurm allocation", nodes=(Node("n1"), Node("n2")),
                   node_rank=0)
    assert layer_lines([mpi, step, alloc], [mpi, alloc], [(step, mpi, True)],
                       (mpi, alloc, alloc)) == (
        "sources seen (innermost first): openmpi (Open MPI (mpirun)), slurm-step (a Slurm "
        "step (srun)), slurm-allocation (a Slurm allocation)",
        "process layer: openmpi",
        "node layer: node count and rank from slurm-allocation; hosts from slurm-allocation",
        "shadowed: slurm-step (a Slurm step (srun)): one task on each of its nodes around "
        "openmpi's ranks: Open MPI (mpirun)'s daemon step, not the ranks")
    assert layer_lines([mpi], [mpi], [], (mpi, None, None)) == (
        "source seen: openmpi (Open MPI (mpirun)), for the process layer",)
