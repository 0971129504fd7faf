"""The port policy (issue 9 item 5, issue 15 item 5; contract section 10): reserved ports
first, else a seed from (manager, job, step) into 61000-65535, the same on every node
whatever its sysctls; the ports of one job clear of each other."""

from __future__ import annotations

import binascii
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from derive_env.errors import LabelError, TopologyError
from derive_env.frameworks.context import HostFacts
from derive_env.labels import PREFIX
from derive_env.pipeline import derive
from derive_env.ports import (
    WINDOW,
    Claim,
    job_ports,
    job_words,
    overlap_warning,
    parse_port_range,
    place,
    port_order,
    port_seed,
)
from derive_env.topology import ClusterTopology
from helpers import value_error


def _documented(manager: str, job: str, step: str) -> tuple[int, int, int]:
    """The formula of the docstring, with another CRC-32 implementation (binascii)."""
    seed = binascii.crc32(f"{manager}/{job}/{step}".encode())
    return tuple(61000 + (seed + k) % 4536 for k in range(3))  # type: ignore[return-value]


def test_exact_ports() -> None:
    assert WINDOW == (61000, 65535)
    assert port_order() == ("pytorch", "tensorflow", "jax")
    assert job_ports("slurm", "123", "0") == (61957, 61958, 61959)
    assert job_ports("slurm", "1", "0") == (61110, 61111, 61112)  # the recording srun-block
    assert job_ports("slurm", "123", "0") == _documented("slurm", "123", "0")
    assert port_seed("slurm", "123", "0") == binascii.crc32(b"slurm/123/0")


def test_every_part_of_the_seed_matters() -> None:
    ports = {
        job_ports("slurm", "123", "0"),
        job_ports("slurm", "123", "1"),  # two steps of one job at once
        job_ports("slurm", "124", "0"),
        job_ports("pbs", "123", "0"),
    }
    assert len(ports) == 4


def test_wraps_around_at_65535() -> None:
    job = next(str(j) for j in range(100000) if port_seed("slurm", str(j), "0") % 4536 == 4535)
    assert job_ports("slurm", job, "0") == (65535, 61000, 61001)


def test_granted_ports_come_first() -> None:
    assert job_ports("slurm", "123", "0", granted=(12000,)) == (12000, 61957, 61958)
    assert job_ports("slurm", "123", "0", granted=(12000, 12001, 12002, 12003)) == (
        12000, 12001, 12002)
    # a granted port the formula also gives is not given twice
    assert job_ports("slurm", "123", "0", granted=(61957,)) == (61957, 61958, 61959)
    assert job_ports("slurm", "123", "0", granted=(12000, 12000)) == (12000, 61957, 61958)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=12), st.text(max_size=12), st.text(max_size=6),
       st.lists(st.integers(1, 65535), max_size=4))
def test_distinct_and_in_the_window(manager: str, job: str, step: str,
                                    granted: list[int]) -> None:
    ports = job_ports(manager, job, step, granted=tuple(granted))
    assert len(set(ports)) == 3
    given_first = list(dict.fromkeys(granted))[:3]
    assert list(ports[: len(given_first)]) == given_first
    assert all(61000 <= port <= 65535 for port in ports[len(given_first):])


# --- place: the ports of one job clear of each other --------------------------------------

MASTER, TF, JAX = "the master port", "TensorFlow's", "the JAX coordinator's"


def test_place_keeps_chosen_ports_and_moves_derived_ones() -> None:
    claims = [Claim("pytorch", 61110, "hash", "hashed", MASTER),
              Claim("tensorflow", 61111, "hash", "hashed", TF, 2),
              Claim("jax", 61112, "hash", "hashed", JAX)]
    assert place(claims) == {
        "pytorch": (61110, "hash"),
        "tensorflow": (61113, "hash; moved from 61111 to 61113, clear of the job's other "
                              "ports (61110, 61112)"),
        "jax": (61112, "hash")}
    assert place([Claim("pytorch", 1234, "label M", "label", MASTER),
                  Claim("jax", 1234, "default (1234)", "default", JAX)]) == {
        "pytorch": (1234, "label M"),
        "jax": (1235, "default (1234); moved from 1234 to 1235, clear of the job's other ports "
                "(1234)")}
    # a hashed block wraps within the window, never past 65535
    assert place([Claim("jax", 65535, "label J", "label", JAX),
                  Claim("tensorflow", 65534, "hash", "hashed", TF, 3)])["tensorflow"][0] == 61000


