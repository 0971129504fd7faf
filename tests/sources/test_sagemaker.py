"""SageMaker training (sources/managers/sagemaker.py): the platform's resourceconfig.json, or SM_*.

No SageMaker here: the resource configs are TYPED from the platform's documented shape as the
training toolkit reads it (aws/sagemaker-training-toolkit ``src/sagemaker_training/
environment.py``, ``Environment.__init__``: ``current_host``, ``hosts``, ``current_group_name``,
``instance_groups[{instance_group_name, instance_type, hosts}]``, ``network_interface_name``;
its unit tests' heterogeneous config, ``test/unit/test_environment.py``, has the same keys).
The ``SM_*`` are the toolkit's ``to_env_vars`` of that environment (``mapping.py``: ``SM_`` +
the key upper-cased, JSON for lists and dicts). The cross-check at the end builds the real
toolkit's ``Environment`` from the same files (``pip install sagemaker-training``).
"""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from derive_env.digest import digest_of, facts_of
from derive_env.errors import TopologyError
from derive_env.labels import PREFIX, session_labels
from derive_env.pipeline import derive
from derive_env.sources import BY_NAME, SAGEMAKER_CONFIG, seen_sources
from derive_env.sources.managers import sagemaker
from derive_env.topology import Node
from helpers import require

PLATFORM = {"TRAINING_JOB_NAME": "bert-2026-12-02", "TRAINING_JOB_ARN":
            "arn:aws:sagemaker:us-west-2:123456789012:training-job/bert-2026-12-02"}


def config(current: str, groups: dict[str, list[str]] | None = None,
           hosts: list[str] | None = None, group: str | None = None) -> str:
    """A resource config as the platform writes it (current_group_name, instance_groups in
    the job's group order; ``hosts`` = every group's, sorted: the toolkit's docstring)."""
    groups = groups if groups is not None else {"homogeneousCluster": ["algo-1", "algo-2"]}
    every = hosts if hosts is not None else sorted(h for g in groups.values() for h in g)
    owner = group or next((g for g, members in groups.items() if current in members),
                          "homogeneousCluster")
    return json.dumps({
        "current_host": current, "current_instance_type": "ml.p4d.24xlarge",
        "current_group_name": owner, "hosts": every,
        "instance_groups": [{"instance_group_name": g, "instance_type": "ml.p4d.24xlarge",
                             "hosts": members} for g, members in groups.items()],
        "network_interface_name": "eth0"})


HYPERPARAMETERS = "/opt/ml/input/config/hyperparameters.json"


def read(environ: dict[str, str], text: str | None, name: str = "sagemaker-platform",
         hyperparameters: dict[str, object] | None = None):
    """:func:`sagemaker.read` with the resource config ``text`` and the hyperparameters as
    the SDK writes them (each value JSON text: sagemaker-python-sdk ``estimator.py``)."""
    files = {SAGEMAKER_CONFIG: text, HYPERPARAMETERS: None if hyperparameters is None else
             json.dumps({k: json.dumps(v) for k, v in hyperparameters.items()})}
    return sagemaker.read(environ, BY_NAME[name], files)


HETERO = {"data": ["algo-1", "algo-4"], "train": ["algo-3", "algo-2"]}


def test_a_homogeneous_job_exactly() -> None:
    report = read({**PLATFORM, "SM_NUM_GPUS": "8"}, config("algo-2"))
    assert (report.nodes, report.node_rank, report.gpus, report.job, report.session_id) == (
        (Node("algo-1"), Node("algo-2")), 1, 8, ("sagemaker", "bert-2026-12-02", "algo-1"),
        "bert-2026-12-02")
    assert report.order == ("the distribution instance groups' hosts in file order (the "
                            "training toolkit's get_distribution_hosts)")
    assert report.inputs["nodes"] == (SAGEMAKER_CONFIG,)


def test_heterogeneous_the_current_groups_hosts_in_file_order() -> None:
    """Group ``train`` lists algo-3 before algo-2: its order, not sorted; master algo-3."""
    report = read(PLATFORM, config("algo-2", HETERO))
    assert (report.nodes, report.node_rank) == ((Node("algo-3"), Node("algo-2")), 1)
    assert report.notes == ("host algo-2 (current_host), group 'train'; distribution groups: "
                            "train (the current group)",)


