"""Host lists for launchers (issue 6, item 5): ``--dry-run --format hosts`` and the hostfiles.

Exact output of every format for the README's 3-container session (docker/env/*.env, the
variables recorded as Backend.AI sets them, HOSTS not in canonical order), the slot count
from the label or the GPU count, the single-container session, the errors; then the same
through the command line; then the real launchers: Open MPI's ``mpirun`` and MPICH's
``mpiexec`` started on a hostfile derive-env printed start exactly N processes (no SSH:
the single host is ``localhost``). Under ``CI=true`` a missing launcher FAILS the test.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest
from click.testing import CliRunner

from derive_env import render
from derive_env.cli.command import cli
from derive_env.cli.envfile import parse_env_file
from derive_env.errors import LabelError, TopologyError
from derive_env.pipeline import host_list
from derive_env.render.hostfiles import HOST_FORMATS, render_hosts
from derive_env.topology import ClusterTopology, Inputs, Node
from helpers import console_script, require

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"
SERVICES = ("main1", "sub1", "sub2")
PREFIX = "ai.backend.distributed."
FW = PREFIX + "frameworks"
NPROC = PREFIX + "nproc-per-node"
ON_ERROR = PREFIX + "on-error"
OPTED_IN = {FW: "pytorch"}
WITH_NPROC = {FW: "pytorch", NPROC: "2"}

#: The expected outputs for the 3-node session with N=2, written out by hand.
THREE_NODES_N2 = {
    "hosts": "main1\nsub1\nsub2\n",
    "openmpi-hostfile": "main1 slots=2\nsub1 slots=2\nsub2 slots=2\n",
    "mpich-hostfile": "main1:2\nsub1:2\nsub2:2\n",
    "deepspeed-hostfile": "main1 slots=2\nsub1 slots=2\nsub2 slots=2\n",
    "horovod-hosts": "main1:2,sub1:2,sub2:2\n",
}
SLOT_FORMATS = tuple(f for f in HOST_FORMATS if f != "hosts")

NO_N_OPTED_IN = (
    "--format {fmt} needs the number of processes per node: set the label "
    "ai.backend.distributed.nproc-per-node (for example --label "
    "ai.backend.distributed.nproc-per-node=2, or DERIVE_ENV_NPROC_PER_NODE=2 for the job); "
    "the GPU count cannot stand in for it ({gpus})"
)
NO_N_NOT_OPTED_IN = (
    "--format {fmt} needs the number of processes per node, and the GPU count cannot give it "
    "({gpus}); derive-env is not opted in (ai.backend.distributed.frameworks is not set: "
    "--frameworks, DERIVE_ENV_FRAMEWORKS or the image's label), so "
    "ai.backend.distributed.nproc-per-node cannot give it either: opt in and set "
    "ai.backend.distributed.nproc-per-node, or use --format hosts and give the launcher the "
    "process count yourself"
)
NO_GPU_COUNT = "the cluster manager gave no GPU count"


def session_env(service: str, **extra: str) -> dict[str, str]:
    """The recorded Backend.AI variables of one container of the README's session."""
    path = REPO / "docker" / "env" / f"{service}.env"
    return {**parse_env_file(path.read_text(encoding="utf-8"), str(path)), **extra}


def host_list_for(environ: Mapping[str, str], labels: Mapping[str, str], fmt: str) -> str:
    """What the command line prints for ``--format fmt``: the pipeline's host list, printed."""
    topology, nproc, opted_in = host_list(Inputs(environ, labels))
    return render_hosts(topology, fmt, nproc, opted_in=opted_in)


def topology_of(*hosts: str, gpus: int | None = None) -> ClusterTopology:
    return ClusterTopology(
        source="test", nodes=tuple(Node(h) for h in hosts), node_rank=0, gpus_per_node=gpus,
        inputs={"nodes": ("TEST_HOSTS",), "gpus": ("TEST_GPUS",)},
    )


# ------------------------------------------------------------------ the formats, pure


