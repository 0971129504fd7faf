"""derive-env check, the edge: how the command line tells it from a command named ``check``,
its options, one node, and the master and the others over real sockets on loopback (the
whole job in network namespaces: tests/e2e/test_e2e_check.py)."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from derive_env.cli import check as edge
from derive_env.cli import checknet
from derive_env.preflight import Plan, passed
from helpers import console_script

LABELS = '{"ai.backend.distributed.frameworks": "pytorch"}'


def _run(args: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    labels = tmp_path / "labels.json"
    labels.write_text(LABELS)
    base = {"PATH": f"{tmp_path}:/usr/bin:/bin", "DERIVE_ENV_LABELS_FILE": str(labels)}
    return subprocess.run([console_script(), *args], env={**base, **env}, capture_output=True,
                          text=True, timeout=60, check=False)


def _user_check(tmp_path: Path) -> None:
    script = tmp_path / "check"
    script.write_text('#!/bin/sh\necho "user check $*"\n')
    script.chmod(0o755)


def test_a_command_named_check_runs_after_the_double_dash(tmp_path: Path) -> None:
    """Only ``check`` as the first word is the preflight; after ``--`` it is the user's
    command, byte for byte as before."""
    _user_check(tmp_path)
    for args in (["--", "check", "a", "--timeout"],
                 ["--label", "x.y=z", "--", "check", "a", "--timeout"],
                 ["--frameworks", "pytorch", "--", "check", "a", "--timeout"]):
        result = _run(args, tmp_path)
        assert (result.returncode, result.stdout) == (0, "user check a --timeout\n"), args


@pytest.mark.parametrize("args", [["--frameworks", "pytorch", "check"],
                                  ["--label", "x.y=z", "check", "a", "--timeout"],
                                  ["--dry-run", "check"]])
def test_check_after_options_is_refused(tmp_path: Path, args: list[str]) -> None:
    """``derive-env --frameworks pytorch check`` ran a command named check (127, no hint:
    adversarial trial): a usage error saying check comes first, the command not run."""
    _user_check(tmp_path)
    result = _run(args, tmp_path)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.endswith(
        "Error: check must come first: derive-env check --frameworks pytorch (options after "
        "the word); to run a command named check, put -- before it\n")


def test_check_as_the_first_word_is_the_preflight(tmp_path: Path) -> None:
    _user_check(tmp_path)
    result = _run(["check", "--timeout", "5"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == (
        "derive-env check: 1 node, master 127.0.0.1:29500, within 5 s\n"
        "node  host       name       peers  port       iface\n"
        "0     localhost  127.0.0.1  -      listening  -\n"
        "all checks pass on 1 node\n")
    assert result.stderr == ""


def test_an_image_that_did_not_opt_in_is_checked_as_pytorch(tmp_path: Path) -> None:
    empty = tmp_path / "empty.json"
    empty.write_text("{}")
    result = _run(["check", "--timeout", "5"], tmp_path, DERIVE_ENV_LABELS_FILE=str(empty))
    assert result.returncode == 0, result.stderr
    assert result.stderr == ("derive-env: note: not opted in (label "
                             "ai.backend.distributed.frameworks: --frameworks, "
                             "DERIVE_ENV_FRAMEWORKS or the image's label): checked as if "
                             "frameworks=pytorch\n")


def test_frameworks_opts_a_check_in_as_it_opts_a_start_in(tmp_path: Path) -> None:
    """srun derive-env check --frameworks pytorch on bare metal: the same option as the
    start's (README, bare metal), no note (found by the new-user trial)."""
    empty = tmp_path / "empty.json"
    empty.write_text("{}")
    result = _run(["check", "--frameworks", "pytorch", "--timeout", "5"], tmp_path,
                  DERIVE_ENV_LABELS_FILE=str(empty))
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.endswith("all checks pass on 1 node\n")


def test_a_jax_job_is_checked_on_the_jax_coordinator_s_port(tmp_path: Path) -> None:
    """JAX only: the check listens on JAX_COORDINATOR_ADDRESS's port, the one the job opens
    (it checked PyTorch's master port, 29500 here, and passed while the job's port was
    taken: adversarial trial)."""
    port = _free_port()
    args = ["check", "--frameworks", "jax", "--label",
            f"ai.backend.distributed.jax-port={port}", "--timeout", "5"]
    result = _run(args, tmp_path)
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == (
        f"derive-env check: 1 node, master 127.0.0.1:{port} (JAX coordinator), within 5 s\n"
        "node  host       name       peers  port       iface\n"
        "0     localhost  127.0.0.1  -      listening  -\n"
        "all checks pass on 1 node\n")
    with socket.socket() as taken:  # the job's port held: the check fails on it
        taken.bind(("127.0.0.1", port))
        taken.listen()
        result = _run(args, tmp_path)
    assert result.returncode == 1
    assert f"127.0.0.1:{port} is already in use" in result.stdout