def test_the_toolkits_distribution_groups_win() -> None:
    env = {**PLATFORM, "SM_DISTRIBUTION_INSTANCE_GROUPS": '["data", "train"]'}
    report = read(env, config("algo-2", HETERO), hyperparameters={sagemaker.KEY: ["train"]})
    assert [n.host for n in report.nodes] == ["algo-1", "algo-4", "algo-3", "algo-2"]


def test_the_distribution_groups_hyperparameter_names_the_groups() -> None:
    """At the ENTRYPOINT (before the toolkit ran): hyperparameters.json beside the file."""
    report = read(PLATFORM, config("algo-2", HETERO),
                  hyperparameters={sagemaker.KEY: ["data", "train"], "epochs": 3})
    assert [n.host for n in report.nodes] == ["algo-1", "algo-4", "algo-3", "algo-2"]
    assert report.notes[0].endswith(
        "distribution groups: data, train (hyperparameter sagemaker_distribution_instance_groups)")
    env = {**PLATFORM, sagemaker.CONFIG_VARIABLE: "/run/sm/resourceconfig.json"}
    assert sagemaker.files_needed(env, "sagemaker-platform") == (
        "/run/sm/resourceconfig.json", "/run/sm/hyperparameters.json")


def test_a_host_outside_the_distribution_groups_is_told_so() -> None:
    env = {**PLATFORM, "SM_DISTRIBUTION_INSTANCE_GROUPS": '["train"]'}
    with pytest.raises(TopologyError) as caught:
        read(env, config("algo-4", HETERO))
    assert str(caught.value) == (
        f"{SAGEMAKER_CONFIG}: current_host 'algo-4' is in instance group 'data', not in a "
        "distribution instance group (train): this host is not part of the training job; "
        + sagemaker._OUTSIDE_FIX)


def test_without_the_file_the_toolkits_sm_hosts_in_its_order() -> None:
    """SM_HOSTS as the toolkit gives it (never re-sorted); SM_CURRENT_HOST is this host."""
    env = {**PLATFORM, "SM_HOSTS": '["algo-2", "algo-1"]', "SM_CURRENT_HOST": "algo-1"}
    report = read(env, None)
    assert (report.nodes, report.node_rank) == ((Node("algo-2"), Node("algo-1")), 1)
    assert report.inputs["nodes"] == ("SM_HOSTS",)
    # The toolkit's variables alone (no platform variables): the sagemaker line.
    alone = {k: v for k, v in env.items() if not k.startswith("TRAINING_JOB")}
    assert [line.name for line in seen_sources(alone)] == ["sagemaker"]
    assert read(alone, None, "sagemaker").nodes == report.nodes


def test_neither_file_nor_sm_hosts_is_refused_with_the_fix() -> None:
    with pytest.raises(TopologyError) as caught:
        read(PLATFORM, None)
    assert str(caught.value) == (
        "TRAINING_JOB_ARN='arn:aws:sagemaker:us-west-2:123456789012:training-job/bert-2026-12-02"
        f"': expected SageMaker's resource config at {SAGEMAKER_CONFIG} (readable JSON; another "
        "path: DERIVE_ENV_SAGEMAKER_RESOURCE_CONFIG), or the training toolkit's SM_HOSTS and "
        "SM_CURRENT_HOST: TRAINING_JOB_ARN and TRAINING_JOB_NAME state a SageMaker training job, "
        "but neither is there, so the job's hosts are unknown; " + sagemaker._FIX)


@pytest.mark.parametrize(("text", "env", "message"), [
    (config("algo-9"), {}, f"{SAGEMAKER_CONFIG}: expected current_host to be one of hosts "
     '["algo-1", "algo-2"], got \'algo-9\'; ' + sagemaker._FIX),
    ("[]", {}, f"{SAGEMAKER_CONFIG}: expected a JSON object (SageMaker's resource config); "
     + sagemaker._FIX),
    (config("algo-1"), {"SM_CURRENT_HOST": "algo-2"},
     f"SM_CURRENT_HOST='algo-2': expected current_host of {SAGEMAKER_CONFIG} ('algo-1'): the "
     "training toolkit copies it; " + sagemaker._FIX),
    (config("algo-1", hosts=["algo-1", "algo-1"]), {},
     f"{SAGEMAKER_CONFIG}: expected distinct hosts: 'algo-1' is listed twice; "
     + sagemaker._FIX),
])
def test_bad_configs_are_refused(text: str, env: dict[str, str], message: str) -> None:
    with pytest.raises(TopologyError) as caught:
        read({**PLATFORM, **env}, text)
    assert str(caught.value) == message