def test_host_formats_are_format_choices() -> None:
    assert HOST_FORMATS == (
        "hosts", "openmpi-hostfile", "mpich-hostfile", "deepspeed-hostfile", "horovod-hosts",
    )
    assert render.FORMATS[4:4 + len(HOST_FORMATS)] == HOST_FORMATS


@pytest.mark.parametrize("fmt", HOST_FORMATS)
@pytest.mark.parametrize("service", SERVICES)
def test_three_node_session_every_container_prints_the_same(service: str, fmt: str) -> None:
    """HOSTS is sub2,sub1,main1: the list is in canonical order, master first, and every
    container of the session prints the same text."""
    assert host_list_for(session_env(service), WITH_NPROC, fmt) == THREE_NODES_N2[fmt]


@pytest.mark.parametrize("fmt", SLOT_FORMATS)
def test_gpu_count_gives_n_without_the_label(fmt: str) -> None:
    four = {
        "openmpi-hostfile": "main1 slots=4\nsub1 slots=4\nsub2 slots=4\n",
        "mpich-hostfile": "main1:4\nsub1:4\nsub2:4\n",
        "deepspeed-hostfile": "main1 slots=4\nsub1 slots=4\nsub2 slots=4\n",
        "horovod-hosts": "main1:4,sub1:4,sub2:4\n",
    }
    assert host_list_for(session_env("sub2", GPU_COUNT="4"), OPTED_IN, fmt) == four[fmt]


def test_label_wins_over_gpu_count() -> None:
    env = session_env("main1", GPU_COUNT="8", N_GPUS="8")
    assert host_list_for(env, {FW: "pytorch", NPROC: "3"}, "openmpi-hostfile") == (
        "main1 slots=3\nsub1 slots=3\nsub2 slots=3\n"
    )


def test_n_gpus_alone_gives_n() -> None:
    assert host_list_for(session_env("sub1", N_GPUS="1"), OPTED_IN, "horovod-hosts") == (
        "main1:1,sub1:1,sub2:1\n"
    )


@pytest.mark.parametrize(
    "env",
    [
        {},
        {"BACKENDAI_CLUSTER_SIZE": "1", "BACKENDAI_CLUSTER_HOSTS": "main1",
         "BACKENDAI_CLUSTER_HOST": "main1", "BACKENDAI_CLUSTER_ROLE": "main",
         "BACKENDAI_CLUSTER_IDX": "1", "BACKENDAI_CLUSTER_LOCAL_RANK": "0"},
    ],
    ids=["no-cluster-variables", "backendai-size-1"],
)
def test_single_container_lists_localhost(env: dict[str, str]) -> None:
    env = {**env, "GPU_COUNT": "2"}
    assert [host_list_for(env, OPTED_IN, fmt) for fmt in HOST_FORMATS] == [
        "localhost\n", "localhost slots=2\n", "localhost:2\n", "localhost slots=2\n",
        "localhost:2\n",
    ]


def test_not_opted_in_image_gets_host_lists_from_the_gpu_count() -> None:
    """The formats set nothing, so an image that did not opt in gets them too."""
    env = session_env("sub1", GPU_COUNT="2")
    assert {fmt: host_list_for(env, {}, fmt) for fmt in HOST_FORMATS} == THREE_NODES_N2


def test_hosts_needs_no_n() -> None:
    assert host_list_for(session_env("main1"), {}, "hosts") == "main1\nsub1\nsub2\n"
    assert host_list_for(session_env("main1", GPU_COUNT="0"), OPTED_IN, "hosts") == (
        "main1\nsub1\nsub2\n"
    )


@pytest.mark.parametrize("fmt", SLOT_FORMATS)
def test_no_n_opted_in_is_a_label_error(fmt: str) -> None:
    with pytest.raises(LabelError) as info:
        host_list_for(session_env("main1"), OPTED_IN, fmt)
    assert str(info.value) == NO_N_OPTED_IN.format(fmt=fmt, gpus=NO_GPU_COUNT)
    assert info.value.exit_code == 4


def test_no_n_with_gpu_count_zero_names_the_variable() -> None:
    with pytest.raises(LabelError) as info:
        host_list_for(session_env("main1", GPU_COUNT="0"), OPTED_IN, "mpich-hostfile")
    assert str(info.value) == NO_N_OPTED_IN.format(fmt="mpich-hostfile", gpus="GPU_COUNT is 0")


