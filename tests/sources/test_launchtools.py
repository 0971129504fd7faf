"""The cloud launch tools (sources/managers/launchtools.py): SkyPilot and dstack task nodes.

No recorded environment exists here (no cloud account on this machine): each node's
variables are TYPED from the tools' own code, as they set them:

- SkyPilot: skypilot-org/skypilot ``sky/backends/task_codegen.py``, ``RayCodeGen._add_ray_task``
  (``SKYPILOT_NODE_IPS`` = ``'\\n'.join(job_ip_rank_list)``, ``SKYPILOT_NODE_RANK`` =
  ``job_ip_rank_map[ip]``, ``SKYPILOT_NUM_NODES`` = ``len(job_ip_rank_list)``,
  ``SKYPILOT_NUM_GPUS_PER_NODE`` = ``int(math.ceil(num_gpus))``, 0 for a TPU), and
  ``docs/source/running-jobs/environment-variables.rst`` (``SKYPILOT_TASK_ID`` =
  ``sky-<timestamp>_<cluster-name>_<task-id>``).
- dstack: dstackai/dstack ``runner/internal/runner/executor/executor.go``, ``execJob``
  (``DSTACK_NODES_IPS`` = ``strings.Join(clusterInfo.JobIPs, "\\n")``,
  ``DSTACK_MASTER_NODE_IP`` = ``clusterInfo.MasterJobIP``, ``DSTACK_NODE_RANK`` =
  ``jobSpec.JobNum``, ``DSTACK_NODES_NUM`` = ``jobSpec.JobsPerReplica``,
  ``DSTACK_GPUS_PER_NODE`` = ``clusterInfo.GPUSPerJob``, ``DSTACK_GPUS_NUM`` = nodes x that);
  a job whose IP is not known yet is ``""`` in ``JobIPs`` (server ``jobs_running.py``,
  ``_get_cluster_info``).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from derive_env.digest import digest_of, facts_of
from derive_env.errors import TopologyError
from derive_env.labels import PREFIX
from derive_env.pipeline import derive
from derive_env.sources import BY_NAME, seen_sources
from derive_env.sources.lists import all_ipv4
from derive_env.sources.managers import launchtools
from derive_env.sources.report import Report
from derive_env.topology import Node
from support.jobs import dstack_node, skypilot_node
from support.jobs import ipv4s as _ips

SKY_FIX = BY_NAME["skypilot"].roles["why"]
DSTACK_FIX = BY_NAME["dstack"].roles["why"]


def read(environ: dict[str, str], name: str) -> Report:
    """:func:`launchtools.read` for the table line called ``name``."""
    return launchtools.read(environ, BY_NAME[name])


IPS = ["10.0.1.17", "10.0.1.9", "10.0.1.23"]


def test_skypilot_node_exactly() -> None:
    env = skypilot_node(IPS, 2)
    assert [line.name for line in seen_sources(env)] == ["skypilot"]
    report = read(env, "skypilot")
    assert report == Report(
        source="skypilot", title="a SkyPilot task",
        nodes=(Node("10.0.1.17"), Node("10.0.1.9"), Node("10.0.1.23")), node_rank=2, gpus=8,
        session_id="sky-2026-12-02-01-00-00-000000_mycluster_1",
        job=("skypilot", "sky-2026-12-02-01-00-00-000000_mycluster_1", "10.0.1.17"),
        inputs={"nodes": ("SKYPILOT_NODE_IPS",), "node_rank": ("SKYPILOT_NODE_RANK",),
                "num_nodes": ("SKYPILOT_NUM_NODES",), "master": ("SKYPILOT_NODE_IPS",),
                "ports": ("SKYPILOT_TASK_ID", "SKYPILOT_NODE_IPS"),
                "gpus": ("SKYPILOT_NUM_GPUS_PER_NODE",)},
        order="the order of SKYPILOT_NODE_IPS (node rank r = line r)",
        notes=("node 2 of 3 (SKYPILOT_NODE_RANK, SKYPILOT_NUM_NODES); master = the first "
               "line of SKYPILOT_NODE_IPS",))


def test_skypilot_tpu_gives_no_gpu_count_never_nproc_zero() -> None:
    """SKYPILOT_NUM_GPUS_PER_NODE=0 on a TPU VM: no GPU count; torch is not given 0."""
    env = skypilot_node(["10.130.0.2", "10.130.0.3"], 1, gpus=0)
    report = read(env, "skypilot")
    assert report.gpus is None
    assert report.notes[1] == (
        "SKYPILOT_NUM_GPUS_PER_NODE='0': no GPU (a CPU node, or an accelerator that is no "
        "GPU: TPU, Trainium); not a process count, the devices are counted")
    derivation = derive(env, {PREFIX + "frameworks": "pytorch"})
    assert derivation is not None
    assert derivation.topology.num_nodes == 2
    assert derivation.changes().get("NPROC_PER_NODE") != "0"
    assert derivation.changes().get("LOCAL_WORLD_SIZE") != "0"


def test_dstack_node_exactly() -> None:
    env = dstack_node(IPS, 0, gpus=4)
    assert [line.name for line in seen_sources(env)] == ["dstack"]
    report = read(env, "dstack")
    assert (report.nodes, report.node_rank, report.gpus, report.job) == (
        (Node("10.0.1.17"), Node("10.0.1.9"), Node("10.0.1.23")), 0, 4,
        ("dstack", "3f2a", "10.0.1.17"))
    assert report.inputs["master"] == ("DSTACK_MASTER_NODE_IP",)
    assert report.order == "the order of DSTACK_NODES_IPS (node rank r = line r)"


@pytest.mark.parametrize(("ips", "line"), [
    (["10.0.0.1", ""], 2),  # JobIPs ["10.0.0.1", ""]: joined "10.0.0.1\n"
    (["", ""], 1),
    (["", "10.0.0.2", "10.0.0.3"], 1),
])
def test_dstack_ips_not_known_yet_are_refused(ips: list[str], line: int) -> None:
    env = {**dstack_node(["10.0.0.9"] * len(ips), 1), "DSTACK_NODES_IPS": "\n".join(ips),
           "DSTACK_MASTER_NODE_IP": ips[0] or "10.0.0.1"}
    with pytest.raises(TopologyError) as caught:
        read(env, "dstack")
    assert str(caught.value) == (
        f"DSTACK_NODES_IPS={env['DSTACK_NODES_IPS']!r}: expected one host per entry, none "
        f"empty: entry {line} is empty; an address not known yet: start derive-env once the "
        "tool has given every node's IP")


def test_dstack_empty_ip_list_is_refused_not_a_single_node() -> None:
    """DSTACK_NODES_IPS='' (no IP known): the line is not seen; its node count refuses."""
    env = {**dstack_node(["10.0.0.1", "10.0.0.2"], 1), "DSTACK_NODES_IPS": ""}
    with pytest.raises(TopologyError) as caught:
        derive(env, {PREFIX + "frameworks": "pytorch"})
    assert str(caught.value).startswith(
        "DSTACK_NODES_NUM='2': expected 1 or unset: a dstack task states a job of more than "
        "one node")


@pytest.mark.parametrize(("name", "env", "message"), [
    ("skypilot", {**skypilot_node(IPS, 1), "SKYPILOT_NUM_NODES": "2"},
     "SKYPILOT_NUM_NODES='2': expected the number of lines of SKYPILOT_NODE_IPS (3): both "
     f"count the task's nodes; {SKY_FIX}"),
    ("skypilot", {**skypilot_node(IPS, 1), "SKYPILOT_NODE_RANK": "3"},
     f"SKYPILOT_NODE_RANK='3': expected an index below SKYPILOT_NUM_NODES='3': {SKY_FIX}"),
    ("skypilot", skypilot_node(["10.0.0.1", "10.0.0.1"], 1),
     "SKYPILOT_NODE_IPS='10.0.0.1\\n10.0.0.1': expected distinct hosts, one per node: "
     f"'10.0.0.1' is listed twice; {SKY_FIX}"),
    ("skypilot", skypilot_node(["10.0.0.1", "10.0.0.2 x"], 1),
     "SKYPILOT_NODE_IPS='10.0.0.1\\n10.0.0.2 x': expected one host per entry: entry 2 "
     "('10.0.0.2 x'): a host name (letters, digits, '-' and '.') or an IP address; "
     f"{SKY_FIX}"),
    ("skypilot", {**skypilot_node(IPS, 1), "SKYPILOT_NUM_GPUS_PER_NODE": "0.5"},
     "SKYPILOT_NUM_GPUS_PER_NODE='0.5': expected an integer >= 0; " + SKY_FIX),
    ("dstack", {**dstack_node(IPS, 1), "DSTACK_MASTER_NODE_IP": "10.0.1.9"},
     "DSTACK_MASTER_NODE_IP='10.0.1.9': expected the first line of DSTACK_NODES_IPS "
     f"('10.0.1.17'): dstack gives the master node's IP as both; {DSTACK_FIX}"),
    ("dstack", {**dstack_node(IPS, 1), "DSTACK_NODES_NUM": "4"},
     "DSTACK_NODES_NUM='4': expected the number of lines of DSTACK_NODES_IPS (3): both count "
     f"the task's nodes; {DSTACK_FIX}"),
])
def test_counts_and_lists_are_cross_checked(name: str, env: dict[str, str],
                                            message: str) -> None:
    with pytest.raises(TopologyError) as caught:
        read(env, name)
    assert str(caught.value) == message


# -- properties ---------------------------------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(["skypilot", "dstack"]), nodes=st.integers(2, 24),
       gpus=st.integers(0, 8), data=st.data())
def test_every_node_of_a_job_derives_one_job(name: str, nodes: int, gpus: int,
                                             data: st.DataObject) -> None:
    """Same master, same ports, distinct node ranks 0..n-1, same digest on every node."""
    ips = data.draw(st.permutations(_ips(nodes)))
    make = skypilot_node if name == "skypilot" else dstack_node
    derivations = [derive(make(ips, rank, gpus), {PREFIX + "frameworks": "pytorch,jax"})
                   for rank in range(nodes)]
    assert all(d is not None for d in derivations)
    changes = [d.changes() for d in derivations]
    assert {c["MASTER_ADDR"] for c in changes} == {ips[0]}
    assert len({c["MASTER_PORT"] for c in changes}) == 1
    assert [d.topology.node_rank for d in derivations] == list(range(nodes))
    assert len({digest_of(facts_of(d.topology, d)) for d in derivations}) == 1


TEXT = st.text(st.characters(codec="utf-8"), max_size=12) | st.sampled_from(
    ["0", "1", "2", "3", "-1", "01", "10.0.0.1", "10.0.0.1\n10.0.0.2", "\n", "", "a\n\nb",
     "99999999999999999999"])
NAMES = {"skypilot": ["SKYPILOT_NODE_IPS", "SKYPILOT_NODE_RANK", "SKYPILOT_NUM_NODES",
                      "SKYPILOT_NUM_GPUS_PER_NODE", "SKYPILOT_TASK_ID"],
         "dstack": ["DSTACK_NODES_IPS", "DSTACK_MASTER_NODE_IP", "DSTACK_NODE_RANK",
                    "DSTACK_NODES_NUM", "DSTACK_GPUS_PER_NODE", "DSTACK_RUN_ID"]}


@settings(max_examples=300, deadline=None)
@given(name=st.sampled_from(["skypilot", "dstack"]), data=st.data())
def test_arbitrary_text_gives_a_report_or_a_topology_error(name: str,
                                                           data: st.DataObject) -> None:
    values = data.draw(st.fixed_dictionaries({n: TEXT for n in NAMES[name]}))
    try:
        report = read(values, name)
    except TopologyError as exc:
        assert str(exc).split("=", 1)[0] in NAMES[name]
        return
    assert 0 <= report.node_rank < len(report.nodes)


OCTET = st.integers(0, 300).map(str) | st.sampled_from(["01", "00", "007", "1000", "", "a"])


@settings(max_examples=300, deadline=None)
@given(lines=st.lists(st.lists(OCTET, min_size=3, max_size=5).map(".".join), min_size=1,
                      max_size=6))
def test_the_ipv4_fast_path_accepts_exactly_what_ipaddress_does(lines: list[str]) -> None:
    """all_ipv4 (one match for the list) agrees with ipaddress.IPv4Address line by line."""
    import ipaddress

    def valid(line: str) -> bool:
        try:
            ipaddress.IPv4Address(line)
        except ValueError:
            return False
        return True

    assert all_ipv4("\n".join(lines)) == all(map(valid, lines))


def test_a_leading_zero_address_is_refused_as_ipaddress_refuses_it() -> None:
    with pytest.raises(TopologyError) as caught:
        read(skypilot_node(["10.0.0.1", "10.0.0.02"], 1), "skypilot")
    assert str(caught.value) == (
        "SKYPILOT_NODE_IPS='10.0.0.1\\n10.0.0.02': expected one host per entry: entry 2 "
        "('10.0.0.02'): a host name or an IPv4 address (four numbers 0-255); " + SKY_FIX)


def test_skypilot_on_its_slurm_backend_composes_with_the_slurm_step() -> None:
    """SkyPilot's Slurm backend (task_codegen.py ``SlurmCodeGen``: SKYPILOT_NODE_RANK =
    $SLURM_PROCID in an srun of one task per node): a recorded step task plus SkyPilot's
    variables: the innermost source (the step) gives the nodes; SkyPilot's are shadowed."""
    from pathlib import Path

    from derive_env.cli.envfile import parse_env_file

    path = Path(__file__).parents[1] / "fixtures/recorded/sbatch-3node/step-task1.env"
    step = parse_env_file(path.read_text(encoding="utf-8"), str(path))
    env = {**step, **skypilot_node(["198.18.0.10", "198.18.0.11", "198.18.0.12"],
                                   int(step["SLURM_PROCID"]), gpus=0)}
    derivation = derive(env, {PREFIX + "frameworks": "pytorch"})
    assert derivation is not None
    topology = derivation.topology
    assert (topology.source, topology.num_nodes, topology.node_rank) == ("slurm-step", 3, 1)
    assert "shadowed: skypilot: an inner source states its facts" in topology.layers