def test_tensorflow_in_one_container_opens_no_port_so_pytorch_s_is_checked(
        tmp_path: Path) -> None:
    result = _run(["check", "--frameworks", "tensorflow", "--timeout", "5"], tmp_path)
    assert result.returncode == 0
    assert result.stderr == ("derive-env: note: frameworks=tensorflow opens no port in this "
                             "job (one container): checked as if frameworks=tensorflow,"
                             "pytorch\n")
    assert result.stdout.startswith(
        "derive-env check: 1 node, master 127.0.0.1:29500 (PyTorch master port), within 5 s\n")


TF = ('{"cluster": {"chief": ["c0:2222"], "worker": ["w0:2222", "w1:2223"]}, '
      '"task": {"type": "worker", "index": 0}}')


@pytest.mark.parametrize(("job", "frameworks", "expected"), [
    ({"MASTER_ADDR": "m", "MASTER_PORT": "29500", "JAX_COORDINATOR_ADDRESS": "m:61112"},
     ("pytorch", "jax"), ("PyTorch master port", "m", 29500)),
    ({"MASTER_ADDR": "m", "MASTER_PORT": "29500", "JAX_COORDINATOR_ADDRESS": "m:61112"},
     ("jax",), ("JAX coordinator", "m", 61112)),  # a manager's MASTER_*: not the job's port
    ({"JAX_COORDINATOR_ADDRESS": "[2001:db8::1]:1234", "TF_CONFIG": TF},
     ("tensorflow", "jax"), ("JAX coordinator", "2001:db8::1", 1234)),
    ({"TF_CONFIG": TF}, ("tensorflow",), ("TensorFlow chief", "c0", 2222)),
    ({"TF_CONFIG": TF.replace('"chief": ["c0:2222"], ', "")}, ("tensorflow",),
     ("TensorFlow chief", "w0", 2222)),
    ({}, ("tensorflow",), None),
    ({"TF_CONFIG": "not json"}, ("tensorflow",), None),
])
def test_rendezvous_of_picks_the_port_the_job_opens(job: dict[str, str], frameworks: tuple,
                                                    expected: tuple | None) -> None:
    assert edge.rendezvous_of(job, frameworks) == expected


@pytest.mark.parametrize(("args", "message"), [
    (["check", "--timeout", "0"], "Invalid value for '--timeout': 0.0 is not in the range"),
    (["check", "--timeout", "x"], "Invalid value for '--timeout': 'x' is not a valid float"),
    (["check", "now"], "Got unexpected extra argument (now)"),
    # NaN passes FloatRange's comparisons (found by the adversarial trial)
    (["check", "--timeout", "nan"], "Invalid value for '--timeout': nan is not in the range "
     "0<x<=3600."),
    (["check", "--source", "slurmm"], "Error: --source='slurmm': expected one"),
])
def test_usage_errors_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    result = _run(args, tmp_path)
    assert result.returncode == 2
    assert message in result.stderr
    assert result.stdout == ""


def test_help_names_the_bound(tmp_path: Path) -> None:
    result = _run(["check", "--help"], tmp_path)
    assert result.returncode == 0
    assert result.stdout.startswith("Usage: derive-env check [OPTIONS]\n")
    assert "--timeout SECONDS" in result.stdout and "[default: 15.0" in result.stdout
    # every exit path of run_check and main (adversarial trial: it said "else 1")
    assert ("  Exit codes: 0 every check passes, 1 a check failed, 2 usage, 3 bad cluster\n"
            "  variables, 4 bad image label, 130 interrupted (SIGINT), 143 SIGTERM while\n"
            "  resolving host names.\n") in result.stdout


def test_a_bad_cluster_variable_is_the_derivation_s_error(tmp_path: Path) -> None:
    result = _run(["check"], tmp_path, BACKENDAI_CLUSTER_SIZE="x")
    assert result.returncode == 3
    assert result.stderr.startswith("derive-env: error: BACKENDAI_CLUSTER_SIZE='x'")


# ------------------------------------------------------- the master and a node on loopback


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _plan(port: int, label: str, host: str, leader: bool, key: str = "k" * 16) -> Plan:
    return Plan(False, label, host, "127.0.0.1", port, ("127.0.0.1",), (host,),
                (("0", "a"), ("1", "b")), leader, key)


