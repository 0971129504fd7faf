"""sources/managers/mpi_operator.py: a Kubeflow MPIJob's launcher (refused) and the ranks its mpirun
starts (nodes from the hostfile, master = its first host).

No Kubernetes here: the launcher's variables and the hostfile are TYPED from the
controllers' code and tests (cited per fixture).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from derive_env.digest import digest_of, facts_of
from derive_env.errors import TopologyError
from derive_env.pipeline import derive
from derive_env.sources import BY_NAME, seen_sources
from derive_env.sources.managers import mpi_operator
from derive_env.sources.report import Report

PATH = "/etc/mpi/hostfile"
LABELS = {"ai.backend.distributed.frameworks": "pytorch,jax"}
#: kubeflow/mpi-operator pkg/controller/mpi_job_controller_test.go
#: (TestNewConfigMap, "OpenMPI without slots, enable launcher as worker"): the launcher
#: first, then the workers, ``<pod>.<job>.<ns>.svc slots=<n>``.
OPERATOR_HOSTFILE = (
    "openmpi-without-slots-launcher.openmpi-without-slots.tenant-a.svc slots=1\n"
    "openmpi-without-slots-worker-0.openmpi-without-slots.tenant-a.svc slots=1\n"
    "openmpi-without-slots-worker-1.openmpi-without-slots.tenant-a.svc slots=1\n")
#: kubeflow/trainer pkg/runtime/framework/plugins/mpi/mpi_test.go (TestMPI: numProcPerNode
#: 2, the launcher not a node): ``<trainjob>-node-<ps>-<i>.<trainjob> slots=<n>``.
TRAINER_HOSTFILE = "trainJob-node-1-0.trainJob slots=2\ntrainJob-node-1-1.trainJob slots=2\n"
#: mpi_job_controller.go newConfigMap, Intel MPI and MPICH: ``<host>:<slots>``.
INTEL_HOSTFILE = "j-worker-0.j.ns.svc:4\nj-worker-1.j.ns.svc:4\n"


def launcher() -> dict[str, str]:
    """The launcher pod's variables: mpi_job_controller.go ``launcherEnvVars`` +
    ``ompiEnvVars`` (and ``OMPI_MCA_orte_set_default_slots``), trainer mpi.go
    ``EnforceMLPolicy`` (the same four OMPI_MCA_*)."""
    return {"K_MPI_JOB_ROLE": "launcher", "OMPI_MCA_orte_keep_fqdn_hostnames": "true",
            "OMPI_MCA_orte_default_hostfile": PATH,
            "OMPI_MCA_plm_rsh_args": "-o ConnectionAttempts=10",
            "OMPI_MCA_orte_set_default_slots": "1", "KUBERNETES_SERVICE_HOST": "10.96.0.1"}


def rank(world: int, r: int, per_node: int = 1, passed: bool = True) -> dict[str, str]:
    """A rank the launcher's ``mpirun -x K_MPI_JOB_ROLE -x OMPI_MCA_orte_default_hostfile``
    started over ssh: Open MPI's four OMPI_COMM_WORLD_* (open-mpi docs, "Environment
    variables set for MPI applications") and only the two variables passed."""
    env = {"OMPI_COMM_WORLD_SIZE": str(world), "OMPI_COMM_WORLD_RANK": str(r),
           "OMPI_COMM_WORLD_LOCAL_RANK": str(r % per_node),
           "OMPI_COMM_WORLD_LOCAL_SIZE": str(per_node)}
    if passed:
        env.update(K_MPI_JOB_ROLE="launcher", OMPI_MCA_orte_default_hostfile=PATH)
    return env


def files(text: str | None):
    return lambda paths: {path: text for path in paths}


def read(environ: dict[str, str], text: str | None) -> Report:
    return mpi_operator.read(environ, BY_NAME["mpi-operator-launcher"],
                             {PATH: text} if environ.get("OMPI_COMM_WORLD_SIZE") else None)


def test_the_launcher_process_is_refused_naming_the_fix() -> None:
    with pytest.raises(TopologyError) as err:
        derive(launcher(), LABELS, files=files(OPERATOR_HOSTFILE))
    assert (str(err.value), err.value.exit_code) == (
        "K_MPI_JOB_ROLE='launcher': expected a rank mpirun started (OMPI_COMM_WORLD_SIZE set) "
        "or unset: a Kubeflow MPIJob launcher runs mpirun, which starts the ranks (on the "
        "workers), and this process is not one of them. Run derive-env in the command mpirun "
        "starts (mpirun ... derive-env -- python train.py), not around mpirun; or set label "
        "ai.backend.distributed.on-error=warn to run the command with the environment "
        "unchanged", 3)