# ------------------------------------------------ dstack's MPI hostfile (executor.go)

#: executor_test.go ``TestWriteMpiHostfile``, ``heterogeneous_slots``: IPs 10.0.0.1-3 with
#: GPUs 8, 4, 0 give exactly this text (writeMpiHostfile: ``<ip>`` alone for 0 GPUs).
HETERO = "10.0.0.1 slots=8\n10.0.0.2 slots=4\n10.0.0.3\n"
HETERO_IPS = ["10.0.0.1", "10.0.0.2", "10.0.0.3"]


def dstack_with_hostfile(rank: int, gpus: int, text: str | None,
                         path: str = "/dstack/mpi/hostfile") -> Report:
    environ = {**dstack_node(HETERO_IPS, rank, gpus), "DSTACK_MPI_HOSTFILE": path,
               "DSTACK_GPUS_NUM": "12"}
    assert launchtools.files_needed(environ, "dstack") == (path,)
    return launchtools.read(environ, BY_NAME["dstack"], {path: text})


def test_dstack_hostfile_tells_uneven_gpus_and_checks_this_nodes_count() -> None:
    report = dstack_with_hostfile(1, 4, HETERO)
    assert report.gpus == 4
    assert report.inputs["gpus"] == ("DSTACK_GPUS_PER_NODE", "DSTACK_MPI_HOSTFILE")
    assert ("GPUs per node, from DSTACK_MPI_HOSTFILE: 8, 4, 0 (uneven: each node starts its "
            "own count of processes)") in report.notes
    # the CPU node of the same job: 0 GPUs is its line without slots, not an error
    cpu = dstack_with_hostfile(2, 0, HETERO)
    assert cpu.gpus is None and cpu.node_rank == 2
    with pytest.raises(TopologyError) as info:
        dstack_with_hostfile(1, 8, HETERO)
    assert str(info.value) == (
        "DSTACK_GPUS_PER_NODE='8': expected this node's slots in DSTACK_MPI_HOSTFILE "
        "(/dstack/mpi/hostfile, line 2: 4): dstack writes both from this node's GPUs; "
        + DSTACK_FIX)