def test_no_n_not_opted_in_says_to_opt_in() -> None:
    with pytest.raises(LabelError) as info:
        host_list_for(session_env("main1", N_GPUS="0"), {}, "deepspeed-hostfile")
    assert str(info.value) == NO_N_NOT_OPTED_IN.format(
        fmt="deepspeed-hostfile", gpus="N_GPUS is 0"
    )


def test_bad_label_of_an_opted_in_image_is_refused() -> None:
    with pytest.raises(LabelError) as info:
        host_list_for(session_env("main1"), {FW: "pytorch", NPROC: "0"}, "hosts")
    assert str(info.value) == (
        "label ai.backend.distributed.nproc-per-node='0': expected an integer >= 1"
    )


def test_bad_topology_is_refused() -> None:
    env = session_env("main1", BACKENDAI_CLUSTER_SIZE="4")
    with pytest.raises(TopologyError) as info:
        host_list_for(env, WITH_NPROC, "openmpi-hostfile")
    assert str(info.value) == (
        "BACKENDAI_CLUSTER_REPLICAS='main:1,sub:2': expected counts adding up to "
        "BACKENDAI_CLUSTER_SIZE=4; they add up to 3"
    )


IPV6_REASONS = {
    "openmpi-hostfile": "Open MPI's mpirun accepts only node names of letters, digits, '.' "
                        "and '-'",
    "mpich-hostfile": "MPICH's and Intel MPI's Hydra cut each host:N line at the first ':'",
    "deepspeed-hostfile": "DeepSpeed splits host:slots at ':' (--include/--exclude) and hands "
                          "the hosts to mpirun",
    "horovod-hosts": "horovodrun -H takes only host:N entries with host of [A-Za-z0-9_.-]",
}


@pytest.mark.parametrize("fmt", SLOT_FORMATS)
def test_ipv6_hosts_are_refused_by_the_hostfiles(fmt: str) -> None:
    topology = topology_of("10.0.0.1", "2001:db8::2", gpus=2)
    with pytest.raises(TopologyError) as info:
        render_hosts(topology, fmt, None)
    assert str(info.value) == (
        f"--format {fmt}: node 2001:db8::2 (node rank 1, from TEST_HOSTS) is an IPv6 "
        f"address, and {IPV6_REASONS[fmt]}; give the nodes host names, or use "
        "--format hosts"
    )
    assert info.value.exit_code == 3


def test_ipv6_hosts_are_listed_by_hosts_and_ipv4_everywhere() -> None:
    assert render_hosts(topology_of("10.0.0.1", "2001:db8::2"), "hosts", None) == (
        "10.0.0.1\n2001:db8::2\n"
    )
    assert render_hosts(topology_of("10.0.0.1", "10.0.0.2"), "horovod-hosts", 4) == (
        "10.0.0.1:4,10.0.0.2:4\n"
    )


def test_single_ipv6_container_is_localhost() -> None:
    assert render_hosts(topology_of("2001:db8::2"), "mpich-hostfile", 2) == "localhost:2\n"


def test_render_refuses_host_formats_and_unknown_ones() -> None:
    with pytest.raises(ValueError,
                       match=r"rendered by derive_env\.render\.hostfiles\.render_hosts"):
        render.render(None, "hosts")
    with pytest.raises(ValueError, match="unknown host format 'yaml'"):
        render_hosts(topology_of("main1"), "yaml", 2)


@pytest.mark.parametrize("module", ["derive_env.render", "derive_env.render.hostfiles"])
def test_host_formats_load_without_heavy_imports(module: str) -> None:
    """A fast dry-run path reads HOST_FORMATS (derive_env.render); the printing of the host
    lists is as light: neither may import pydantic, click or typing."""
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", f"import {module}"],
        capture_output=True, text=True, timeout=60, check=True,
    )
    imported = {line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines()
                if line.startswith("import time:")}
    assert module in imported
    assert {"pydantic", "pydantic_core", "click", "typing"} & imported == set()


