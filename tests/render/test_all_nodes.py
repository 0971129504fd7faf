"""The whole job's table for a person (render/all_nodes.py), on hand-built views: the exact
text an operator reads."""

from __future__ import annotations

from derive_env.render.all_nodes import all_nodes
from derive_env.whole_job import JobView, NodeRow

FOOTER = ("  decided by each node itself, not derived here: its interfaces (GLOO_SOCKET_IFNAME, "
          "NCCL_SOCKET_IFNAME), its GPU count (PET_NPROC_PER_NODE from it, "
          "JAX_LOCAL_DEVICE_IDS), its own host checks (derive-env check)\n")


def row(rank: int, host: str | None, conflicts: dict[str, str] | None = None,
        **cells: str) -> NodeRow:
    return NodeRow(rank=rank, host=host, name="", cells=cells, conflicts=conflicts or {})


def test_the_table_joins_equal_columns_and_marks_conflicts() -> None:
    view = JobView(
        source="backendai", num_nodes=3, own_rank=2,
        columns=("NODE_RANK", "PET_NODE_RANK", "TF_CONFIG"),
        rows=(row(0, "main1", NODE_RANK="0", PET_NODE_RANK="0", TF_CONFIG="worker 0"),
              row(1, "sub1", {"NODE_RANK": "0"}, NODE_RANK="1", PET_NODE_RANK="1",
                  TF_CONFIG="worker 1"),
              row(2, "sub2", {"NODE_RANK": "0"}, NODE_RANK="2", PET_NODE_RANK="2",
                  TF_CONFIG="worker 2")),
        shared=(("MASTER_ADDR", "main1", None), ("PET_NNODES", "3", "2")),
        node_decided=("PET_NPROC_PER_NODE",))
    assert all_nodes(view) == (
        "all nodes, each derived here from what every node shares (source backendai, 3 nodes):\n"
        "  the same on every node:\n"
        "    MASTER_ADDR = main1\n"
        "    PET_NNODES  = 3  ! set to 2 in the environment\n"
        "  node rank  host   NODE_RANK  PET_NODE_RANK  TF_CONFIG\n"
        "  0          main1  0          0              worker 0   (master)\n"
        "  1          sub1   1!         1              worker 1\n"
        "  2          sub2   2!         2              worker 2   (this node)\n"
        "  ! NODE_RANK is set to 0 in the environment (a job-wide value: the same on every "
        "node), but is derived as 1 on sub1 (node rank 1), 2 on sub2 (node rank 2)\n"
        + FOOTER +
        "  decided by this node: PET_NPROC_PER_NODE (see above)\n")


def test_equal_columns_share_one_header_and_unknown_hosts_show_a_question_mark() -> None:
    view = JobView(source="kubeflow-trainjob", num_nodes=40, own_rank=1,
                   columns=("NODE_RANK", "PET_NODE_RANK"),
                   rows=(row(0, "m", NODE_RANK="0", PET_NODE_RANK="0"),
                         row(1, None, NODE_RANK="1", PET_NODE_RANK="1")))
    assert all_nodes(view).splitlines()[1:4] == [
        "  node rank  host  NODE_RANK/PET_NODE_RANK",
        "  0          m     0                        (master)",
        "  1          ?     1                        (this node)",
    ]
    assert "  ... 40 nodes in all (2 shown: the first ones, this node and the last one)" in (
        all_nodes(view))


def test_role_names_get_a_column_when_they_are_not_the_hosts() -> None:
    view = JobView(source="x", num_nodes=1, own_rank=0, columns=("NODE_RANK",),
                   rows=(NodeRow(0, "10.0.0.1", "main1", {"NODE_RANK": "0"}, {}),))
    assert all_nodes(view).splitlines()[1:3] == [
        "  node rank  node   host      NODE_RANK",
        "  0          main1  10.0.0.1  0          (master, this node)",
    ]


def test_errors_and_notes_are_said_once() -> None:
    view = JobView(source="slurm-allocation", num_nodes=2, own_rank=None,
                   rows=(NodeRow(0, "a", "", {}, {}, "TF_CONFIG cannot\nbe built"),
                         NodeRow(1, "b", "", {}, {}, "TF_CONFIG cannot\nbe built")),
                   notes=("a note",))
    assert all_nodes(view) == (
        "all nodes, each derived here from what every node shares (source slurm-allocation, "
        "2 nodes):\n"
        "  node rank  host\n"
        "  0          a     (master)\n"
        "  1          b\n"
        "  not derived for a (node rank 0), b (node rank 1): 'TF_CONFIG cannot\\nbe built'\n"
        "  a note\n" + FOOTER)


def test_without_a_node_count_no_table() -> None:
    assert all_nodes(JobView(source="openmpi", num_nodes=None, own_rank=None,
                             absent="why")) == (
        "all nodes, each derived here from what every node shares (source openmpi, nodes not "
        "stated):\n  no table: why\n")