def test_place_refuses_two_chosen_ports_on_one() -> None:
    with pytest.raises(ValueError) as info:
        place([Claim("tensorflow", 3000, "label T", "label", TF, 2),
               Claim("jax", 3001, "label J", "label", JAX)])
    assert info.value.args == (
        "the JAX coordinator's port 3001 (label J) and TensorFlow's ports 3000-3001 (label T) "
        "both hold port 3001 on rank 0's host, where only one server can listen: set label J "
        "or label T to another port", True)
    with pytest.raises(ValueError) as info:
        place([Claim("pytorch", 3000, "MASTER_PORT", "set", MASTER),
               Claim("jax", 3000, "label J", "label", JAX)])
    assert info.value.args[1] is False


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 65535), st.sampled_from(
    ["label", "set", "reserved", "hashed", "default"]), st.integers(1, 4)),
    min_size=3, max_size=3))
def test_placed_ports_never_overlap(specs) -> None:
    names = ("pytorch", "tensorflow", "jax")
    claims = [Claim(name, min(port, 65536 - width) if kind != "hashed" else
                    61000 + port % 4536, "s", kind, "x", width if name == "tensorflow" else 1)
              for name, (port, kind, width) in zip(names, specs, strict=True)]
    try:
        placed = place(claims)
    except ValueError as exc:  # only chosen ports may clash, or a block that fits nowhere
        chosen = [c for c in claims if c.kind in ("label", "set")]
        assert len(chosen) >= 2 or "no " in exc.args[0]
        return
    spans = [set(range(placed[c.framework][0], placed[c.framework][0] + c.width))
             for c in claims]
    assert sum(map(len, spans)) == len(set().union(*spans))
    for claim in claims:
        port = placed[claim.framework][0]
        if claim.kind in ("label", "set"):
            assert port == claim.port
        if claim.kind == "hashed":
            assert port >= 61000 and port + claim.width - 1 <= 65535


# --- every node the same ports, whatever its sysctl (contract section 10) ------------------