def test_the_path_variable_chooses_the_file_and_is_no_label() -> None:
    env = {**PLATFORM, sagemaker.CONFIG_VARIABLE: "/tmp/rc.json"}
    assert sagemaker.files_needed(env, "sagemaker-platform") == (
        "/tmp/rc.json", "/tmp/hyperparameters.json")
    assert sagemaker.files_needed(PLATFORM, "sagemaker-platform") == (
        SAGEMAKER_CONFIG, HYPERPARAMETERS)
    assert session_labels(env) == ({}, [])
    derivation = derive(env, {PREFIX + "frameworks": "pytorch"},
                        files=lambda paths: {p: config("algo-1") for p in paths})
    assert derivation is not None and derivation.topology.num_nodes == 2


# -- properties ---------------------------------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(1, 5), min_size=1, max_size=3), data=st.data())
def test_every_training_host_derives_one_job(sizes: list[int], data: st.DataObject) -> None:
    """Same master, ports and digest on every host of the distribution group; ranks 0..n-1."""
    names = data.draw(st.permutations([f"algo-{i}" for i in range(1, sum(sizes) + 1)]))
    groups, start = {}, 0
    for number, size in enumerate(sizes):
        groups[f"g{number}"] = names[start:start + size]
        start += size
    train = data.draw(st.sampled_from(sorted(groups)))
    members = groups[train]
    derivations = [derive(PLATFORM, {PREFIX + "frameworks": "pytorch,jax"},
                          files=lambda paths, h=host: {p: config(h, groups) for p in paths})
                   for host in members]
    if len(members) == 1:
        assert derivations[0].topology.num_nodes == 1
        return
    changes = [d.changes() for d in derivations]
    assert {c["MASTER_ADDR"] for c in changes} == {members[0]}
    assert len({c["MASTER_PORT"] for c in changes}) == 1
    assert [d.topology.node_rank for d in derivations] == list(range(len(members)))
    assert len({digest_of(facts_of(d.topology, d)) for d in derivations}) == 1


TEXT = st.text(st.characters(codec="utf-8"), max_size=12) | st.sampled_from(
    ['["algo-1"]', '["algo-1", "algo-2"]', "algo-1", "[]", "{}", "8", "-1", ""])


@settings(max_examples=200, deadline=None)
@given(env=st.fixed_dictionaries({n: TEXT for n in (
    "SM_HOSTS", "SM_CURRENT_HOST", "SM_NUM_GPUS", "SM_DISTRIBUTION_INSTANCE_GROUPS",
    "SM_INSTANCE_GROUPS_DICT", "SM_CURRENT_INSTANCE_GROUP")}), text=TEXT | st.none())
def test_arbitrary_text_gives_a_report_or_a_topology_error(env: dict[str, str],
                                                           text: str | None) -> None:
    try:
        report = read({**PLATFORM, **env}, text)
    except TopologyError:
        return
    assert 0 <= report.node_rank < len(report.nodes)


# -- the real training toolkit ------------------------------------------------------------