CELLS = {"name": passed("127.0.0.2"), "peers": passed("ok"), "iface": passed("lo")}


def _master(port: int, deadline: float, key: str = "k" * 16):
    master = edge._Master(edge.Mine(_plan(port, "0", "a", True, key), CELLS, {}, ()),
                          edge.Bound(5, deadline))
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(master.run()))
    thread.start()
    return thread, result


def _client(port: int, timeout: float, key: str = "k" * 16) -> int:
    deadline = time.monotonic() + timeout
    return edge._client(edge.Mine(_plan(port, "1", "b", False, key), CELLS, {}, ()),
                        ["127.0.0.1"], edge.Bound(timeout, deadline))


def test_the_master_collects_the_row_and_answers(capsys) -> None:
    port = _free_port()
    thread, status = _master(port, time.monotonic() + 5)
    assert _client(port, 5) == 0
    thread.join(10)
    assert status == [0]
    out = capsys.readouterr().out
    assert ("node  host  name       peers  port       iface\n"
            "1     b     127.0.0.2  ok     connected  lo\n"
            "master 127.0.0.1: all checks pass on 2 nodes\n") in out
    assert ("node  host  name       peers  port       iface\n"
            "0     a     127.0.0.2  ok     listening  lo\n"
            "1     b     127.0.0.2  ok     connected  lo\n"
            "all checks pass on 2 nodes\n") in out


def test_a_foreign_listener_is_named_by_both(capsys, monkeypatch) -> None:
    monkeypatch.setattr(checknet, "GREETING_SECONDS", 0.3)
    with socket.socket() as foreign:
        foreign.bind(("127.0.0.1", 0))
        foreign.listen()
        port = foreign.getsockname()[1]
        start = time.monotonic()
        assert _client(port, 5) == 1
        assert time.monotonic() - start < 2
        thread, status = _master(port, time.monotonic() + 5)
        thread.join(10)
    assert status == [1]
    out = capsys.readouterr().out
    assert (f"b port: 127.0.0.1:{port} is already in use: a program there accepts "
            "connections but does not greet as derive-env check\nFAILED: b (port)\n") in out
    comm = Path("/proc/self/comm").read_text().strip()
    assert (f"a port: 127.0.0.1:{port} is already in use (by pid {os.getpid()}, {comm})\n"
            "FAILED: a (port)\nthe other nodes cannot report to the master: they say why\n") in out


def test_a_job_of_one_node_whose_port_is_taken_names_no_other_nodes(capsys) -> None:
    """One node: the port's line and the verdict, no word of other nodes reporting."""
    with socket.socket() as foreign:
        foreign.bind(("127.0.0.1", 0))
        foreign.listen()
        port = foreign.getsockname()[1]
        plan = Plan(False, "0", "a", "127.0.0.1", port, (), ("a",), (("0", "a"),), True, "k" * 16)
        master = edge._Master(edge.Mine(plan, CELLS, {}, ()), edge.Bound(5, time.monotonic() + 5))
        assert master.run() == 1
    out = capsys.readouterr().out
    comm = Path("/proc/self/comm").read_text().strip()
    assert out.endswith(f"a port: 127.0.0.1:{port} is already in use (by pid {os.getpid()}, "
                        f"{comm})\nFAILED: a (port)\n")
    assert "cannot report" not in out


def test_the_check_of_another_job_on_the_port_is_named(capsys) -> None:
    port = _free_port()
    thread, _status = _master(port, time.monotonic() + 1.5, key="a" * 16)
    assert _client(port, 3, key="b" * 16) == 1
    thread.join(10)
    assert (f"b port: 127.0.0.1:{port} is already in use by the derive-env check of another "
            "job (on a)\n") in capsys.readouterr().out


def test_nothing_listening_fails_within_the_bound(capsys) -> None:
    port = _free_port()
    start = time.monotonic()
    assert _client(port, 1.5) == 1
    assert time.monotonic() - start < 1.5
    assert (f"b port: cannot connect to 127.0.0.1:{port} from b within 1.5 s: connection "
            "refused at 127.0.0.1 (nothing listens there: is the check running on the "
            "master?)\n") in capsys.readouterr().out


def test_a_node_that_never_reports_is_named_by_the_master(capsys) -> None:
    port = _free_port()
    start = time.monotonic()
    thread, status = _master(port, start + 1.5)
    thread.join(10)
    assert status == [1]
    assert time.monotonic() - start < 1.5
    assert ("b port: b did not report to the master (not started, or it cannot connect)\n"
            "FAILED: b (port)\n") in capsys.readouterr().out