def test_dstack_hostfile_must_list_the_same_ips_in_order() -> None:
    swapped = "10.0.0.2 slots=4\n10.0.0.1 slots=8\n10.0.0.3\n"
    with pytest.raises(TopologyError) as info:
        dstack_with_hostfile(0, 8, swapped)
    assert str(info.value) == (
        f"DSTACK_MPI_HOSTFILE (/dstack/mpi/hostfile)={swapped!r}: expected the IPs of "
        "DSTACK_NODES_IPS in its order, one line each (10.0.0.1, 10.0.0.2, 10.0.0.3): "
        "dstack's runner writes both from one list; " + DSTACK_FIX)
    with pytest.raises(TopologyError) as info:
        dstack_with_hostfile(0, 8, "10.0.0.1 slots=eight\n10.0.0.2 slots=4\n10.0.0.3\n")
    assert str(info.value) == (
        "DSTACK_MPI_HOSTFILE (/dstack/mpi/hostfile) line 1='10.0.0.1 slots=eight': expected "
        "'<ip> slots=<GPUs>' or '<ip>' (executor.go writeMpiHostfile); " + DSTACK_FIX)


def test_dstack_hostfile_unreadable_or_even_is_only_a_note() -> None:
    report = dstack_with_hostfile(0, 8, None)
    assert report.inputs["gpus"] == ("DSTACK_GPUS_PER_NODE",)
    assert ("DSTACK_MPI_HOSTFILE='/dstack/mpi/hostfile' is not readable here: every node's GPU "
            "count is not known (only this node's)") in report.notes
    even = dstack_with_hostfile(0, 8, "10.0.0.1 slots=8\n10.0.0.2 slots=8\n10.0.0.3 slots=8\n")
    assert not any("uneven" in note for note in even.notes)
    assert launchtools.files_needed({"DSTACK_MPI_HOSTFILE": "/x"}, "skypilot") == ()