@pytest.mark.frameworks
@pytest.mark.parametrize(("current", "groups", "flags"), [
    ("algo-2", {"homogeneousCluster": ["algo-1", "algo-2", "algo-3"]},
     {"sagemaker_pytorch_ddp_enabled": True}),
    ("algo-2", HETERO, {"sagemaker_torch_distributed_enabled": True}),
    ("algo-3", {"a": ["algo-5", "algo-3"], "b": ["algo-1"], "c": ["algo-2", "algo-4"]},
     {"sagemaker_distributed_dataparallel_enabled": True}),
    ("algo-4", {"a": ["algo-5", "algo-3"], "b": ["algo-1"], "c": ["algo-2", "algo-4"]},
     {"sagemaker_distribution_instance_groups": ["c", "a"],
      "sagemaker_mpi_enabled": True}),
])
def test_the_training_toolkit_gives_the_same_master_and_hosts(
        current: str, groups: dict[str, list[str]], flags: dict[str, object],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The toolkit's Environment from the same files (resource config, hyperparameters): its
    master_hostname and distribution_hosts are derive-env's master and nodes (heterogeneous
    groups included)."""
    try:
        from sagemaker_training import environment
    except ImportError:
        require(False, "sagemaker-training is not installed (make venv installs it)")
    monkeypatch.setattr(os, "environ", dict(os.environ))  # the toolkit writes os.environ
    text = config(current, groups)
    toolkit = environment.Environment(resource_config=json.loads(text),
                                      input_data_config={"train": {}}, hyperparameters=flags)
    report = read(dict(PLATFORM), text, hyperparameters=flags)
    assert [n.host for n in report.nodes] == list(toolkit.distribution_hosts)
    assert report.nodes[0].host == toolkit.master_hostname
    assert report.nodes[report.node_rank].host == toolkit.current_host


def test_a_resource_config_nested_too_deep_is_an_error_not_a_traceback() -> None:
    """JSON nested deeper than the parser's stack (adversarial trial: a RecursionError)."""
    with pytest.raises(TopologyError, match=r"expected a JSON object \(SageMaker's resource "):
        read(PLATFORM, "[" * 100000)
    with pytest.raises(TopologyError, match=r"^SM_HOSTS="):
        sagemaker.read({"SM_HOSTS": "[" * 50000, "SM_CURRENT_HOST": "algo-1"},
                       BY_NAME["sagemaker"], {})


# -- the toolkit's MPI mode: SM_* copied to every rank by mpirun -x -------------------------

def rank_environments(command: list[str], envs: dict[str, dict[str, str]]) -> list[dict]:
    """Every rank's environment as Open MPI builds it from the toolkit's ``command``: ranks
    placed by ``--host h:n,... -map-by slot`` (block, in host order), each with its host's
    environment (the worker's through sshd: its /etc/environment, which the toolkit's
    ``WorkerRunner`` writes from its own ``os.environ``), then every ``-x NAME`` with
    mpirun's (the master's) value and every ``-x NAME=VALUE``, then OMPI_COMM_WORLD_*."""
    assert command[0] == "mpirun" and command[command.index("-map-by") + 1] == "slot"
    hosts = [h.partition(":") for h in command[command.index("--host") + 1].split(",")]
    size = int(command[command.index("-np") + 1])
    master = envs[hosts[0][0]]
    exported = [command[i + 1] for i, word in enumerate(command) if word == "-x"]
    copied = {name: value for item in exported
              for name, _, value in (item.partition("="),)
              if value or name in master}
    copied = {name: value or master[name] for name, value in copied.items()}
    ranks = []
    for host, _, slots in hosts:
        local = int(slots or 1)
        for local_rank in range(local):
            ranks.append({**envs[host], **copied, "OMPI_COMM_WORLD_RANK": str(len(ranks)),
                          "OMPI_COMM_WORLD_SIZE": str(size),
                          "OMPI_COMM_WORLD_LOCAL_RANK": str(local_rank),
                          "OMPI_COMM_WORLD_LOCAL_SIZE": str(local), "_HOST": host})
    assert len(ranks) == size
    return ranks


def toolkit_job(remote_env: bool) -> tuple[list[str], dict[str, str], dict[str, dict]]:
    """The toolkit's own MPI job of 2 hosts, 2 processes each: the command its ``mpi.py``
    builds on algo-1 (``MasterRunner._create_command``: ``-x`` every SM_*), each host's
    resource config text and each host's environment: the platform's variables plus the
    toolkit's ``to_env_vars``. ``remote_env`` False: algo-2's ranks get none of its own
    (sshd without /etc/environment), only what mpirun copies."""
    try:
        from sagemaker_training import environment, mpi
    except ImportError:
        require(False, "sagemaker-training is not installed (make venv installs it)")
    flags = {"sagemaker_mpi_enabled": True}
    texts, envs = {}, {}
    for host in ("algo-1", "algo-2"):
        texts[host] = config(host)
        toolkit = environment.Environment(resource_config=json.loads(texts[host]),
                                          input_data_config={"train": {}}, hyperparameters=flags)
        envs[host] = {**PLATFORM, **toolkit.to_env_vars()}
        if host == "algo-1":
            runner = mpi.MasterRunner("train.py", [], toolkit.to_env_vars(), 2,
                                      toolkit.master_hostname, toolkit.distribution_hosts, "",
                                      "eth0")
    if not remote_env:
        envs["algo-2"] = {}
    command = runner._create_command()
    assert command[command.index("SM_CURRENT_HOST") - 1:][:2] == ["-x", "SM_CURRENT_HOST"]
    return command, texts, envs