@pytest.mark.parametrize(("text", "first", "count"), [
    (OPERATOR_HOSTFILE, "openmpi-without-slots-launcher.openmpi-without-slots.tenant-a.svc", 3),
    (TRAINER_HOSTFILE, "trainJob-node-1-0.trainJob", 2),
    (INTEL_HOSTFILE, "j-worker-0.j.ns.svc", 2),
])
def test_a_rank_takes_the_hostfiles_first_host_for_master(text: str, first: str,
                                                          count: int) -> None:
    env = rank(count * 2, 3, per_node=2)
    assert [s.name for s in seen_sources(env)] == ["openmpi", "mpi-operator-launcher"]
    derivation = derive(env, LABELS, files=files(text))
    topology = derivation.topology
    assert (topology.source, topology.num_nodes, topology.nodes[0].host) == (
        "mpi-operator-launcher", count, first)
    changes = derivation.changes()
    assert (changes["MASTER_ADDR"], changes["RANK"], changes["WORLD_SIZE"]) == (
        first, "3", str(count * 2))
    assert changes["JAX_COORDINATOR_ADDRESS"].startswith(first + ":")
    assert topology.per_process and topology.node_rank is None


def test_an_unreadable_hostfile_is_refused_with_both_fixes() -> None:
    with pytest.raises(TopologyError) as err:
        derive(rank(4, 1), LABELS, files=files(None))
    assert str(err.value) == (
        "OMPI_MCA_orte_default_hostfile='/etc/mpi/hostfile': expected a hostfile this rank can "
        "read (the mpi-operator mounts it on the launcher only; the first host is rank 0's): "
        "mount the MPIJob's hostfile ConfigMap on the workers too (in the Worker template: a "
        "volume from ConfigMap <job>-config, items hostfile, mounted at /etc/mpi), or pass the "
        "master to every rank: mpirun -x MASTER_ADDR=$(head -n1 /etc/mpi/hostfile | cut -d' ' "
        "-f1) ...")


def test_a_rank_given_master_addr_needs_no_hostfile() -> None:
    env = {**rank(4, 1), "MASTER_ADDR": "j-worker-0.j.ns.svc"}
    changes = derive(env, LABELS, files=files(None)).changes()
    assert changes["JAX_COORDINATOR_ADDRESS"].startswith("j-worker-0.j.ns.svc:")
    assert "MASTER_ADDR" not in changes  # the user's, kept


def test_a_rank_without_the_launchers_variables_keeps_the_old_refusal() -> None:
    """Ranks see none of the worker pod's env (sshd): without -x nothing proves the file."""
    with pytest.raises(TopologyError, match=r"^MASTER_ADDR='': expected the host of rank 0"):
        derive(rank(4, 1, passed=False), LABELS, files=files(OPERATOR_HOSTFILE))


@pytest.mark.parametrize(("text", "message"), [
    ("", "/etc/mpi/hostfile='': expected lines '<host> slots=<n>' (mpi_job_controller.go "
         "newConfigMap; none found); "),
    ("a b slots=1\n-bad slots=1\n", "/etc/mpi/hostfile='a,-bad': expected lines '<host> "
     "slots=<n>' (mpi_job_controller.go newConfigMap; "),
])
def test_a_malformed_hostfile_is_an_error(text: str, message: str) -> None:
    with pytest.raises(TopologyError) as err:
        read(rank(2, 1), text)
    assert str(err.value).startswith(message)


def test_hosts_of_skips_comments_and_reads_both_formats() -> None:
    assert mpi_operator.hosts_of("# c\n\na.svc slots=2 # x\nb.svc:4\n[::1]\n") == [
        "a.svc", "b.svc", "[::1]"]