# -- SkyPilot on Slurm: the job's IPs, the step's count (sky/skylet/executor/slurm.py) -------

def slurm_task(job: list[str], step: list[str], rank: int, step_vars: bool) -> dict:
    """A task of SkyPilot's Slurm executor (``srun --ntasks-per-node=1 ... -m
    sky.skylet.executor.slurm``): ``SKYPILOT_NODE_IPS`` from the job's hosts
    (``_get_job_node_ips``: SLURM_JOB_NODELIST), ``SKYPILOT_NUM_NODES`` = SLURM_NNODES (the
    step's), ``SKYPILOT_NODE_RANK`` = SLURM_PROCID; ``step_vars`` False: a release whose
    executor unsets the step-scoped SLURM_* before the run commands
    (``UNSET_STEP_SCOPED_SLURM_ENV``)."""
    ip = {host: f"10.0.1.{number}" for number, host in enumerate(job, 11)}
    env = {"SLURM_JOB_ID": "31", "SLURM_JOBID": "31", "SLURM_JOB_NODELIST": ",".join(job),
           "SLURM_NODELIST": ",".join(job), "SLURM_JOB_NUM_NODES": str(len(job)),
           "SLURM_NNODES": str(len(step)), "SLURMD_NODENAME": step[rank],
           "SKYPILOT_NODE_IPS": "\n".join(ip[h] for h in job), "SKYPILOT_NODE_RANK": str(rank),
           "SKYPILOT_NUM_NODES": str(len(step)), "SKYPILOT_TASK_ID": "sky-2026-12-05_c_3",
           "SKYPILOT_NUM_GPUS_PER_NODE": "8"}
    if step_vars:
        env.update(SLURM_STEP_ID="3", SLURM_STEPID="3", SLURM_STEP_NODELIST=",".join(step),
                   SLURM_STEP_NUM_NODES=str(len(step)), SLURM_STEP_NUM_TASKS=str(len(step)),
                   SLURM_STEP_TASKS_PER_NODE=f"1(x{len(step)})", SLURM_PROCID=str(rank),
                   SLURM_LOCALID="0", SLURM_NODEID=str(rank), SLURM_NTASKS=str(len(step)),
                   SLURM_TASKS_PER_NODE=f"1(x{len(step)})")
    return env