def _srun(rank: int, tasks_per_node: int, job: str, step: str) -> dict[str, str]:
    nodes = 3
    return {
        "SLURM_JOB_ID": job, "SLURM_JOBID": job, "SLURM_STEP_ID": step, "SLURM_STEPID": step,
        "SLURM_STEP_NODELIST": "n[1-3]", "SLURM_STEP_NUM_NODES": str(nodes),
        "SLURM_STEP_NUM_TASKS": str(nodes * tasks_per_node),
        "SLURM_STEP_TASKS_PER_NODE": f"{tasks_per_node}(x{nodes})",
        "SLURM_PROCID": str(rank), "SLURM_LOCALID": str(rank % tasks_per_node),
        "SLURM_NODEID": str(rank // tasks_per_node), "SLURM_NTASKS": str(nodes * tasks_per_node),
        "SLURM_NNODES": str(nodes), "SLURM_JOB_NUM_NODES": str(nodes),
        "SLURM_JOB_NODELIST": "n[1-3]", "SLURMD_NODENAME": f"n{rank // tasks_per_node + 1}"}


def _served(changes: dict[str, str]) -> dict[str, list[int]]:
    """The ports each server listens on, read back from the exported variables."""
    import json

    cluster = json.loads(changes["TF_CONFIG"])["cluster"]
    tf = sorted({int(a.rsplit(":", 1)[1]) for hosts in cluster.values() for a in hosts})
    return {"pytorch": [int(changes["MASTER_PORT"])], "tensorflow": tf,
            "jax": [int(changes["JAX_COORDINATOR_ADDRESS"].rsplit(":", 1)[1])]}


_RANGES = st.one_of(
    st.tuples(st.integers(1, 65535), st.integers(1, 65535)).map(
        lambda t: f"{min(t)}\t{max(t)}\n"),
    st.sampled_from(["32768\t60999\n", "1024\t65535\n", "61000 65535", "garbage", ""]),
    st.none())


@settings(max_examples=150, deadline=None)
@given(job=st.integers(1, 10**9).map(str), step=st.sampled_from(["0", "1", "7"]),
       tasks_per_node=st.integers(1, 4), sysctls=st.lists(_RANGES, min_size=3, max_size=3),
       jax_label=st.one_of(st.none(), st.integers(61000, 65535)))
def test_every_node_derives_the_same_distinct_ports_in_the_window(
        job: str, step: str, tasks_per_node: int, sysctls: list[str | None],
        jax_label: int | None) -> None:
    labels = {PREFIX + "frameworks": "pytorch,tensorflow,jax"}
    if jax_label is not None:
        labels[PREFIX + "jax-port"] = str(jax_label)
    seen = []
    for node, text in enumerate(sysctls):
        rank = node * tasks_per_node + tasks_per_node - 1
        facts = HostFacts(port_range=lambda text=text: text)
        derivation = derive(_srun(rank, tasks_per_node, job, step), labels, facts)
        assert derivation is not None
        seen.append(_served(derivation.changes()))
        for warning in derivation.warnings:
            assert "net.ipv4.ip_local_port_range" in warning
    assert seen[0] == seen[1] == seen[2]
    served = seen[0]
    every = [p for ports in served.values() for p in ports]
    assert len(every) == len(set(every)) == 2 + tasks_per_node
    assert all(61000 <= p <= 65535 for p in every)
    if jax_label is not None:
        assert served["jax"] == [jax_label]


_LABEL = st.one_of(st.none(), st.integers(3000, 3004))


@settings(max_examples=150, deadline=None)
@given(tasks_per_node=st.integers(1, 3), master=_LABEL, tf=_LABEL, jax=_LABEL,
       sysctls=st.lists(_RANGES, min_size=3, max_size=3))
def test_labels_either_collide_on_every_node_or_every_port_is_distinct(
        tasks_per_node: int, master: int | None, tf: int | None, jax: int | None,
        sysctls: list[str | None]) -> None:
    """Labels stay where they are; derived ports move clear; labels that collide are the
    same error on every node."""
    labels = {PREFIX + "frameworks": "pytorch,tensorflow,jax"}
    for name, port in (("master-port", master), ("tensorflow-port", tf), ("jax-port", jax)):
        if port is not None:
            labels[PREFIX + name] = str(port)
    outcomes = []
    for node, text in enumerate(sysctls):
        rank = node * tasks_per_node
        try:
            derivation = derive(_srun(rank, tasks_per_node, "77", "0"), labels,
                                HostFacts(port_range=lambda text=text: text))
        except LabelError as exc:
            outcomes.append(str(exc))
            continue
        assert derivation is not None
        outcomes.append(_served(derivation.changes()))
    assert outcomes[0] == outcomes[1] == outcomes[2]
    if isinstance(outcomes[0], str):
        assert outcomes[0].count("label ai.backend.distributed.") == 4  # both, twice
        return
    served = outcomes[0]
    every = [p for ports in served.values() for p in ports]
    assert len(every) == len(set(every)) == 2 + tasks_per_node
    for name, port in (("pytorch", master), ("tensorflow", tf), ("jax", jax)):
        if port is not None:
            assert served[name][0] == port
        else:
            assert all(61000 <= p <= 65535 for p in served[name])


def test_a_node_whose_range_overlaps_the_window_is_warned() -> None:
    labels = {PREFIX + "frameworks": "pytorch,jax"}
    derivation = derive(_srun(0, 1, "1", "0"), labels,
                        HostFacts(port_range=lambda: "32768\t65535\n"))
    assert derivation is not None
    assert derivation.changes()["MASTER_PORT"] == "61110"
    assert derivation.warnings == (
        "this node's ephemeral port range 32768-65535 (net.ipv4.ip_local_port_range) overlaps "
        "the window of derived ports 61000-65535, and holds this job's port(s) 61110, 61112: "
        "a connection of this node's own may hold a derived port; the bind then fails with a "
        "clear error (address already in use) rather than a hang. Lower the range's upper "
        "bound below 61000 on every node, reserve ports for the step (srun --resv-ports), or "
        "set the ports by label or variable",)


def test_labels_that_collide_are_an_error_naming_both() -> None:
    labels = {PREFIX + "frameworks": "pytorch,tensorflow,jax",
              PREFIX + "tensorflow-port": "3000", PREFIX + "jax-port": "3001"}
    with pytest.raises(LabelError) as info:
        derive(_srun(1, 2, "1", "0"), labels)
    assert str(info.value) == (
        "the JAX coordinator's port 3001 (label ai.backend.distributed.jax-port) and "
        "TensorFlow's ports 3000-3001 (label ai.backend.distributed.tensorflow-port) both hold "
        "port 3001 on rank 0's host, where only one server can listen: set label "
        "ai.backend.distributed.jax-port or label ai.backend.distributed.tensorflow-port to "
        "another port")
    with pytest.raises(TopologyError) as set_port:
        derive({**_srun(0, 1, "1", "0"), "MASTER_PORT": "4000"},
               {PREFIX + "frameworks": "pytorch,tensorflow", PREFIX + "tensorflow-port": "4000"})
    assert str(set_port.value) == (
        "TensorFlow's port 4000 (label ai.backend.distributed.tensorflow-port) and the master "
        "port 4000 (MASTER_PORT (already set)) both hold port 4000 on rank 0's host, where only "
        "one server can listen: set label ai.backend.distributed.tensorflow-port to another "
        "port")


def test_overlap_warning_cases() -> None:
    assert overlap_warning("32768 60999", [61000]) is None
    assert overlap_warning(None, [61000]) is None
    assert overlap_warning("32768 65535", []) is None
    assert overlap_warning("32768 61000", [62000]) == (
        "this node's ephemeral port range 32768-61000 (net.ipv4.ip_local_port_range) overlaps "
        "the window of derived ports 61000-65535: a connection of this node's own may hold a "
        "derived port; the bind then fails with a clear error (address already in use) rather "
        "than a hang. Lower the range's upper bound below 61000 on every node, reserve ports "
        "for the step (srun --resv-ports), or set the ports by label or variable")


def test_same_ports_in_processes_with_different_hash_seeds() -> None:
    """Every task computes the ports alone: Python's salted hash() must play no part."""
    code = (
        "from derive_env.ports import job_ports;"
        "print(job_ports('slurm', '4242', '3'), job_ports('k8s', 'job-äöü', 'batch'))"
    )
    outputs = set()
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        run = subprocess.run(
            [sys.executable, "-c", code],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        outputs.add(run.stdout)
    expected = f"{job_ports('slurm', '4242', '3')} {job_ports('k8s', 'job-äöü', 'batch')}\n"
    assert outputs == {expected}


# --- the /proc/sys format ------------------------------------------------------------------


@pytest.mark.parametrize(("text", "expected"), [
    ("", "two port numbers 'low high', not ''"),
    ("32768", "two port numbers 'low high', not '32768'"),
    ("32768 60999 1", "two port numbers 'low high', not '32768 60999 1'"),
    ("32768 -1", "two port numbers 'low high', not '32768 -1'"),
    ("60999 32768", "a range 'low high' with 1 <= low <= high <= 65535, not 60999-32768"),
    ("0 60999", "a range 'low high' with 1 <= low <= high <= 65535, not 0-60999"),
])
def test_parse_errors(text: str, expected: str) -> None:
    assert value_error(parse_port_range, text) == expected


def test_building_blocks_import_only_the_standard_library() -> None:
    """Both run on every container start of the Slurm source: no pydantic, click or typing
    (the grammar is loaded by path, as its package's __init__ is not this test's subject)."""
    grammar = (Path(__file__).resolve().parents[1]
               / "src/derive_env/sources/managers/slurm_hostlist.py")
    code = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('g', {str(grammar)!r})\n"
        "spec.loader.exec_module(importlib.util.module_from_spec(spec))\n"
        "import derive_env.ports\n"
        "print(sorted(m for m in ('typing', 'pydantic', 'click', 'hashlib', 're')"
        " if m in sys.modules))\n"
    )
    run = subprocess.run(
        [sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert run.stdout == "[]\n"


def test_a_job_id_of_undecodable_bytes_seeds_by_its_bytes() -> None:
    """os.environ gives undecodable bytes as surrogate escapes (AWS_BATCH_JOB_ID=$'j\\xff'):
    the seed is the CRC of the bytes, not a UnicodeEncodeError (adversarial trial)."""
    assert port_seed("aws-batch", "j\udcff", "2") == binascii.crc32(b"aws-batch/j\xff/2")


@pytest.mark.parametrize(("job", "words"), [
    (("slurm", "10", "0"), "slurm job 10 step 0"),
    (("sagemaker", "bert-1", "algo-4"), "SageMaker training job bert-1"),
    (("sagemaker", "", "algo-1"), "the SageMaker job of first host algo-1"),
    (("kubeflow-pytorchjob", "23456", "3"), "the PyTorchJob of master port 23456, 3 nodes"),
    (("kubeflow-pytorchjob", "el-worker-0:23456", "2:4"),
     "the PyTorchJob of rendezvous el-worker-0:23456, 2:4 nodes"),
    (("kubeflow-trainjob", "llama-node-0-0.llama", "29500"),
     "the TrainJob of master llama-node-0-0.llama:29500"),
    (("jobset", "t-w-0-0.t", "4"), "the JobSet of 4 pods, first pod t-w-0-0.t"),
    (("lws", "llama-0.llama.default", "3"),
     "the LeaderWorkerSet group of 3 pods, leader llama-0.llama.default"),
    (("volcano", "pt-master-0.pt", "4"), "the Volcano Job of 4 pods, first pod pt-master-0.pt"),
    (("kubernetes-indexed-job", "train-0.train", "4"),
     "the Indexed Job of 4 pods, first pod train-0.train"),
    (("gke-tpu", "tpu-0.tpu", "2x2"), "the TPU job of 2x2 (slices x hosts), first host tpu-0.tpu"),
    (("openmpi", "102957057", ""), "openmpi job 102957057"),
])
def test_a_hashed_port_speaks_its_platforms_words(job: tuple[str, str, str], words: str) -> None:
    """Issue 25: the provenance of a hashed port names the job as its platform does, never
    Slurm's "job ... step ..." on SageMaker or Kubernetes."""
    from derive_env.ports import job_ports_of

    topology = ClusterTopology(source=job[0], job=job, nodes=[], node_rank=None)
    _port, provenance, kind = job_ports_of(topology)["tensorflow"]
    assert (provenance, kind) == (
        f"derived from {words} (hash into 61000-65535: docs/ports.md)", "hashed")


@pytest.mark.parametrize(("job", "words"), [
    (("torchrun", "none", "26003"), "torchrun step 26003"),  # the default run id: no job
    (("torchrun", "derive-c10d", "26003"), "torchrun job derive-c10d step 26003"),
    (("slurm", "10", "0"), "slurm job 10 step 0"),
    (("flux", "none", ""), "flux job none"),  # "none" names no job for torchrun alone
])
def test_job_words_leave_out_torchruns_default_run_id(job: tuple[str, str, str],
                                                      words: str) -> None:
    assert job_words(*job) == words


def test_a_torchrun_jax_port_is_derived_from_the_step_alone() -> None:
    """torchrun's static rendezvous (recorded, run id ``none``): the JAX port's provenance
    names no job, as --explain's header."""
    fixture = Path(__file__).parent / "fixtures/recorded/torchrun-static/rank0.env"
    env = dict(line.split("=", 1) for line in fixture.read_text().splitlines()
               if line and not line.startswith("#"))
    derivation = derive(env, {PREFIX + "frameworks": "pytorch,jax"})
    assert derivation is not None
    (coordinator,) = [v for v in derivation.variables if v.name == "JAX_COORDINATOR_ADDRESS"]
    assert coordinator.provenance.endswith(
        " + port from derived from torchrun step 26003 (hash into 61000-65535: docs/ports.md)")