# ------------------------------------------------------------------ the command line


def write_env(tmp_path: Path, env: Mapping[str, str], labels: str = "{}") -> Path:
    """An --env-file with ``env``, a secret, and its own (empty by default) labels file."""
    labels_file = tmp_path / "labels.json"
    labels_file.write_text(labels, encoding="utf-8")
    lines = [f"{k}={v}" for k, v in env.items()]
    lines += ["AWS_SECRET_ACCESS_KEY=s3cr3t-do-not-print", f"DERIVE_ENV_LABELS_FILE={labels_file}"]
    path = tmp_path / "node.env"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args), prog_name="derive-env")


@pytest.mark.parametrize("fmt", HOST_FORMATS)
def test_cli_prints_each_format(tmp_path: Path, fmt: str) -> None:
    env_file = write_env(tmp_path, session_env("sub2"))
    result = invoke("--dry-run", "--format", fmt, "--env-file", str(env_file),
                    "--label", f"{FW}=pytorch,tensorflow", "--label", f"{NPROC}=2")
    assert (result.exit_code, result.stdout, result.stderr) == (0, THREE_NODES_N2[fmt], "")


def test_cli_readme_env_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's line: the docker/env files as they are, labels from --label."""
    labels = tmp_path / "labels.json"
    labels.write_text("{}", encoding="utf-8")
    monkeypatch.setenv("DERIVE_ENV_LABELS_FILE", str(labels))  # not this machine's file
    outputs = {
        invoke("--dry-run", "--format", "openmpi-hostfile", "--env-file",
               str(REPO / "docker" / "env" / f"{s}.env"),
               "--label", f"{FW}=pytorch", "--label", f"{NPROC}=2").stdout
        for s in SERVICES
    }
    assert outputs == {THREE_NODES_N2["openmpi-hostfile"]}


def test_cli_no_n_exits_4_with_the_message(tmp_path: Path) -> None:
    env = session_env("main1", GPU_COUNT="0")
    env_file = write_env(tmp_path, env, labels=json.dumps({FW: "jax"}))
    result = invoke("--dry-run", "--format", "openmpi-hostfile", "--env-file", str(env_file))
    assert (result.exit_code, result.stdout) == (4, "")
    assert result.stderr == "derive-env: error: " + NO_N_OPTED_IN.format(
        fmt="openmpi-hostfile", gpus="GPU_COUNT is 0"
    ) + "\n"


def test_cli_on_error_warn_does_not_turn_a_missing_n_into_an_empty_list(tmp_path: Path) -> None:
    env_file = write_env(tmp_path, session_env("main1"))
    result = invoke("--dry-run", "--format", "horovod-hosts", "--env-file", str(env_file),
                    "--label", f"{FW}=pytorch", "--label", f"{ON_ERROR}=warn")
    assert (result.exit_code, result.stdout) == (4, "")
    assert result.stderr == "derive-env: error: " + NO_N_OPTED_IN.format(
        fmt="horovod-hosts", gpus=NO_GPU_COUNT
    ) + "\n"


def test_cli_stray_label_without_opt_in_stays_an_error(tmp_path: Path) -> None:
    env_file = write_env(tmp_path, session_env("main1", GPU_COUNT="2"))
    result = invoke("--dry-run", "--format", "hosts", "--env-file", str(env_file),
                    "--label", f"{NPROC}=2")
    assert (result.exit_code, result.stdout) == (4, "")
    assert result.stderr.startswith(
        "derive-env: error: label ai.backend.distributed.nproc-per-node='2' is set but "
        "ai.backend.distributed.frameworks is not, so the image did not opt in"
    )


def test_cli_stray_label_with_warn_warns_and_ignores_the_label(tmp_path: Path) -> None:
    """on-error=warn keeps the stray-label rule a warning; the list then uses the GPU count,
    not the label of an image that did not opt in."""
    env_file = write_env(tmp_path, session_env("main1", GPU_COUNT="2"))
    result = invoke("--dry-run", "--format", "mpich-hostfile", "--env-file", str(env_file),
                    "--label", f"{NPROC}=8", "--label", f"{ON_ERROR}=warn")
    assert (result.exit_code, result.stdout) == (0, THREE_NODES_N2["mpich-hostfile"])
    assert result.stderr.startswith("derive-env: warning: label ai.backend.distributed.")
    assert result.stderr.count("\n") == 1


