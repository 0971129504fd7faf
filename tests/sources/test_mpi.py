"""The MPI launcher lines, read by their roles (sources/roles.py): openmpi, mvapich2, hydra,
pals.

Recorded environments first (Open MPI 4.1 and MPICH 4.0 over SSH and inside Slurm, and the
Slurm PMI plugins that must NOT be taken for a launcher of ours), then variable sets built
from the documentation of launchers not installable here (each names its page or file),
then malformed and misleading input with exact messages, then two properties: every
process of one job agrees, and no text gives anything but a Report or a TopologyError.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from derive_env.errors import TopologyError
from derive_env.sources import BY_NAME, SOURCES, roles, seen_sources
from derive_env.sources.report import Processes, Report
from support.recorded import FIXTURES, load_fixture

MPI_LINES = ("openmpi", "mvapich2", "hydra", "pals")


def _vocabulary(name: str) -> SimpleNamespace:
    """A line's roles as the attributes the tests below read."""
    own = BY_NAME[name].roles
    return SimpleNamespace(
        rank=own["rank"], local_rank=own["local_rank"], world_size=own["world_size"],
        local_world_size=own["local_world_size"], node_rank=own.get("node_rank"),
        job=own.get("job"), companions=tuple(own.get("same", ())))


VOCABULARIES = {name: _vocabulary(name) for name in MPI_LINES}


def read(environ: dict[str, str], name: str) -> Report:
    """:func:`roles.read` for the table line called ``name``."""
    return roles.read(environ, BY_NAME[name])

N09, N10, N11 = "gpu-a100-09", "gpu-a100-10", "gpu-a100-11"

#: Every 6-rank recording placed 2 ranks per node, by block: rank -> (node it ran on,
#: local rank). Literal, from the recordings' "# ran on" lines and local-rank variables.
BLOCK6 = {0: (N09, 0), 1: (N09, 1), 2: (N10, 0), 3: (N10, 1), 4: (N11, 0), 5: (N11, 1)}

#: scenario -> (the one MPI line seen, the job id every rank shares or None).
RECORDED = {
    "ompi-ssh": ("openmpi", "45547521"),
    "ompi-in-salloc": ("openmpi", "102957057"),
    "ompi-in-sbatch": ("openmpi", "2609053697"),
    "mpich-ssh": ("hydra", None),
    "mpich-in-salloc": ("hydra", None),
    "mpich-in-sbatch": ("hydra", None),
}

OMPI_INPUTS = ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_SIZE",
               "OMPI_COMM_WORLD_LOCAL_SIZE")
HYDRA_INPUTS = ("PMI_RANK", "MPI_LOCALRANKID", "PMI_SIZE", "MPI_LOCALNRANKS")