@settings(max_examples=60, deadline=None)
@given(hosts=st.integers(2, 16), per_node=st.integers(1, 4))
def test_every_rank_derives_one_job(hosts: int, per_node: int) -> None:
    text = "".join(f"j-worker-{i}.j.ns.svc slots={per_node}\n" for i in range(hosts))
    world = hosts * per_node
    derived = [derive(rank(world, r, per_node), LABELS, files=files(text))
               for r in range(world)]
    assert {d.changes()["MASTER_ADDR"] for d in derived} == {"j-worker-0.j.ns.svc"}
    assert [d.changes()["RANK"] for d in derived] == [str(r) for r in range(world)]
    assert len({digest_of(facts_of(d.topology, d)) for d in derived}) == 1


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=80), role=st.text(min_size=1, max_size=8))
def test_arbitrary_hostfile_gives_a_report_or_a_topology_error(text: str, role: str) -> None:
    env = {**rank(2, 1), "K_MPI_JOB_ROLE": role}
    try:
        report = read(env, text)
    except TopologyError as exc:
        assert str(exc).startswith(("/etc/mpi/hostfile=", "OMPI_MCA_orte_default_hostfile="))
        return
    assert report.nodes and report.job is not None


#: kubeflow/mpi-operator pkg/apis/kubeflow/v2beta1/types.go, the JSON tags of MPIJobSpec.
MPIJOB_SPEC = {"slotsPerWorker", "runLauncherAsWorker", "runPolicy", "mpiReplicaSpecs",
               "sshAuthMountPath", "launcherCreationPolicy", "mpiImplementation"}


def test_the_docs_manifest_names_only_the_apis_fields() -> None:
    from support.k8s import manifest

    job = manifest("MPIJob", page="kubeflow.md")
    spec = job["spec"]
    assert set(spec) <= MPIJOB_SPEC
    assert set(spec["mpiReplicaSpecs"]) == {"Launcher", "Worker"}
    command = spec["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0][
        "command"]
    assert command[:5] == ["mpirun", "-x", "K_MPI_JOB_ROLE", "-x", mpi_operator.HOSTFILE]
    worker = spec["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    # mpi_job_controller.go: the ConfigMap <job> + configSuffix "-config", key hostfileName
    # "hostfile", mounted at configMountPath "/etc/mpi" (on the launcher)
    volume = worker["volumes"][0]
    assert volume["configMap"] == {"name": job["metadata"]["name"] + "-config",
                                   "items": [{"key": "hostfile", "path": "hostfile"}]}
    assert worker["containers"][0]["volumeMounts"] == [{"name": volume["name"],
                                                        "mountPath": "/etc/mpi"}]


def intel_rank(world: int, r: int) -> dict[str, str]:
    """An Intel MPI rank of an MPIJob (mpiImplementation: Intel): mpi_job_controller.go
    ``intelEnvVars`` on the launcher, which mpiexec.hydra copies into every rank with
    Hydra's PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS (pmip_cb.c launch_procs)."""
    return {"K_MPI_JOB_ROLE": "launcher", "I_MPI_HYDRA_HOST_FILE": PATH,
            "I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS": "-o ConnectionAttempts=10",
            "PMI_RANK": str(r), "PMI_SIZE": str(world), "MPI_LOCALRANKID": str(r % 4),
            "MPI_LOCALNRANKS": "4"}


def test_an_intel_mpi_rank_reads_the_hostfile_too() -> None:
    derivation = derive(intel_rank(8, 5), LABELS, files=files(INTEL_HOSTFILE))
    assert [s.name for s in seen_sources(intel_rank(8, 5))] == ["hydra",
                                                                "mpi-operator-launcher"]
    assert (derivation.changes()["MASTER_ADDR"], derivation.changes()["RANK"]) == (
        "j-worker-0.j.ns.svc", "5")


def test_an_intel_mpi_launcher_is_refused_not_a_single_container() -> None:
    """Before: K_MPI_JOB_ROLE beside I_MPI_HYDRA_HOST_FILE matched no line (single container)."""
    env = {k: v for k, v in intel_rank(8, 0).items() if not k.startswith(("PMI_", "MPI_"))}
    with pytest.raises(TopologyError, match=r"^K_MPI_JOB_ROLE='launcher': expected a rank "):
        derive(env, LABELS, files=files(INTEL_HOSTFILE))


def test_a_worker_pods_own_process_is_no_job() -> None:
    """K_MPI_JOB_ROLE=worker (newWorker: the worker pod's only variable): sshd's container."""
    topology = derive({"K_MPI_JOB_ROLE": "worker"}, LABELS).topology
    assert (topology.num_nodes, topology.multi_node) == (1, False)