def test_cli_bad_cluster_variables_exit_3(tmp_path: Path) -> None:
    env_file = write_env(tmp_path, session_env("main1", BACKENDAI_CLUSTER_LOCAL_RANK="7"))
    result = invoke("--dry-run", "--format", "hosts", "--env-file", str(env_file))
    assert (result.exit_code, result.stdout) == (3, "")
    assert result.stderr.startswith("derive-env: error: BACKENDAI_CLUSTER_LOCAL_RANK='7': ")


def test_console_script_prints_hosts_and_no_secret(tmp_path: Path) -> None:
    """The installed command, in a fresh process, from the real environment (no --env-file)."""
    labels = tmp_path / "labels.json"
    labels.write_text(json.dumps(WITH_NPROC), encoding="utf-8")
    env = {**session_env("sub1"), "PATH": os.environ["PATH"],
           "DERIVE_ENV_LABELS_FILE": str(labels), "SECRET": "s3cr3t-do-not-print"}
    result = subprocess.run(
        [console_script(), "--dry-run", "--format", "deepspeed-hostfile"], env=env,
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert (result.returncode, result.stdout, result.stderr) == (
        0, THREE_NODES_N2["deepspeed-hostfile"], ""
    )


# ------------------------------------------------------------------ the real launchers

#: Prints each process's rank: Open MPI sets OMPI_COMM_WORLD_RANK, Hydra sets PMI_RANK.
RANK_SCRIPT = 'echo "rank ${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-?}}"'


def hostfile_from_derive_env(tmp_path: Path, fmt: str, n: int) -> Path:
    """What ``derive-env --dry-run --format FMT`` prints in a single-container session."""
    labels = tmp_path / "labels.json"
    labels.write_text(json.dumps({FW: "pytorch", NPROC: str(n)}), encoding="utf-8")
    env = {"PATH": os.environ["PATH"], "DERIVE_ENV_LABELS_FILE": str(labels),
           "BACKENDAI_CLUSTER_SIZE": "1", "BACKENDAI_CLUSTER_HOST": "main1"}
    result = subprocess.run(
        [sys.executable, "-m", "derive_env", "--dry-run", "--format", fmt], env=env,
        capture_output=True, text=True, timeout=60, check=True,
    )
    path = tmp_path / f"{fmt}.txt"
    path.write_text(result.stdout, encoding="utf-8")
    return path


def run_launcher(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """The launcher's run; once more if it died of SIGPIPE before printing anything: MPICH's
    mpiexec (Hydra) on a loaded machine can lose its proxy's control pipe at start (seen on
    2 loaded cores), which says nothing about the hostfile derive-env wrote."""
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root")}
    for _ in range(2):
        result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120,
                                check=False, stdin=subprocess.DEVNULL)
        if not (result.returncode == -13 and not result.stdout):
            break
    return result


@pytest.mark.parametrize("n", [2, 3])
def test_open_mpi_starts_n_processes_from_the_hostfile(tmp_path: Path, n: int) -> None:
    """No -np: mpirun starts one process per slot of the hostfile. N=3 on a 2-core machine
    shows the slot count, not the core count, decides."""
    mpirun = shutil.which("mpirun.openmpi")
    require(mpirun is not None, "Open MPI's mpirun.openmpi is not installed (openmpi-bin)")
    hostfile = hostfile_from_derive_env(tmp_path, "openmpi-hostfile", n)
    assert hostfile.read_text() == f"localhost slots={n}\n"
    result = run_launcher([mpirun, "--hostfile", str(hostfile), "--allow-run-as-root",
                           "--oversubscribe", "sh", "-c", RANK_SCRIPT])
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.splitlines()) == [f"rank {r}" for r in range(n)]