def _layer(names: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    """A launcher's process-layer inputs: the four together, and each fact's own variable."""
    facts = ("rank", "local_rank", "world_size", "local_world_size")
    return {"processes": names, **{fact: (name,) for fact, name in zip(facts, names, strict=True)}}


def _recorded(scenario: str) -> dict[int, tuple[str, dict[str, str]]]:
    ranks = {}
    for path in sorted((FIXTURES / scenario).glob("*.env")):
        ranks[int(path.stem.removeprefix("rank").removeprefix("task"))] = load_fixture(path)
    return ranks


def _mpi_seen(environ: dict[str, str]) -> list[str]:
    return [source.name for source in seen_sources(environ) if source.name in MPI_LINES]


@pytest.mark.parametrize("scenario", sorted(RECORDED))
def test_recorded_every_rank(scenario: str) -> None:
    line, job_id = RECORDED[scenario]
    ranks = _recorded(scenario)
    assert sorted(ranks) == [0, 1, 2, 3, 4, 5]
    for rank, (host, environ) in ranks.items():
        assert _mpi_seen(environ) == [line]
        report = read(environ, line)
        node, local_rank = BLOCK6[rank]
        assert host == node
        assert report.processes == Processes(rank, local_rank, 6, 2)
        assert report.source == line
        assert report.nodes == ()
        assert report.master is None
        assert report.node_rank is None
        assert report.num_nodes is None
        assert report.master_port is None
        assert report.reserved_ports == ()
        assert report.gpus is None
        if line == "openmpi":
            assert report.title == "Open MPI (mpirun)"
            assert report.job == ("openmpi", job_id, "")
            assert report.session_id == job_id
            assert report.inputs == {**_layer(OMPI_INPUTS), "ports": ("PMIX_NAMESPACE",)}
            assert report.notes == ("PMIX_RANK agrees with OMPI_COMM_WORLD_RANK",)
        else:
            assert report.title == "MPICH Hydra or Intel MPI (mpiexec)"
            assert report.job is None
            assert report.session_id is None
            assert report.inputs == _layer(HYDRA_INPUTS)
            assert report.notes == ()


def test_recorded_open_mpi_misleading_variables_are_ignored() -> None:
    """ompi-ssh rank 4 (third node): NODE_RANK 0 (not its node index), UNIVERSE_SIZE 8
    (slots, 6 processes), orte_num_nodes 3, the HNP URI of the login node (which runs no
    rank) and a loopback PMIx server: none of them reaches the report."""
    host, environ = _recorded("ompi-ssh")[4]
    assert host == N11
    assert environ["OMPI_COMM_WORLD_NODE_RANK"] == "0"
    assert environ["OMPI_UNIVERSE_SIZE"] == "8"
    assert environ["OMPI_MCA_orte_num_nodes"] == "3"
    assert environ["OMPI_MCA_orte_hnp_uri"] == "45547520.0;tcp://198.18.0.13:53061"
    assert environ["PMIX_SERVER_URI41"] == "45547520.3;tcp4://127.0.0.1:40241"
    report = read(environ, "openmpi")
    assert report.processes == Processes(4, 0, 6, 2)
    assert (report.node_rank, report.num_nodes, report.master, report.nodes) == \
        (None, None, None, ())


@pytest.mark.parametrize("scenario", ["srun-pmi2", "srun-pmix", "srun-cray-shasta"])
def test_recorded_slurm_mpi_plugins_are_no_launcher_of_ours(scenario: str) -> None:
    """Slurm's pmi2 (PMI_RANK, PMI_SIZE, no local rank), pmix (PMIX_RANK only) and
    cray_shasta (PALS_RANKID, PALS_NODEID, no local rank, no PMI_*) plugins: the Slurm step
    is the source; none of the MPI lines is seen on any task."""
    ranks = _recorded(scenario)
    assert sorted(ranks) == [0, 1, 2, 3, 4, 5]
    for _host, environ in ranks.values():
        assert _mpi_seen(environ) == []
        assert "slurm-step" in [source.name for source in seen_sources(environ)]


def test_recorded_cray_shasta_has_no_local_rank() -> None:
    """Why the pals line is not seen under srun --mpi=cray_shasta: Slurm 22.05 sets no
    PALS_LOCAL_RANKID, PALS_LOCAL_SIZE nor PMI_SIZE (mpi_cray_shasta.c)."""
    _host, environ = _recorded("srun-cray-shasta")[3]
    assert sorted(k for k in environ if k.startswith(("PALS_", "PMI_"))) == \
        ["PALS_APID", "PALS_APINFO", "PALS_NODEID", "PALS_RANKID", "PALS_SPOOL_DIR"]
    assert (environ["PALS_RANKID"], environ["PALS_NODEID"]) == ("3", "1")


def test_recorded_mpich_in_sbatch_copies_stale_slurm_identity() -> None:
    """Hydra copies mpiexec's environment: rank 4 runs on gpu-a100-11 but carries the batch
    node's SLURMD_NODENAME; the hydra line reads only Hydra's own four variables."""
    host, environ = _recorded("mpich-in-sbatch")[4]
    assert (host, environ["SLURMD_NODENAME"]) == (N11, N09)
    assert read(environ, "hydra").processes == Processes(4, 0, 6, 2)


# --- launchers not installable here: variable sets from their documentation ------------

#: Open MPI 5.0 prterun rank 5 of 8 on its second node (4 per node): the four variables of
#: docs.open-mpi.org/en/v5.0.x/tuning-apps/environment-var.html, PMIx's PMIX_RANK and
#: PMIX_NAMESPACE (prterun names the namespace "prterun-<host>-<pid>@1"), PRTE_LAUNCHED.
OMPI5 = {
    "OMPI_COMM_WORLD_SIZE": "8", "OMPI_COMM_WORLD_RANK": "5",
    "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "4",
    "OMPI_COMM_WORLD_NODE_RANK": "1", "OMPI_UNIVERSE_SIZE": "16", "OMPI_NUM_APP_CTX": "1",
    "PMIX_RANK": "5", "PMIX_NAMESPACE": "prterun-login-4242@1", "PRTE_LAUNCHED": "1",
    "PMIX_SERVER_URI41": "prterun-login-4242@0.1;tcp4://127.0.0.1:40211",
}

#: Intel MPI 2021 mpiexec.hydra, rank 3 of 4 on two nodes. Intel's Hydra derives from
#: MPICH's and sets the same four (accelerate utils/environment.py and DeepSpeed's
#: launcher read PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS for Intel MPI; Intel's
#: Inspector user guide: the rank is PMI_RANK), plus PMI_FD and I_MPI_* settings.
INTEL_MPI = {"PMI_RANK": "3", "PMI_SIZE": "4", "MPI_LOCALRANKID": "1",
             "MPI_LOCALNRANKS": "2", "PMI_FD": "6", "I_MPI_HYDRA_TOPOLIB": "hwloc"}

#: MVAPICH2 2.3 mpirun_rsh, rank 2 of 4, 2 per node: MV2_COMM_WORLD_* (user guide, section
#: "MPIRUN_RSH Parameters"), PMI_ID and MPIRUN_NPROCS (src/pm/mpirun/mpispawn.c), PMI_PORT.
MVAPICH2 = {"MV2_COMM_WORLD_RANK": "2", "MV2_COMM_WORLD_SIZE": "4",
            "MV2_COMM_WORLD_LOCAL_RANK": "0", "MV2_COMM_WORLD_LOCAL_SIZE": "2",
            "PMI_ID": "2", "MPIRUN_NPROCS": "4", "MPIRUN_RANK": "2",
            "MV2_NUM_NODES_IN_JOB": "2", "PMI_PORT": "node2:40001"}

#: HPE Cray PALS mpiexec (ALCF Polaris: `mpiexec -n 8 --ppn 4`), rank 5 on the second node:
#: PALS_* and Cray PMI's PMI_* as the ALCF user guide and its launcher scripts read them.
PALS = {"PALS_APID": "2f4a0c1e-5b8d-4e2a-9d7c-0f1e2d3c4b5a", "PALS_RANKID": "5",
        "PALS_LOCAL_RANKID": "1", "PALS_LOCAL_SIZE": "4", "PALS_NODEID": "1",
        "PALS_DEPTH": "1", "PALS_SPOOL_DIR": "/var/run/palsd/2f4a", "PMI_RANK": "5",
        "PMI_SIZE": "8", "PMI_LOCAL_RANK": "1", "PMI_LOCAL_SIZE": "4",
        "PMI_UNIVERSE_SIZE": "8", "PMI_JOBID": "2f4a0c1e"}


def test_open_mpi_5() -> None:
    assert _mpi_seen(OMPI5) == ["openmpi"]
    assert read(OMPI5, "openmpi") == Report(
        source="openmpi", title="Open MPI (mpirun)",
        processes=Processes(5, 1, 8, 4), job=("openmpi", "prterun-login-4242@1", ""),
        session_id="prterun-login-4242@1",
        inputs={**_layer(OMPI_INPUTS), "ports": ("PMIX_NAMESPACE",)},
        notes=("PMIX_RANK agrees with OMPI_COMM_WORLD_RANK",),
    )


def test_intel_mpi() -> None:
    assert _mpi_seen(INTEL_MPI) == ["hydra"]
    assert read(INTEL_MPI, "hydra") == Report(
        source="hydra", title="MPICH Hydra or Intel MPI (mpiexec)",
        processes=Processes(3, 1, 4, 2), inputs=_layer(HYDRA_INPUTS),
    )


def test_hydra_pmi_port_mode_states_no_world_size() -> None:
    """mpiexec -pmi-port: PMI_PORT and PMI_ID replace PMI_RANK, PMI_FD and PMI_SIZE
    (pmodels/mpich src/pm/hydra/proxy/pmip_cb.c launch_procs): no world size, not seen."""
    environ = {"MPI_LOCALNRANKS": "2", "MPI_LOCALRANKID": "1", "PMI_PORT": "node1:40123",
               "PMI_ID": "3"}
    assert _mpi_seen(environ) == []


def test_mvapich2() -> None:
    assert _mpi_seen(MVAPICH2) == ["mvapich2"]
    assert read(MVAPICH2, "mvapich2") == Report(
        source="mvapich2", title="MVAPICH2 (mpirun_rsh)",
        processes=Processes(2, 0, 4, 2),
        inputs=_layer(("MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_LOCAL_RANK",
                       "MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_LOCAL_SIZE")),
        notes=("PMI_ID agrees with MV2_COMM_WORLD_RANK",
               "MPIRUN_NPROCS agrees with MV2_COMM_WORLD_SIZE"),
    )


def test_mvapich2_mpiexec_sets_pmi() -> None:
    environ = {**{k: v for k, v in MVAPICH2.items() if k not in ("PMI_ID", "MPIRUN_NPROCS")},
               "PMI_RANK": "2", "PMI_SIZE": "4"}
    assert read(environ, "mvapich2").notes == (
        "PMI_RANK agrees with MV2_COMM_WORLD_RANK", "PMI_SIZE agrees with MV2_COMM_WORLD_SIZE")


def test_pals() -> None:
    assert _mpi_seen(PALS) == ["pals"]
    assert read(PALS, "pals") == Report(
        source="pals", title="Cray PALS (mpiexec)",
        node_rank=1, processes=Processes(5, 1, 8, 4),
        job=("pals", PALS["PALS_APID"], ""), session_id=PALS["PALS_APID"],
        inputs={**_layer(("PALS_RANKID", "PALS_LOCAL_RANKID", "PMI_SIZE", "PALS_LOCAL_SIZE")),
                "node_rank": ("PALS_NODEID",), "ports": ("PALS_APID",)},
        notes=("PMI_RANK agrees with PALS_RANKID", "PMI_LOCAL_RANK agrees with PALS_LOCAL_RANKID",
               "PMI_LOCAL_SIZE agrees with PALS_LOCAL_SIZE"),
    )


def test_detect_sets_are_the_vocabularies() -> None:
    """Each MPI table line is seen exactly when its vocabulary's variables are set."""
    for source in SOURCES:
        if source.name in MPI_LINES:
            vocabulary = VOCABULARIES[source.name]
            own = {vocabulary.rank, vocabulary.local_rank, vocabulary.world_size,
                   vocabulary.local_world_size} | (
                {vocabulary.node_rank} if vocabulary.node_rank else set())
            assert set(source.detect) == own, source.name
            assert source.module == "roles"


# --- malformed and misleading input ----------------------------------------------------

def _error(environ: dict[str, str], line: str) -> str:
    with pytest.raises(TopologyError) as caught:
        read(environ, line)
    assert caught.value.exit_code == 3
    return str(caught.value)


def _why(launcher: str) -> str:
    """The rule ending every message about two of an MPI launcher's variables."""
    return (f"{launcher} sets both for each process, so one of them was exported by hand (a "
            "wrapper) or inherited from another job: unset the stale one")


@pytest.mark.parametrize(("changes", "message"), [
    ({"OMPI_COMM_WORLD_RANK": "three"},
     "OMPI_COMM_WORLD_RANK='three': expected an integer >= 0 (the global rank)"),
    ({"OMPI_COMM_WORLD_RANK": "-1"},
     "OMPI_COMM_WORLD_RANK='-1': expected an integer >= 0 (the global rank)"),
    ({"OMPI_COMM_WORLD_LOCAL_RANK": " 1"},
     "OMPI_COMM_WORLD_LOCAL_RANK=' 1': expected an integer >= 0 (the local rank)"),
    ({"OMPI_COMM_WORLD_SIZE": "0"},
     "OMPI_COMM_WORLD_SIZE='0': expected an integer >= 1 (the world size)"),
    ({"OMPI_COMM_WORLD_LOCAL_SIZE": "1" * 19},
     f"OMPI_COMM_WORLD_LOCAL_SIZE='{'1' * 19}': expected an integer >= 1 of at most 18 "
     "digits (the local world size)"),
    ({"OMPI_COMM_WORLD_RANK": "8"},
     "OMPI_COMM_WORLD_RANK='8': expected a global rank below OMPI_COMM_WORLD_SIZE='8': "
     + _why("mpirun")),
    ({"OMPI_COMM_WORLD_LOCAL_RANK": "4"},
     "OMPI_COMM_WORLD_LOCAL_RANK='4': expected a local rank below "
     "OMPI_COMM_WORLD_LOCAL_SIZE='4': " + _why("mpirun")),
    ({"OMPI_COMM_WORLD_LOCAL_SIZE": "9", "OMPI_COMM_WORLD_LOCAL_RANK": "1"},
     "OMPI_COMM_WORLD_LOCAL_SIZE='9': expected a local world size at most "
     "OMPI_COMM_WORLD_SIZE='8': " + _why("mpirun")),
    ({"PMIX_RANK": "4"},
     "PMIX_RANK='4': expected the same global rank as OMPI_COMM_WORLD_RANK='5': "
     + _why("mpirun")),
    ({"PMIX_RANK": "x"},
     "PMIX_RANK='x': expected the same global rank as OMPI_COMM_WORLD_RANK='5': "
     + _why("mpirun")),
])
def test_open_mpi_bad_values(changes: dict[str, str], message: str) -> None:
    assert _error({**OMPI5, **changes}, "openmpi") == message


@pytest.mark.parametrize(("changes", "message"), [
    ({"PMI_LOCAL_RANK": "2"},
     "PMI_LOCAL_RANK='2': expected the same local rank as PALS_LOCAL_RANKID='1': "
     + _why("PALS's mpiexec")),
    ({"PMI_LOCAL_SIZE": "2"},
     "PMI_LOCAL_SIZE='2': expected the same local world size as PALS_LOCAL_SIZE='4': "
     + _why("PALS's mpiexec")),
    ({"PMI_RANK": "0"},
     "PMI_RANK='0': expected the same global rank as PALS_RANKID='5': "
     + _why("PALS's mpiexec")),
    ({"PALS_NODEID": "n1"},
     "PALS_NODEID='n1': expected an integer >= 0 (the node rank)"),
    ({"PALS_NODEID": "8"},
     "PALS_NODEID='8': expected a node rank below PMI_SIZE='8': " + _why("PALS's mpiexec")),
])
def test_pals_bad_values(changes: dict[str, str], message: str) -> None:
    assert _error({**PALS, **changes}, "pals") == message


def test_mvapich2_disagreeing_world_size() -> None:
    assert _error({**MVAPICH2, "MPIRUN_NPROCS": "8"}, "mvapich2") == (
        "MPIRUN_NPROCS='8': expected the same world size as MV2_COMM_WORLD_SIZE='4': "
        + _why("mpirun_rsh"))


def test_hydra_rank_beyond_size() -> None:
    assert _error({**INTEL_MPI, "PMI_RANK": "4"}, "hydra") == (
        "PMI_RANK='4': expected a global rank below PMI_SIZE='4': " + _why("mpiexec"))


def test_hydra_never_compares_other_launchers_variables() -> None:
    """Hydra copies mpiexec's environment: a PMIX_RANK or a PMI_LOCAL_RANK there may be an
    outer job's; the hydra line does not read them (no error, same report)."""
    stale = {**INTEL_MPI, "PMIX_RANK": "0", "PMI_LOCAL_RANK": "0", "PMI_LOCAL_SIZE": "9",
             "OMPI_COMM_WORLD_NODE_RANK": "7"}
    assert read(stale, "hydra") == read(INTEL_MPI, "hydra")


def test_empty_companion_is_unset() -> None:
    assert read({**OMPI5, "PMIX_RANK": ""}, "openmpi").notes == ()


def test_open_mpi_node_rank_and_universe_never_used() -> None:
    """OMPI_COMM_WORLD_NODE_RANK and OMPI_UNIVERSE_SIZE change nothing; no node layer."""
    other = {**OMPI5, "OMPI_COMM_WORLD_NODE_RANK": "3", "OMPI_UNIVERSE_SIZE": "99",
             "OMPI_MCA_orte_num_nodes": "5"}
    assert read(other, "openmpi") == read(OMPI5, "openmpi")
    assert read(other, "openmpi").node_rank is None


def test_local_rank_never_from_global_rank() -> None:
    """PMI_RANK=3 with MPI_LOCALRANKID=1: the local rank is 1, never 3 % 2 or 3."""
    assert read({**INTEL_MPI, "MPI_LOCALRANKID": "0"}, "hydra").processes.local_rank == 0


# --- properties ----------------------------------------------------------------------

@st.composite
def layouts(draw: st.DrawFn) -> list[int]:
    """Every rank's node, for a random job: node counts 1-4 processes each, placed by block,
    cyclic or an arbitrary permutation (rankfiles)."""
    counts = draw(st.lists(st.integers(1, 4), min_size=1, max_size=5))
    slots = [node for node, count in enumerate(counts) for _ in range(count)]
    return draw(st.permutations(slots))


def _job_environments(line: str, node_of: list[int]) -> list[dict[str, str]]:
    """The environment of every rank of one job under launcher ``line``."""
    vocabulary = VOCABULARIES[line]
    world = len(node_of)
    environments = []
    for rank, node in enumerate(node_of):
        on_node = [r for r, n in enumerate(node_of) if n == node]
        facts = {"rank": rank, "local_rank": on_node.index(rank), "world_size": world,
                 "local_world_size": len(on_node)}
        environ = {getattr(vocabulary, fact): str(value) for fact, value in facts.items()}
        environ.update({name: str(facts[fact]) for name, fact in vocabulary.companions})
        if vocabulary.node_rank:
            environ[vocabulary.node_rank] = str(node)
        if vocabulary.job:
            environ[vocabulary.job] = "job-42"
        environments.append(environ)
    return environments


@settings(max_examples=60, deadline=None)
@given(line=st.sampled_from(MPI_LINES), node_of=layouts())
def test_every_rank_of_a_job_agrees(line: str, node_of: list[int]) -> None:
    reports = [read(environ, line) for environ in _job_environments(line, node_of)]
    world = len(node_of)
    assert {r.processes.world_size for r in reports} == {world}
    assert sorted(r.processes.rank for r in reports) == list(range(world))
    assert {(r.nodes, r.master, r.job) for r in reports} == {
        ((), None, (line, "job-42", "") if VOCABULARIES[line].job else None)}
    for node in set(node_of):
        mine = [r for r, n in zip(reports, node_of, strict=True) if n == node]
        assert sorted(r.processes.local_rank for r in mine) == list(range(len(mine)))
        assert {r.processes.local_world_size for r in mine} == {len(mine)}
        expected = node if VOCABULARIES[line].node_rank else None
        assert {r.node_rank for r in mine} == {expected}


def _variables(line: str) -> list[str]:
    vocabulary = VOCABULARIES[line]
    names = [vocabulary.rank, vocabulary.local_rank, vocabulary.world_size,
             vocabulary.local_world_size]
    names += [name for name, _fact in vocabulary.companions]
    names += [name for name in (vocabulary.node_rank, vocabulary.job) if name]
    return names


_TEXT = st.one_of(st.text(max_size=25), st.integers(0, 12).map(str),
                  st.from_regex(r"\A[ 0-9+\-_.x]{0,20}\Z"))


@settings(max_examples=300, deadline=None)
@given(data=st.data(), line=st.sampled_from(MPI_LINES))
def test_any_text_gives_a_report_or_a_topology_error(data: st.DataObject, line: str) -> None:
    names = _variables(line)
    environ = {name: data.draw(_TEXT, label=name) for name in names}
    try:
        report = read(environ, line)
    except TopologyError as exc:
        assert str(exc).split("=", 1)[0] in names
    else:
        assert isinstance(report, Report)
        processes = report.processes
        assert 0 <= processes.rank < processes.world_size
        assert 0 <= processes.local_rank < processes.local_world_size <= processes.world_size