def derive_ranks(with_file: bool, remote_env: bool) -> list:
    """Every rank's derivation of :func:`toolkit_job`, with its host's resource config when
    ``with_file``."""
    command, texts, envs = toolkit_job(remote_env)
    derivations = []
    for env in rank_environments(command, envs):
        assert env["SM_CURRENT_HOST"] == "algo-1"  # the copy, on algo-2 as well
        text = texts[env.pop("_HOST")] if with_file else None
        files = {SAGEMAKER_CONFIG: text, HYPERPARAMETERS: None}
        derivations.append(derive(env, {PREFIX + "frameworks": "pytorch"},
                                  files=lambda paths, f=files: {p: f.get(p) for p in paths}))
    return derivations


@pytest.mark.frameworks
@pytest.mark.parametrize("with_file", [True, False])
def test_mpi_mode_the_toolkits_own_command_line_never_gives_two_hosts_one_node_rank(
        with_file: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The command the toolkit's own mpi.py builds for a 2-host job, 2 processes per host.
    Before: NODE_RANK=0 on all four ranks (SM_CURRENT_HOST='algo-1', the master's, on
    algo-2 too), and with the resource config algo-2's ranks refused ("SM_CURRENT_HOST=
    'algo-1': expected current_host of ... ('algo-2')"). Now the host is the resource
    config's current_host (per host, never copied); without the file NODE_RANK is not set."""
    monkeypatch.setattr(os, "environ", dict(os.environ))  # the toolkit writes os.environ
    got = []
    for derivation in derive_ranks(with_file, remote_env=True):
        values = {v.name: v.value for v in derivation.variables}
        got.append((values["RANK"], values.get("NODE_RANK"), values["MASTER_ADDR"]))
    node_ranks = ["0", "0", "1", "1"] if with_file else [None] * 4
    assert got == [(str(r), n, "algo-1") for r, n in enumerate(node_ranks)]


@pytest.mark.frameworks
@pytest.mark.parametrize("remote_env", [True, False])
@pytest.mark.parametrize("with_file", [True, False])
def test_mpi_mode_every_rank_derives_one_job(with_file: bool, remote_env: bool,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """mpirun -x gives algo-2's ranks only the SM_* (without /etc/environment: no
    TRAINING_JOB_NAME/ARN), algo-1's ranks keep the whole environment. Before: algo-1's
    ranks read sagemaker-platform and hashed MASTER_PORT from TRAINING_JOB_NAME (61xxx),
    algo-2's read sagemaker and hashed it from the first host: two ports, two digests,
    exit 0, and ranks 2-3 connected to a port nobody listened on. Now every rank reads the
    job from what they all have: one source, master, port and digest."""
    monkeypatch.setattr(os, "environ", dict(os.environ))  # the toolkit writes os.environ
    derivations = derive_ranks(with_file, remote_env)
    values = [{v.name: v.value for v in d.variables} for d in derivations]
    assert [v["RANK"] for v in values] == ["0", "1", "2", "3"]
    assert [v.get("NODE_RANK") for v in values] == (
        ["0", "0", "1", "1"] if with_file else [None] * 4)
    assert {(d.topology.source, d.topology.job, d.topology.session_id)
            for d in derivations} == {("sagemaker", ("sagemaker", "", "algo-1"), None)}
    assert {(v["MASTER_ADDR"], v["MASTER_PORT"]) for v in values} == {("algo-1", "62347")}
    assert len({digest_of(facts_of(d.topology, d)) for d in derivations}) == 1
    assert derivations[0].topology.notes[-1].startswith(
        "TRAINING_JOB_NAME is not this job's name in an MPI rank: mpirun copies only the "
        "SM_* to the ranks on the other hosts")


def test_mpi_mode_the_copied_values_are_checked_not_taken() -> None:
    """In an MPI rank, SM_CURRENT_HOST must be one of the hosts and SM_HOSTS the resource
    config's; this host is current_host."""
    mpi = {"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4",
           "OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}
    env = {**PLATFORM, **mpi, "SM_HOSTS": '["algo-1", "algo-2"]', "SM_CURRENT_HOST": "algo-1"}
    report = read(env, config("algo-2"))
    assert (report.node_rank, report.notes[1]) == (1, (
        "SM_CURRENT_HOST=algo-1 is the value mpirun copied to every rank "
        "(OMPI_COMM_WORLD_RANK set): not this host"))
    with pytest.raises(TopologyError) as info:
        read({**env, "SM_CURRENT_HOST": "algo-7"}, config("algo-2"))
    assert str(info.value) == (
        "SM_CURRENT_HOST='algo-7': expected one of the hosts [\"algo-1\", \"algo-2\"]: in an "
        "MPI rank (OMPI_COMM_WORLD_RANK set) it is the value mpirun copied from the host that "
        "ran it (mpirun -x, the training toolkit's mpi.py); SageMaker writes it for every "
        "host of the training job; run derive-env in the training container SageMaker starts")
    with pytest.raises(TopologyError, match=r"^SM_HOSTS='\[\"algo-1\", \"algo-3\"\]': "
                       r"expected the hosts of /opt/ml/input/config/resourceconfig.json, "):
        read({**env, "SM_HOSTS": '["algo-1", "algo-3"]'}, config("algo-2"))
    alone = sagemaker.read({k: v for k, v in env.items() if not k.startswith("TRAINING")},
                           BY_NAME["sagemaker"], {})
    assert (alone.node_rank, "node_rank" in alone.inputs, alone.nodes[0].host) == (
        None, False, "algo-1")


# -- what the platform never writes: refused, never read another way --------------------------

ARN = "arn:aws:sagemaker:us-east-1:1:training-job/j"


def _dry_run(tmp_path, text: str | None) -> tuple[int, str, str]:
    from support.dry_run import dry_run

    path = tmp_path / "resourceconfig.json"
    if text is not None:
        path.write_text(text, encoding="utf-8")
    return dry_run(["TRAINING_JOB_NAME=j", f"TRAINING_JOB_ARN={ARN}",
                    f"DERIVE_ENV_SAGEMAKER_RESOURCE_CONFIG={path}"])


def test_instance_groups_not_a_list_is_refused(tmp_path) -> None:
    """``"instance_groups": "x"``: not read as no group (which blamed current_host)."""
    text = ('{"current_host":"algo-2","hosts":["algo-1","algo-2"],"current_group_name":"g2",'
            '"instance_groups":"x"}')
    assert _dry_run(tmp_path, text) == (3, "", (
        f"derive-env: error: {tmp_path}/resourceconfig.json: expected instance_groups, a list "
        "of objects with an instance_group_name and a list of hosts, got \"x\"; "
        f"{sagemaker._FIX}\n"))


@pytest.mark.parametrize(("text", "key"), [
    ('{"current_host":"algo-2","hosts":["algo-1","algo-2"],"hosts":["algo-2","algo-1"]}',
     "hosts"),
    ('{"current_host":"algo-1","hosts":["algo-1","algo-2"],"current_host":"algo-2"}',
     "current_host"),
    ('{"current_host":"algo-2","hosts":["algo-1","algo-2"],"instance_groups":[{"instance_'
     'group_name":"a","hosts":["algo-1"],"hosts":["algo-1","algo-2"]}]}', "hosts"),
])
def test_a_key_twice_is_refused(tmp_path, text: str, key: str) -> None:
    """JSON readers keep the last of a key given twice: the node rank would hang on it."""
    assert _dry_run(tmp_path, text) == (3, "", (
        f"derive-env: error: {tmp_path}/resourceconfig.json: expected each key once in a JSON "
        f"object, got {key!r} twice (which value is meant?); {sagemaker._FIX}\n"))


def test_without_the_file_the_message_names_the_arn(tmp_path) -> None:
    """TRAINING_JOB_ARN tells the platform's job from the toolkit's SM_* alone: named."""
    assert _dry_run(tmp_path, None) == (3, "", (
        f"derive-env: error: TRAINING_JOB_ARN={ARN!r}: expected SageMaker's resource config at "
        f"{tmp_path}/resourceconfig.json (readable JSON; another path: DERIVE_ENV_SAGEMAKER_"
        "RESOURCE_CONFIG), or the training toolkit's SM_HOSTS and SM_CURRENT_HOST: "
        "TRAINING_JOB_ARN and TRAINING_JOB_NAME state a SageMaker training job, but neither is "
        f"there, so the job's hosts are unknown; {sagemaker._FIX}\n"))