@pytest.mark.parametrize("n", [2, 3])
def test_mpich_starts_n_processes_from_the_hostfile(tmp_path: Path, n: int) -> None:
    mpiexec = shutil.which("mpiexec.mpich")
    require(mpiexec is not None, "MPICH's mpiexec.mpich is not installed (mpich)")
    hostfile = hostfile_from_derive_env(tmp_path, "mpich-hostfile", n)
    assert hostfile.read_text() == f"localhost:{n}\n"
    result = run_launcher([mpiexec, "-f", str(hostfile), "sh", "-c", RANK_SCRIPT])
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.splitlines()) == [f"rank {r}" for r in range(n)]


def test_near_miss_label_is_reported_on_the_hostfile_path_too() -> None:
    """A misspelt prefix stops a hostfile dry run as it stops every other path (exit 4),
    instead of being dropped so that the GPU count silently gives the slots."""
    labels = {FW: "pytorch", "ai.backend.distibuted.nproc-per-node": "2"}
    with pytest.raises(LabelError) as info:
        host_list_for(session_env("main1", GPU_COUNT="8"), labels, "openmpi-hostfile")
    assert "ai.backend.distibuted.nproc-per-node" in str(info.value)
    assert "expected the key ai.backend.distributed.nproc-per-node" in str(info.value)


def test_user_set_pet_nproc_per_node_gives_the_slots() -> None:
    """torchrun starts the user's PET_NPROC_PER_NODE (the merge keeps it over the label):
    the slots of every hostfile say the same, so mpirun and torchrun agree."""
    environ = session_env("sub1", PET_NPROC_PER_NODE="3")
    assert host_list_for(environ, WITH_NPROC, "openmpi-hostfile") == (
        "main1 slots=3\nsub1 slots=3\nsub2 slots=3\n"
    )
    # Not an integer (torchrun's auto/gpu): the label gives N.
    environ = session_env("sub1", PET_NPROC_PER_NODE="auto")
    assert host_list_for(environ, WITH_NPROC, "mpich-hostfile") == "main1:2\nsub1:2\nsub2:2\n"


def test_a_slurm_step_gives_each_node_its_own_slot_count() -> None:
    """srun -N3 -n5 (recorded): SLURM_STEP_TASKS_PER_NODE=3,1(x2) are the slots."""
    from support.recorded import load_fixture

    _, env = load_fixture(TESTS / "fixtures/recorded/srun-uneven/task3.env")
    assert host_list_for(dict(env), {}, "horovod-hosts") == (
        "gpu-a100-09:3,gpu-a100-10:1,gpu-a100-11:1\n")
    assert host_list_for(dict(env), {}, "openmpi-hostfile") == (
        "gpu-a100-09 slots=3\ngpu-a100-10 slots=1\ngpu-a100-11 slots=1\n")
    opted = {"ai.backend.distributed.frameworks": "pytorch",
             "ai.backend.distributed.nproc-per-node": "4"}
    assert host_list_for(dict(env), opted, "horovod-hosts") == (  # the label still wins
        "gpu-a100-09:4,gpu-a100-10:4,gpu-a100-11:4\n")


def test_a_batch_script_of_several_nodes_prints_the_allocations_hosts() -> None:
    """deepspeed / horovodrun start from the batch script: the host list is the job's,
    although deriving for the script itself stops (only srun starts the other nodes)."""
    from support.recorded import load_fixture

    _, env = load_fixture(TESTS / "fixtures/recorded/sbatch-3node/batch.env")
    assert host_list_for(dict(env), {}, "hosts") == "gpu-a100-09\ngpu-a100-10\ngpu-a100-11\n"


def test_no_host_list_says_what_states_the_hosts_not_how_to_name_the_master() -> None:
    """mpirun over SSH states ranks only: a user-set MASTER_ADDR cannot make a host list."""
    environ = {"OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_RANK": "1",
               "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
               "MASTER_ADDR": "a"}
    with pytest.raises(TopologyError) as info:
        host_list_for(environ, {"ai.backend.distributed.frameworks": "pytorch"}, "hosts")
    assert str(info.value) == (
        "no host list to print: no source states the hosts of every node (openmpi states "
        "none): run it where a source states them (inside a Slurm allocation or a Backend.AI "
        "session)")