JOB = ["gpu-01", "gpu-02", "gpu-03", "gpu-04"]


@pytest.mark.parametrize("step_vars", [True, False])
def test_skypilot_on_slurm_a_task_on_every_node_of_the_job(step_vars: bool) -> None:
    """The IP list is the task's nodes: one job, node rank = SLURM_PROCID. Before, without
    the step variables: refused as a batch script ("SLURM_JOB_NUM_NODES='4': expected 1
    here: a batch script or salloc shell runs on one node")."""
    got = []
    for rank in range(4):
        derivation = derive(slurm_task(JOB, JOB, rank, step_vars), {PREFIX + "frameworks":
                                                                     "pytorch"})
        values = {v.name: v.value for v in derivation.variables}
        got.append((values["NODE_RANK"], values["MASTER_ADDR"], values["PET_NNODES"]))
    master = "gpu-01" if step_vars else "10.0.1.11"  # the step's host names, or the IPs
    assert got == [(str(r), master, "4") for r in range(4)]


def test_skypilot_on_slurm_a_task_on_part_of_the_job_takes_the_steps_hosts() -> None:
    """A 2-node task on a 4-node SkyPilot cluster: the IP list is the job's 4, the count the
    step's 2. Before: "SKYPILOT_NUM_NODES='2': expected the number of lines of
    SKYPILOT_NODE_IPS (4): both count the task's nodes; ... do not set it"."""
    step = ["gpu-03", "gpu-04"]
    got = []
    for rank in range(2):
        env = slurm_task(JOB, step, rank, step_vars=True)
        derivation = derive(env, {PREFIX + "frameworks": "pytorch"})
        values = {v.name: v.value for v in derivation.variables}
        got.append((values["NODE_RANK"], values["MASTER_ADDR"], values["PET_NNODES"]))
    assert got == [("0", "gpu-03", "2"), ("1", "gpu-03", "2")]
    report = read(slurm_task(JOB, step, 1, step_vars=True), "skypilot")
    assert (report.nodes, report.num_nodes, report.node_rank) == ((), 2, 1)


def test_skypilot_on_slurm_part_of_the_job_without_step_variables_asks_for_the_master() -> None:
    """Without the step's host list nothing says which IP is node 0's (SkyPilot's own
    ``head -n1`` would name gpu-01, which runs no task): refused, naming what to set."""
    with pytest.raises(TopologyError) as info:
        derive(slurm_task(JOB, ["gpu-03", "gpu-04"], 0, step_vars=False),
               {PREFIX + "frameworks": "pytorch"})
    assert str(info.value) == (
        "MASTER_ADDR='': expected the host of rank 0 (it also gives JAX's coordinator): a "
        "SkyPilot task states no host list, so the host of rank 0 is unknown: set MASTER_ADDR "
        "to it (the same value for every process, e.g. sky launch --env MASTER_ADDR=<host of "
        "rank 0>), or run the launcher inside a job whose manager states the hosts (Slurm, "
        "PBS, LSF, Grid Engine)")


def test_skypilot_on_slurm_more_nodes_than_the_jobs_list_is_refused_with_the_reason() -> None:
    env = {**slurm_task(JOB, JOB, 0, step_vars=False), "SKYPILOT_NUM_NODES": "5"}
    with pytest.raises(TopologyError) as info:
        read(env, "skypilot")
    assert str(info.value) == (
        "SKYPILOT_NUM_NODES='5': expected the number of lines of SKYPILOT_NODE_IPS (4): on "
        "Slurm SkyPilot lists the job's nodes (SLURM_JOB_NODELIST) and counts the task's "
        f"(SLURM_NNODES), never more; {SKY_FIX}")
