"""cli/command.py, the command line (contract sections 2 and 7): options, usage errors,
dry-run, on-error.

In-process tests use click's CliRunner with the exec replaced by a fake that raises (so no
test can replace the runner's process). Everything that really execs runs as a subprocess,
``python -m derive_env`` or the console script, with an explicit environment built from
scratch: never this machine's BACKENDAI_* variables, and DERIVE_ENV_LABELS_FILE always
pointing at a file of the test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

import derive_env.cli
from derive_env import __version__
from derive_env.cli.command import cli
from derive_env.cli.envfile import parse_env_file
from helpers import Execed, backendai_job, console_script, not_opted_in_note, tomllib

PREFIX = "ai.backend.distributed."
FW = PREFIX + "frameworks"
ON_ERROR = PREFIX + "on-error"
LABELS_VAR = "DERIVE_ENV_LABELS_FILE"
SECRET = "s3cr3t-AKIA-do-not-print-7f3a"
DOCUMENTED_EXIT_CODES = {0, 2, 3, 4, 5, 126, 127}
NOT_OPTED_IN = (
    "not opted in: the image has no label ai.backend.distributed.frameworks\n"
    "nothing is derived; the command runs with the environment unchanged\n"
)
#: The same without a labels file (bare metal): the job's options, no image.
NOT_OPTED_IN_JOB = (
    "not opted in: the job gives no frameworks (derive-env --frameworks pytorch, or "
    "DERIVE_ENV_FRAMEWORKS=pytorch)\n"
    "nothing is derived; the command runs with the environment unchanged\n"
)
HOSTS_ORDER = "sub2,main1,sub1"  # Backend.AI does not order HOSTS
CANONICAL = ["main1", "sub1", "sub2"]


def node_env(host: str) -> dict[str, str]:
    """The Backend.AI variables of one container of the 3-node session, plus a secret."""
    rank = CANONICAL.index(host)
    role, idx = host[:-1], host[-1]
    return {
        "BACKENDAI_CLUSTER_SIZE": "3",
        "BACKENDAI_CLUSTER_HOSTS": HOSTS_ORDER,
        "BACKENDAI_CLUSTER_HOST": host,
        "BACKENDAI_CLUSTER_ROLE": role,
        "BACKENDAI_CLUSTER_IDX": idx,
        "BACKENDAI_CLUSTER_LOCAL_RANK": str(rank),
        "BACKENDAI_CLUSTER_REPLICAS": "main:1,sub:2",
        "BACKENDAI_SESSION_ID": "sess-42",
        "GPU_COUNT": "2",
        "SECRET_KEY": SECRET,
        "AWS_SECRET_ACCESS_KEY": SECRET,
    }


def expected(host: str) -> dict[str, str]:
    """What pytorch + tensorflow derive for ``host`` (the oracle, written out by hand)."""
    rank = CANONICAL.index(host)
    workers = ",".join(f'"{h}:2222"' for h in CANONICAL)
    return {
        "MASTER_ADDR": "main1",
        "MASTER_PORT": "29500",
        "NODE_RANK": str(rank),
        "PET_NNODES": "3",
        "PET_NODE_RANK": str(rank),
        "PET_MASTER_ADDR": "main1",
        "PET_MASTER_PORT": "29500",
        "PET_NPROC_PER_NODE": "2",
        "TF_CONFIG": (
            f'{{"cluster":{{"worker":[{workers}]}},"task":{{"type":"worker","index":{rank}}}}}'
        ),
        "DERIVE_ENV_RUN_ID": "0c8fba107282d0d0",  # the session's: the same on every node
    }


def write_labels(path: Path, labels: object) -> Path:
    path.write_text(json.dumps(labels), encoding="utf-8")
    return path


def write_env_file(path: Path, env: Mapping[str, str], labels_file: Path) -> Path:
    """A dotenv file with ``env``, a comment, an ``export`` line and the labels file variable."""
    lines = ["# written by test_command.py", "", f"export {LABELS_VAR}={labels_file}"]
    lines += [f"{k}={v}" for k, v in env.items()]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def empty_labels(tmp_path: Path) -> Path:
    return write_labels(tmp_path / "no-labels.json", {})


@pytest.fixture
def sub1_env(tmp_path: Path, empty_labels: Path) -> Path:
    return write_env_file(tmp_path / "sub1.env", node_env("sub1"), empty_labels)


def invoke(args: Sequence[str], stdin: str | None = None) -> Result:
    return CliRunner().invoke(cli, list(args), input=stdin, prog_name="derive-env")



def base_env(labels_file: Path, **extra: str) -> dict[str, str]:
    """A fresh environment for a subprocess: PATH, the labels file, ``extra``."""
    return {"PATH": os.environ["PATH"], LABELS_VAR: str(labels_file), **extra}


def run_shim(
    args: Sequence[str | bytes],
    env: Mapping[str, str],
    *,
    script: bool = True,
    stdin: bytes | None = None,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    prefix = [console_script()] if script else [sys.executable, "-m", "derive_env"]
    return subprocess.run(
        [*prefix, *args], env=dict(env), input=stdin, capture_output=True, cwd=cwd,
        timeout=120, check=False,
    )


def text(data: bytes) -> str:
    return data.decode("utf-8", "backslashreplace")


# --------------------------------------------------------------------------- help, version


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help(flag: str) -> None:
    result = invoke([flag])
    assert result.exit_code == 0
    out = result.stdout
    assert out.startswith("Usage: derive-env [OPTIONS] [--] COMMAND [ARG]...\n")
    for option in ("--dry-run", "--format [env|json|toml|shell|hosts|openmpi-hostfile|"
                   "mpich-hostfile|deepspeed-hostfile|horovod-hosts|digest|digest-facts]",
                       "--explain",
                   "--label KEY=VALUE", "--labels-file PATH", "--env-file PATH", "--version",
                   "-h, --help"):
        assert option in out
    assert "derive-env -- torchrun train.py" in out
    assert (
        "Exit codes: 0 ok (or the command's own status), 1 dry-run output not written, 2 usage,"
    ) in out
    assert "3 bad cluster variables, 4 bad image label, 5 environment too large, 126 command" in out
    assert "executable, 127 not found, 130 interrupted." in out
    # the wheel carries no docs: --help points at them (the wheel's Documentation URL)
    assert out.endswith("  Docs, and troubleshooting by message (operator-guide.md):\n"
                        "  https://github.com/derive-env/derive-env/tree/main/docs\n")


def test_help_via_console_script(tmp_path: Path, empty_labels: Path) -> None:
    result = run_shim(["--help"], base_env(empty_labels))
    assert result.returncode == 0
    assert text(result.stdout).startswith("Usage: derive-env [OPTIONS] [--] COMMAND [ARG]...")
    assert result.stderr == b""


def test_version() -> None:
    result = invoke(["--version"])
    assert result.exit_code == 0
    assert result.stdout == f"derive-env, version {__version__}\n"


@pytest.mark.parametrize("script", [True, False], ids=["console-script", "python-m"])
def test_version_via_subprocess(empty_labels: Path, script: bool) -> None:
    result = run_shim(["--version"], base_env(empty_labels), script=script)
    assert (result.returncode, text(result.stdout)) == (0, f"derive-env, version {__version__}\n")


# --------------------------------------------------------------------------- usage errors


@pytest.mark.parametrize("option", ["--bogus", "-x", "--dryrun", "--dry", "--lable"])
def test_unknown_option_before_command_is_a_usage_error(
    clean_environ: Path, fake_exec: None, option: str
) -> None:
    result = invoke([option, "touch", "marker"])
    assert result.exit_code == 2
    assert f"Error: No such option '{option}'" in result.stderr
    assert not isinstance(result.exception, Execed)


@pytest.mark.parametrize("option", ["--bogus", "-x", "--dryrun"])
def test_unknown_option_is_never_taken_for_the_command(
    tmp_path: Path, empty_labels: Path, option: str
) -> None:
    marker = tmp_path / "marker"
    result = run_shim([option, "touch", str(marker)], base_env(empty_labels), cwd=tmp_path)
    assert result.returncode == 2
    assert f"No such option '{option}'" in text(result.stderr)
    assert not marker.exists()


def test_no_command_fast_path(empty_labels: Path) -> None:
    result = run_shim(["--"], base_env(empty_labels))
    assert result.returncode == 2
    assert text(result.stderr) == (
        "derive-env: error: no command given. Usage: derive-env [OPTIONS] -- COMMAND [ARG]... "
        "or derive-env --dry-run (see derive-env --help)\n"
    )


def test_no_arguments_at_all_is_a_usage_error(empty_labels: Path) -> None:
    result = run_shim([], base_env(empty_labels))
    assert result.returncode == 2
    assert "Error: no command given" in text(result.stderr)
    assert "Traceback" not in text(result.stderr)


# --------------------------------------------------------------------------- `--` handling


def test_double_dash_makes_dry_run_the_command(sub1_env: Path, fake_exec: None) -> None:
    result = invoke(["--env-file", str(sub1_env), "--label", FW + "=pytorch", "--", "--dry-run"])
    assert isinstance(result.exception, Execed), result.output
    assert result.exception.argv == ["--dry-run"]
    assert result.stdout == ""
    env = result.exception.env
    assert env["MASTER_ADDR"] == "main1"
    assert env["NODE_RANK"] == "1"
    assert env["SECRET_KEY"] == SECRET  # the command gets the whole environment


def test_options_after_the_command_belong_to_the_command(
    clean_environ: Path, fake_exec: None
) -> None:
    result = invoke(["--label", FW + "=pytorch", "cmd", "--dry-run", "--label", "x", "--", "-h"])
    assert isinstance(result.exception, Execed), result.output
    assert result.exception.argv == ["cmd", "--dry-run", "--label", "x", "--", "-h"]


def test_second_double_dash_belongs_to_the_command(clean_environ: Path, fake_exec: None) -> None:
    result = invoke(["--label", FW + "=pytorch", "--", "--", "--dry-run"])
    assert isinstance(result.exception, Execed), result.output
    assert result.exception.argv == ["--", "--dry-run"]


@pytest.mark.parametrize(
    "argv",
    [["--", "--dry-run", "--help"], ["--", "-h"], ["cmd", "--version"]],
)
def test_fast_path_main_passes_everything_after_double_dash(
    monkeypatch: pytest.MonkeyPatch, clean_environ: Path, fake_exec: None, argv: list[str]
) -> None:
    from derive_env.__main__ import main

    monkeypatch.setattr(sys, "argv", ["derive-env", *argv])
    with pytest.raises(Execed) as info:
        main()
    assert info.value.argv == (argv[1:] if argv[0] == "--" else argv)


@pytest.mark.parametrize("with_options", [True, False], ids=["click", "fast-path"])
def test_command_named_dry_run_is_run(tmp_path: Path, with_options: bool) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    command = bin_dir / "--dry-run"
    command.write_text('#!/bin/sh\necho "ran $0 with [$*] MASTER_ADDR=$MASTER_ADDR"\n')
    command.chmod(0o755)
    labels = write_labels(tmp_path / "labels.json", {FW: "pytorch"})
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", LABELS_VAR: str(labels)}
    options = ["--label", PREFIX + "master-port=1234"] if with_options else []
    result = run_shim([*options, "--", "--dry-run", "--format", "json"], env)
    assert result.returncode == 0, text(result.stderr)
    assert text(result.stdout) == (
        f"ran {command} with [--format json] MASTER_ADDR=127.0.0.1\n"
    )


# --------------------------------------------------------------------------- dry-run formats


def labels_args(tmp_path: Path, source: str, labels: Mapping[str, str]) -> tuple[list[str], str]:
    """The options (and stdin) that give ``labels`` through ``source``."""
    if source == "label":
        return [arg for k, v in labels.items() for arg in ("--label", f"{k}={v}")], ""
    if source == "labels-file":
        return ["--labels-file", str(write_labels(tmp_path / "flat.json", dict(labels)))], ""
    inspect = [{"Id": "sha256:abc", "Config": {"Labels": {**labels, "maintainer": "x"}}}]
    if source == "inspect-file":
        return ["--labels-file", str(write_labels(tmp_path / "inspect.json", inspect))], ""
    if source == "stdin-flat":
        return ["--labels-file", "-"], json.dumps(dict(labels))
    assert source == "stdin-inspect"
    return ["--labels-file", "-"], json.dumps(inspect)


LABEL_SOURCES = ["label", "labels-file", "inspect-file", "stdin-flat", "stdin-inspect"]
BOTH = {FW: "pytorch,tensorflow"}


@pytest.mark.parametrize("source", LABEL_SOURCES)
@pytest.mark.parametrize("host", CANONICAL)
def test_dry_run_json_is_exactly_the_changed_variables(
    tmp_path: Path, empty_labels: Path, source: str, host: str
) -> None:
    env_file = write_env_file(tmp_path / f"{host}.env", node_env(host), empty_labels)
    options, stdin = labels_args(tmp_path, source, BOTH)
    result = invoke(["--env-file", str(env_file), *options, "--dry-run", "--format", "json"], stdin)
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    assert result.stdout.endswith("}\n") and result.stdout.count("\n") == 1
    document = json.loads(result.stdout)
    assert document == expected(host)
    assert all(isinstance(v, str) for v in document.values())
    assert list(document) == list(expected(host))  # framework order, stable


def test_dry_run_env_format(sub1_env: Path) -> None:
    result = invoke(["--env-file", str(sub1_env), "--label", FW + "=pytorch,tensorflow",
                     "--dry-run", "--format", "env"])
    assert result.exit_code == 0, result.output
    assert result.stdout == "".join(f"{k}={v}\n" for k, v in expected("sub1").items())


def test_dry_run_default_format_is_env(sub1_env: Path) -> None:
    result = invoke(["--env-file", str(sub1_env), "--label", FW + "=pytorch,tensorflow",
                     "--dry-run"])
    assert result.exit_code == 0, result.output
    assert result.stdout == "".join(f"{k}={v}\n" for k, v in expected("sub1").items())


def test_dry_run_toml_format(sub1_env: Path) -> None:
    result = invoke(["--env-file", str(sub1_env), "--label", FW + "=pytorch,tensorflow",
                     "--dry-run", "--format", "toml"])
    assert result.exit_code == 0, result.output
    assert tomllib.loads(result.stdout) == expected("sub1")
    assert result.stdout.splitlines()[0] == 'MASTER_ADDR = "main1"'


def test_dry_run_shell_format_is_safe_to_eval(sub1_env: Path) -> None:
    result = invoke(["--env-file", str(sub1_env), "--label", FW + "=pytorch,tensorflow",
                     "--dry-run", "--format", "shell"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "export MASTER_ADDR='main1'"
    assert all(line.startswith("export ") for line in lines)
    names = list(expected("sub1"))
    script = (
        'eval "$1"; for n in ' + " ".join(names)
        + '; do printf "%s=%s\\n" "$n" "$(printenv "$n")"; done'
    )
    shell = subprocess.run(
        ["sh", "-c", script, "sh", result.stdout], env={"PATH": os.environ["PATH"]},
        capture_output=True, text=True, timeout=30, check=True,
    )
    assert shell.stdout == "".join(f"{k}={v}\n" for k, v in expected("sub1").items())


def test_kept_user_values_left_out_of_json_and_shown_as_kept_in_explain(
    tmp_path: Path, empty_labels: Path
) -> None:
    # PET_NNODES=3:3 states the derived 3 as data (torchrun's MIN:MAX), so it is kept.
    env = {**node_env("sub1"), "MASTER_PORT": "1234", "PET_NNODES": "3:3"}
    env_file = write_env_file(tmp_path / "kept.env", env, empty_labels)
    args = ["--env-file", str(env_file), "--label", FW + "=pytorch,tensorflow", "--dry-run"]
    result = invoke([*args, "--format", "json"])
    assert result.exit_code == 0, result.output
    want = {k: v for k, v in expected("sub1").items() if k not in ("MASTER_PORT", "PET_NNODES")}
    want["PET_MASTER_PORT"] = "1234"  # a user-set MASTER_PORT feeds PET_MASTER_PORT
    assert json.loads(result.stdout) == want

    explained = invoke([*args, "--explain"])
    assert explained.exit_code == 0, explained.output
    lines = explained.stdout.splitlines()
    at = lines.index("MASTER_PORT        = 1234")
    assert lines[at + 1].strip() == "kept: already set (derived: 29500)"
    at = lines.index("PET_NNODES         = 3:3")
    assert lines[at + 1].strip() == "kept: already set (derived: 3)"
    at = lines.index("PET_MASTER_PORT    = 1234")
    assert lines[at + 1].strip() == "source: same as MASTER_PORT: MASTER_PORT (already set)"


def test_template_session_listing_workers_first_starts_without_a_message(
    tmp_path: Path, empty_labels: Path
) -> None:
    """Issue 6: main:1,sub:2 requested sub first (sub1=0, sub2=1, main1=2): every container
    exits 0 with the canonical node rank; contract section 5 (revised, issue 15 item 6):
    silently, --explain alone shows both values."""
    backendai = {"main1": 2, "sub1": 0, "sub2": 1}
    for host, local_rank in backendai.items():
        env = {**node_env(host), "BACKENDAI_CLUSTER_LOCAL_RANK": str(local_rank)}
        env_file = write_env_file(tmp_path / f"{host}.env", env, empty_labels)
        result = invoke(["--env-file", str(env_file), "--label", FW + "=pytorch", "--dry-run",
                         "--format", "json"])
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["NODE_RANK"] == str(CANONICAL.index(host))
        assert result.stderr == ""
        explained = invoke(["--env-file", str(env_file), "--label", FW + "=pytorch",
                            "--dry-run", "--explain"])
        assert (f"BACKENDAI_CLUSTER_LOCAL_RANK={local_rank}: its position in the order the "
                "session's request listed the role groups, which a container cannot see (not "
                "used as the node rank)") in explained.stdout.splitlines()


def test_explain_names_topology_and_sources(sub1_env: Path) -> None:
    result = invoke(["--env-file", str(sub1_env), "--label", FW + "=pytorch,tensorflow",
                     "--dry-run", "--explain"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[:7] == [
        "source: backendai session sess-42, 3 nodes; this container is sub1, node rank 1",
        "nodes in canonical order (from BACKENDAI_CLUSTER_REPLICAS: role main first, then the "
        "roles in REPLICAS order, each role's hosts {role}1 to {role}{count}):",
        "     0  main1  (master)",
        "     1  sub1  (this container)",
        "     2  sub2",
        "source seen: backendai (a Backend.AI session), for the node layer",
        "frameworks: pytorch, tensorflow (mode torchrun)",
    ]
    for name, value in expected("sub1").items():
        assert f"{name:<18} = {value}" in lines
    at = lines.index("MASTER_ADDR        = main1")
    assert lines[at + 1].strip() == (
        "source: BACKENDAI_CLUSTER_HOSTS + BACKENDAI_CLUSTER_REPLICAS: node rank 0 in "
        "canonical order"
    )
    at = lines.index("PET_NPROC_PER_NODE = 2")
    assert lines[at + 1].strip() == "source: GPU_COUNT: GPU count of this node"


# --------------------------------------------------------------------------- not opted in


@pytest.mark.parametrize(
    ("fmt", "output"), [("json", "{}\n"), ("env", ""), ("toml", ""), ("shell", "")]
)
def test_not_opted_in_prints_nothing_derived(sub1_env: Path, fmt: str, output: str) -> None:
    result = invoke(["--env-file", str(sub1_env), "--dry-run", "--format", fmt])
    assert result.exit_code == 0, result.output
    assert result.stdout == output
    assert result.stderr == not_opted_in_note(backendai_job(3))


def test_not_opted_in_explain(sub1_env: Path) -> None:
    result = invoke(["--env-file", str(sub1_env), "--dry-run", "--explain"])
    assert result.exit_code == 0, result.output
    assert result.stdout == NOT_OPTED_IN


def stray_label_message(label: str, value: str) -> str:
    """The error for a distributed label set without the opt-in label."""
    return (
        f"label {label}={value!r} is set but ai.backend.distributed.frameworks is not, so the "
        "image did not opt in and nothing would be derived: is the frameworks label misspelt? "
        "Set ai.backend.distributed.frameworks, or remove the ai.backend.distributed.* labels"
    )


def test_other_labels_without_frameworks_are_not_an_opt_in(sub1_env: Path) -> None:
    # Not an opt-in, and no longer silently ignored: a label error (exit 4), nothing printed.
    result = invoke(["--env-file", str(sub1_env), "--label", PREFIX + "master-port=1234",
                     "--dry-run", "--format", "json"])
    assert (result.exit_code, result.stdout) == (4, "")
    assert result.stderr == (
        f"derive-env: error: {stray_label_message(PREFIX + 'master-port', '1234')}\n"
    )


def test_not_opted_in_exec_passes_the_environment_unchanged(
    sub1_env: Path, fake_exec: None
) -> None:
    result = invoke(["--env-file", str(sub1_env), "--", "train", "--epochs", "3"])
    assert isinstance(result.exception, Execed), result.output
    assert result.exception.argv == ["train", "--epochs", "3"]
    env_lines = sub1_env.read_text(encoding="utf-8")
    assert result.exception.env == parse_env_file(env_lines, "x")


# --------------------------------------------------------------------------- secrets


DRY_RUN_MODES = [
    ["--format", "env"], ["--format", "json"], ["--format", "toml"], ["--format", "shell"],
    ["--explain"],
]


@pytest.mark.parametrize("mode", DRY_RUN_MODES, ids=lambda m: m[-1])
@pytest.mark.parametrize(
    "labels",
    [BOTH, {}, {**BOTH, PREFIX + "pytorch-mode": "process-per-container"}],
    ids=["opted-in", "not-opted-in", "per-container"],
)
def test_dry_run_never_prints_input_variables(
    sub1_env: Path, mode: list[str], labels: dict[str, str]
) -> None:
    options = [arg for k, v in labels.items() for arg in ("--label", f"{k}={v}")]
    result = invoke(["--env-file", str(sub1_env), *options, "--dry-run", *mode])
    assert result.exit_code == 0, result.output
    for leaked in (SECRET, "SECRET_KEY", "AWS_SECRET_ACCESS_KEY", "BACKENDAI_SESSION_ID=",
                   "BACKENDAI_CLUSTER_HOSTS="):
        assert leaked not in result.stdout
        assert leaked not in result.stderr


@pytest.mark.parametrize("mode", DRY_RUN_MODES, ids=lambda m: m[-1])
def test_dry_run_never_prints_secrets_on_error_or_warning(
    tmp_path: Path, empty_labels: Path, mode: list[str]
) -> None:
    env = {**node_env("sub1"), "BACKENDAI_CLUSTER_SIZE": "4"}
    env_file = write_env_file(tmp_path / "bad.env", env, empty_labels)
    for on_error in ("fail", "warn"):
        result = invoke(["--env-file", str(env_file), "--label", FW + "=pytorch",
                         "--label", f"{ON_ERROR}={on_error}", "--dry-run", *mode])
        assert result.exit_code == (3 if on_error == "fail" else 0)
        assert SECRET not in result.output


def test_process_environment_secrets_not_printed(
    monkeypatch: pytest.MonkeyPatch, clean_environ: Path
) -> None:
    for key, value in node_env("main1").items():
        monkeypatch.setenv(key, value)
    for mode in DRY_RUN_MODES:
        result = invoke(["--label", FW + "=pytorch,tensorflow", "--dry-run", *mode])
        assert result.exit_code == 0, result.output
        assert SECRET not in result.output
    result = invoke(["--label", FW + "=pytorch,tensorflow", "--dry-run", "--format", "json"])
    assert json.loads(result.stdout) == expected("main1")


# --------------------------------------------------------------------------- labels files


def test_labels_variable_naming_a_missing_file_exits_4(tmp_path: Path) -> None:
    missing = tmp_path / "missing.json"
    marker = tmp_path / "marker"
    env = base_env(missing)
    result = run_shim(["touch", str(marker)], env)
    assert result.returncode == 4
    assert text(result.stderr) == (
        f"derive-env: error: labels file ($DERIVE_ENV_LABELS_FILE) {str(missing)!r}: cannot be "
        "read (No such file or directory)\n"
        "derive-env: note: the command was not run (exit 4)\n"
    )
    assert not marker.exists()
    dry = run_shim(["--dry-run", "--format", "json"], env)
    assert dry.returncode == 4
    assert dry.stdout == b""
    assert text(dry.stderr) == (
        f"derive-env: error: labels file ($DERIVE_ENV_LABELS_FILE) {str(missing)!r}: cannot be "
        "read (No such file or directory)\n"
    )


def test_labels_variable_in_env_file_naming_a_missing_file_exits_4(
    tmp_path: Path, empty_labels: Path
) -> None:
    missing = tmp_path / "missing.json"
    env_file = write_env_file(tmp_path / "x.env", node_env("sub1"), missing)
    result = invoke(["--env-file", str(env_file), "--dry-run", "--format", "json"])
    assert result.exit_code == 4
    assert result.stdout == ""
    assert result.stderr == (
        f"derive-env: error: labels file ($DERIVE_ENV_LABELS_FILE) {str(missing)!r}: cannot be "
        "read (No such file or directory)\n"
    )


def test_labels_file_option_missing_exits_4(sub1_env: Path, tmp_path: Path) -> None:
    missing = tmp_path / "nope.json"
    result = invoke(["--env-file", str(sub1_env), "--labels-file", str(missing), "--dry-run"])
    assert result.exit_code == 4
    assert result.stderr == (
        f"derive-env: error: --labels-file {str(missing)!r}: cannot be read (No such file or "
        "directory)\n"
    )


def test_labels_file_of_two_images_exits_4(tmp_path: Path) -> None:
    """`docker image inspect A B` in a labels file: which image's labels? It used the first."""
    images = [{"Config": {"Labels": {FW: name}}} for name in ("pytorch", "jax")]
    two = tmp_path / "two.json"
    two.write_text(json.dumps(images), encoding="utf-8")
    result = invoke(["--dry-run", "--env-file", "-", "--labels-file", str(two)],
                    stdin="BACKENDAI_CLUSTER_SIZE=1\n")
    assert (result.exit_code, result.stdout) == (4, "")
    assert result.stderr == (
        f"derive-env: error: labels file {two}: holds 2 images; inspect one (docker image "
        "inspect IMAGE > FILE)\n"
    )


def _near_miss_examples() -> tuple[list[str], list[str]]:
    """The names operator-guide.md section 6 gives as near misses (an error) and as names
    that pass unchecked, from its sentence on near misses."""
    guide = (Path(__file__).resolve().parents[2] / "docs" / "operator-guide.md").read_text(
        encoding="utf-8")
    section = guide[guide.index("\n## 6. "):guide.index("\n## 7. ")]
    sentence = " ".join(section[section.index("checked for near\n"):].split("\n\n")[0].split())
    errors, _, passing = sentence.partition("; any other name passes unchecked")
    names = [[n for n in part.split("`")[1::2] if n != "DERIV"] for part in (errors, passing)]
    return names[0], names[1]


def test_near_miss_examples_of_the_guide() -> None:
    """Issue 23: the guide said any name two edits from one derive-env reads is an error;
    only the DERIVE_ENV_* names are checked (MASTER_PORTS passes)."""
    errors, passing = _near_miss_examples()
    assert (len(errors), len(passing)) == (2, 4)
    for name in [*errors, *passing]:
        result = invoke(["--dry-run", "--frameworks", "pytorch", "--env-file", "-"],
                        stdin=f"BACKENDAI_CLUSTER_SIZE=1\n{name}=1\n")
        if name in errors:
            assert result.exit_code == 4, name
            assert result.stderr.startswith(
                f"derive-env: error: variable {name}='1': expected the name DERIVE_ENV_")
        else:
            assert (result.exit_code, result.stderr) == (0, ""), name


def test_default_labels_path_missing_means_not_opted_in(
    monkeypatch: pytest.MonkeyPatch, clean_environ: Path, tmp_path: Path
) -> None:
    monkeypatch.delenv(LABELS_VAR)
    monkeypatch.setattr(
        derive_env.cli, "DEFAULT_LABELS_FILE", str(tmp_path / "etc" / "labels.json")
    )
    for mode, output in ((["--format", "json"], "{}\n"), (["--explain"], NOT_OPTED_IN_JOB)):
        result = invoke(["--dry-run", *mode])
        assert (result.exit_code, result.stdout, result.stderr) == (0, output, "")


def test_default_labels_path_missing_subprocess(tmp_path: Path) -> None:
    if Path("/etc/derive-env/labels.json").exists():
        pytest.skip("this machine has /etc/derive-env/labels.json")
    env = {"PATH": os.environ["PATH"], **node_env("sub1")}
    # a session of 3 nodes, no labels file: the job's options, no image named
    note = not_opted_in_note(backendai_job(3), image=False).encode()
    result = run_shim(["--dry-run", "--format", "json"], env)
    assert (result.returncode, result.stdout, result.stderr) == (0, b"{}\n", note)
    result = run_shim(["sh", "-c", 'test -z "$MASTER_ADDR" && echo "$BACKENDAI_CLUSTER_HOST"'], env)
    assert (result.returncode, result.stdout, result.stderr) == (0, b"sub1\n", note)


def test_labels_from_variable_file_via_subprocess(tmp_path: Path) -> None:
    labels = write_labels(tmp_path / "labels.json", BOTH)
    env = base_env(labels, **{k: v for k, v in node_env("sub2").items()})
    result = run_shim(["--dry-run", "--format", "json"], env, script=False)
    assert result.returncode == 0, text(result.stderr)
    assert json.loads(result.stdout) == expected("sub2")


def test_labels_from_stdin_via_subprocess(tmp_path: Path, empty_labels: Path) -> None:
    env = base_env(empty_labels, **node_env("main1"))
    inspect = json.dumps([{"Config": {"Labels": BOTH}}]).encode()
    result = run_shim(["--labels-file", "-", "--dry-run", "--format", "json"], env, stdin=inspect)
    assert result.returncode == 0, text(result.stderr)
    assert json.loads(result.stdout) == expected("main1")


# --------------------------------------------------------------------------- on-error


BAD_TOPOLOGY = {
    "BACKENDAI_CLUSTER_SIZE": "3",
    "BACKENDAI_CLUSTER_HOSTS": "main1,sub1",
    "BACKENDAI_CLUSTER_HOST": "sub1",
}
BAD_TOPOLOGY_MESSAGE = (
    "BACKENDAI_CLUSTER_HOSTS='main1,sub1': expected exactly 3 entries "
    "(BACKENDAI_CLUSTER_SIZE=3), got 2"
)
CHECK_UNCHANGED = (
    'test -z "$MASTER_ADDR" && test -z "$PET_NNODES" && test -z "$NODE_RANK" '
    '&& test "$BACKENDAI_CLUSTER_SIZE" = 3 && echo unchanged'
)


@pytest.mark.parametrize("script", [True, False], ids=["console-script", "python-m"])
def test_on_error_warn_runs_the_command_with_the_environment_unchanged(
    tmp_path: Path, script: bool
) -> None:
    labels = write_labels(tmp_path / "labels.json", {FW: "pytorch", ON_ERROR: "warn"})
    env = base_env(labels, **BAD_TOPOLOGY)
    result = run_shim(["sh", "-c", CHECK_UNCHANGED], env, script=script)
    assert result.returncode == 0, text(result.stderr)
    assert result.stdout == b"unchanged\n"
    assert text(result.stderr) == (
        f"derive-env: warning: {BAD_TOPOLOGY_MESSAGE}\n"
        "derive-env: warning: on-error=warn: running the command with the environment "
        "unchanged\n"
    )


def test_on_error_warn_with_bad_label_value_runs_the_command(tmp_path: Path) -> None:
    labels = write_labels(tmp_path / "labels.json",
                          {FW: "pytorch", ON_ERROR: "warn", PREFIX + "master-port": "0"})
    env = base_env(labels, **node_env("sub1"))
    result = run_shim(["sh", "-c", 'test -z "$MASTER_ADDR" && echo unchanged'], env)
    assert (result.returncode, result.stdout) == (0, b"unchanged\n"), text(result.stderr)
    assert text(result.stderr).startswith(
        "derive-env: warning: label ai.backend.distributed.master-port='0': expected a port "
        "number 1-65535\n"
    )


def test_on_error_warn_keeps_the_commands_exit_status(tmp_path: Path) -> None:
    labels = write_labels(tmp_path / "labels.json", {FW: "pytorch", ON_ERROR: "warn"})
    result = run_shim(["sh", "-c", "exit 9"], base_env(labels, **BAD_TOPOLOGY))
    assert result.returncode == 9


#: What a dry run prints when on-error=warn swallowed an error: nothing derived, and still
#: valid output of the format (json: an empty object).
WARN_DRY_RUN_OUTPUT = {
    "env": b"", "json": b"{}\n", "toml": b"", "shell": b"",
    "--explain": b"nothing derived: on-error=warn (see the warning above)\n",
}


@pytest.mark.parametrize("mode", DRY_RUN_MODES, ids=lambda m: m[-1])
def test_on_error_warn_dry_run_prints_nothing_and_exits_0(tmp_path: Path, mode: list[str]) -> None:
    labels = write_labels(tmp_path / "labels.json", {FW: "pytorch", ON_ERROR: "warn"})
    result = run_shim(["--dry-run", *mode], base_env(labels, **BAD_TOPOLOGY))
    assert result.returncode == 0
    assert result.stdout == WARN_DRY_RUN_OUTPUT[mode[-1]]
    if mode[-1] == "json":
        assert json.loads(result.stdout) == {}
    assert text(result.stderr) == (
        f"derive-env: warning: {BAD_TOPOLOGY_MESSAGE}\n"
        "derive-env: warning: on-error=warn: nothing derived\n"
    )


@pytest.mark.parametrize("on_error", ["fail", None])
def test_on_error_fail_exits_3_and_does_not_run_the_command(
    tmp_path: Path, on_error: str | None
) -> None:
    labels = {FW: "pytorch"} | ({ON_ERROR: on_error} if on_error else {})
    env = base_env(write_labels(tmp_path / "labels.json", labels), **BAD_TOPOLOGY)
    marker = tmp_path / "marker"
    result = run_shim(["touch", str(marker)], env)
    assert result.returncode == 3
    assert result.stdout == b""
    assert text(result.stderr) == (
        f"derive-env: error: {BAD_TOPOLOGY_MESSAGE}\n"
        "derive-env: note: the command was not run (exit 3)\n"
    )
    assert not marker.exists()


def test_on_error_fail_dry_run_exits_3(tmp_path: Path) -> None:
    env = base_env(write_labels(tmp_path / "labels.json", {FW: "pytorch"}), **BAD_TOPOLOGY)
    result = run_shim(["--dry-run", "--format", "json"], env)
    assert (result.returncode, result.stdout) == (3, b"")
    assert text(result.stderr) == f"derive-env: error: {BAD_TOPOLOGY_MESSAGE}\n"


def test_invalid_on_error_value_is_a_label_error(tmp_path: Path) -> None:
    labels = write_labels(tmp_path / "labels.json", {FW: "pytorch", ON_ERROR: "wran"})
    marker = tmp_path / "marker"
    result = run_shim(["touch", str(marker)], base_env(labels, **BAD_TOPOLOGY))
    assert result.returncode == 4
    assert text(result.stderr).startswith(
        "derive-env: error: label ai.backend.distributed.on-error='wran': expected fail or warn\n"
    )
    assert not marker.exists()


# --------------------------------------------------------------------------- no traceback


def _garbage() -> bytes:
    return bytes(range(256)) * 4 + b"\x00\xff\xfe{[\x80"


Case = tuple[list[str], dict[str, str], bytes | None, int]


def _hostile_cases(tmp_path: Path, empty_labels: Path) -> dict[str, Case]:
    """name -> (args, env, stdin, documented exit code)."""
    opted = write_labels(tmp_path / "opted.json", {FW: "pytorch"})
    garbage = tmp_path / "garbage.json"
    garbage.write_bytes(_garbage())
    deep = tmp_path / "deep.json"
    deep.write_text("{\"a\":" * 50_000 + "1" + "}" * 50_000, encoding="utf-8")
    bad_utf8_env = tmp_path / "latin1.env"
    bad_utf8_env.write_bytes(b"PATH=/usr/bin:/bin\nNAME=Andr\xe9\n")
    nul_env = tmp_path / "nul.env"
    nul_env.write_bytes(f"{LABELS_VAR}={opted}\nPATH=/usr/bin:/bin\n".encode() + b"A=x\x00y\n")
    nul_env_plain = tmp_path / "nul-plain.env"
    nul_env_plain.write_bytes(f"{LABELS_VAR}={empty_labels}\n".encode() + b"A=x\x00y\n")
    many_hosts = ",".join(["main1", *(f"sub{i}" for i in range(1, 10_000))])
    huge_user = tmp_path / "huge.env"
    huge_user.write_text(f"{LABELS_VAR}={opted}\nPATH=/usr/bin:/bin\nBIG={'x' * 204_800}\n",
                         encoding="utf-8")
    plain = base_env(empty_labels)
    cluster = base_env(opted, **BAD_TOPOLOGY)
    return {
        "labels-var-binary": (["true"], base_env(garbage), None, 4),
        "labels-file-binary": (["--labels-file", str(garbage), "--", "true"], plain, None, 4),
        "labels-stdin-binary": (["--labels-file", "-", "--dry-run"], plain, _garbage(), 4),
        "labels-var-directory": (["true"], base_env(tmp_path), None, 4),
        "labels-file-directory": (["--labels-file", str(tmp_path), "--dry-run"], plain, None, 4),
        "labels-deeply-nested": (["--labels-file", str(deep), "--dry-run"], plain, None, 4),
        "label-no-equals": (["--label", "pytorch", "--", "true"], plain, None, 4),
        "label-unknown-framework": (["--label", FW + "=pytorhc", "--dry-run"], plain, None, 4),
        "label-huge-value": (["--label", FW + "=" + "x" * 100_000, "--dry-run"], plain, None, 4),
        "env-file-invalid-utf8": (["--env-file", str(bad_utf8_env), "--", "true"], plain, None, 2),
        "env-file-nul-opted-in": (["--env-file", str(nul_env), "--", "true"], plain, None, 2),
        "env-file-nul-plain": (["--env-file", str(nul_env_plain), "--", "true"], plain, None, 2),
        "env-file-directory": (["--env-file", str(tmp_path), "--dry-run"], plain, None, 2),
        "env-file-missing": (["--env-file", str(tmp_path / "no.env"), "--dry-run"], plain, None, 2),
        "hosts-10000-size-3": (["--dry-run"], {**cluster, "BACKENDAI_CLUSTER_HOSTS": many_hosts},
                               None, 3),
        "size-huge": (["true"], {**cluster, "BACKENDAI_CLUSTER_SIZE": "9" * 5000}, None, 3),
        "size-negative": (["true"], {**cluster, "BACKENDAI_CLUSTER_SIZE": "-3"}, None, 3),
        "size-arabic-digit": (["true"], {**cluster, "BACKENDAI_CLUSTER_SIZE": "\u0663"}, None, 3),
        "hosts-ipv6-zone": (["true"], {**cluster, "BACKENDAI_CLUSTER_HOSTS": "fe80::1%eth0,a,b"},
                            None, 3),
        "master-addr-shell": (["true"], {**base_env(opted), "MASTER_ADDR": "$(rm -rf /)"}, None, 3),
        "master-port-huge": (["true"], {**base_env(opted), "MASTER_PORT": "99999999999"}, None, 3),
        "user-var-200KiB": (["--env-file", str(huge_user), "--", "true"], plain, None, 5),
    }


HOSTILE = [
    "labels-var-binary", "labels-file-binary", "labels-stdin-binary", "labels-var-directory",
    "labels-file-directory", "labels-deeply-nested", "label-no-equals", "label-unknown-framework",
    "label-huge-value", "env-file-invalid-utf8", "env-file-nul-opted-in", "env-file-nul-plain",
    "env-file-directory", "env-file-missing", "hosts-10000-size-3", "size-huge", "size-negative",
    "size-arabic-digit", "hosts-ipv6-zone", "master-addr-shell", "master-port-huge",
    "user-var-200KiB",
]


@pytest.mark.parametrize("case", HOSTILE)
def test_hostile_input_never_gives_a_traceback(
    tmp_path: Path, empty_labels: Path, case: str
) -> None:
    args, env, stdin, code = _hostile_cases(tmp_path, empty_labels)[case]
    result = run_shim(args, env, stdin=stdin, cwd=tmp_path)
    err = text(result.stderr)
    assert "Traceback" not in err, err[-3000:]
    assert result.returncode in DOCUMENTED_EXIT_CODES
    assert result.returncode == code, err[-3000:]
    assert err.startswith("derive-env: error: "), err[:500]
    assert result.stdout == b""


@pytest.mark.parametrize(
    "case",
    [
        "label-value",
        "label-key",
        "hosts-entry",
    ],
)
def test_huge_input_does_not_flood_stderr(tmp_path: Path, case: str) -> None:
    # errors.describe() shortens values to 200 characters "so a huge variable cannot flood
    # the terminal"; the same must hold for every other place a message quotes input.
    huge = "x" * 100_000
    opted = write_labels(tmp_path / "opted.json", {FW: "pytorch"})
    if case == "label-value":
        result = run_shim(["--label", f"{FW}=pytorch,{huge}", "--dry-run"], base_env(opted))
    elif case == "label-key":
        result = run_shim(["--label", f"{PREFIX}{huge}=1", "--dry-run"], base_env(opted))
    else:
        env_file = write_env_file(tmp_path / "h.env", {
            "BACKENDAI_CLUSTER_SIZE": "2", "BACKENDAI_CLUSTER_HOSTS": f"main1,{huge}_",
            "BACKENDAI_CLUSTER_HOST": "main1",
        }, opted)
        result = run_shim(["--env-file", str(env_file), "--dry-run"], base_env(opted))
    assert result.returncode in (3, 4)
    assert "Traceback" not in text(result.stderr)
    assert len(result.stderr) < 4096, f"{len(result.stderr)} bytes of stderr"


# --------------------------------------------------------------------------- several --labels-file


def test_labels_file_is_repeatable_and_later_wins(sub1_env: Path, tmp_path: Path) -> None:
    tensorflow = write_labels(tmp_path / "tensorflow.json", {FW: "tensorflow"})
    pytorch = write_labels(tmp_path / "pytorch.json", {FW: "pytorch"})
    args = ["--env-file", str(sub1_env), "--dry-run", "--format", "json"]
    result = invoke([*args, "--labels-file", str(tensorflow), "--labels-file", str(pytorch)])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {
        k: v for k, v in expected("sub1").items() if k != "TF_CONFIG"
    }
    result = invoke([*args, "--labels-file", str(pytorch), "--labels-file", str(tensorflow)])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {k: expected("sub1")[k]
                                         for k in ("TF_CONFIG", "DERIVE_ENV_RUN_ID")}


def test_labels_file_from_stdin_and_a_file(sub1_env: Path, tmp_path: Path) -> None:
    pytorch = write_labels(tmp_path / "pytorch.json", {FW: "pytorch", PREFIX + "master-port": "1"})
    result = invoke(
        ["--env-file", str(sub1_env), "--labels-file", str(pytorch), "--labels-file", "-",
         "--dry-run", "--format", "json"],
        json.dumps({FW: "pytorch,tensorflow"}),
    )
    assert result.exit_code == 0, result.output
    want = {**expected("sub1"), "MASTER_PORT": "1", "PET_MASTER_PORT": "1"}
    assert json.loads(result.stdout) == want


# --------------------------------------------------------------------------- reading input


def run_shim_redirected(
    redirect: str, args: Sequence[str], env: Mapping[str, str], *, script: bool = True
) -> subprocess.CompletedProcess[bytes]:
    """Run the shim with a shell redirection applied to it (``<&-``, ``>&-``, ``>/dev/full``)."""
    prefix = [console_script()] if script else [sys.executable, "-m", "derive_env"]
    return subprocess.run(
        ["sh", "-c", f'exec "$@" {redirect}', "sh", *prefix, *args], env=dict(env),
        capture_output=True, timeout=120, check=False,
    )


@pytest.mark.parametrize(
    ("option", "code"), [("--labels-file", 4), ("--env-file", 2)]
)
def test_closed_stdin_is_an_error(empty_labels: Path, option: str, code: int) -> None:
    result = run_shim_redirected("<&-", [option, "-", "--dry-run"], base_env(empty_labels))
    assert (result.returncode, result.stdout) == (code, b"")
    assert text(result.stderr) == f"derive-env: error: {option} -: stdin is closed\n"


@pytest.mark.parametrize(
    ("option", "code"), [("--labels-file", 4), ("--env-file", 2)]
)
def test_endless_input_file_is_refused(empty_labels: Path, option: str, code: int) -> None:
    if not os.path.exists("/dev/zero"):
        pytest.skip("no /dev/zero")
    result = run_shim([option, "/dev/zero", "--dry-run"], base_env(empty_labels))
    assert (result.returncode, result.stdout) == (code, b"")
    assert text(result.stderr) == (
        f"derive-env: error: {option} '/dev/zero': larger than 1048576 bytes, too large to be one\n"
    )


def test_empty_labels_from_stdin_is_an_error(sub1_env: Path) -> None:
    result = invoke(["--env-file", str(sub1_env), "--labels-file", "-", "--dry-run"], "")
    assert (result.exit_code, result.stdout) == (4, "")
    assert result.stderr == (
        "derive-env: error: labels file stdin: empty (expected a JSON object of labels)\n"
    )


def test_default_labels_path_unreadable_exits_4(
    monkeypatch: pytest.MonkeyPatch, clean_environ: Path, tmp_path: Path, fake_exec: None
) -> None:
    # Only a missing default file means "not opted in"; a directory there is an error.
    monkeypatch.delenv(LABELS_VAR)
    monkeypatch.setattr(derive_env.cli, "DEFAULT_LABELS_FILE", str(tmp_path))
    message = f"derive-env: error: labels file {str(tmp_path)!r}: cannot be read (Is a directory)\n"
    result = invoke(["--dry-run", "--format", "json"])
    assert (result.exit_code, result.stdout, result.stderr) == (4, "", message)
    result = invoke(["--label", "x=y", "--", "cmd"])
    assert not isinstance(result.exception, Execed)
    assert (result.exit_code, result.stderr) == (
        4, message + "derive-env: note: the command was not run (exit 4)\n"
    )


# --------------------------------------------------------------------------- stray labels


def test_misspelt_frameworks_label_stops_the_plain_entrypoint(tmp_path: Path) -> None:
    labels = write_labels(tmp_path / "labels.json", {PREFIX + "framework": "pytorch"})
    marker = tmp_path / "marker"
    result = run_shim(["touch", str(marker)], base_env(labels, **node_env("sub1")))
    assert result.returncode == 4
    assert result.stdout == b""
    assert text(result.stderr) == (
        f"derive-env: error: {stray_label_message(PREFIX + 'framework', 'pytorch')}\n"
        "derive-env: note: the command was not run (exit 4)\n"
    )
    assert not marker.exists()


def test_capitalised_frameworks_label_is_not_an_opt_in_but_an_error(sub1_env: Path) -> None:
    result = invoke(["--env-file", str(sub1_env), "--label", PREFIX + "Frameworks=pytorch",
                     "--label", PREFIX + "master-port=1234", "--dry-run"])
    assert (result.exit_code, result.stdout) == (4, "")
    # The first stray label in sorted order is named.
    assert result.stderr == (
        f"derive-env: error: {stray_label_message(PREFIX + 'Frameworks', 'pytorch')}\n"
    )


@pytest.mark.parametrize("script", [True, False], ids=["console-script", "python-m"])
def test_stray_label_with_on_error_warn_warns_and_runs_unchanged(
    tmp_path: Path, script: bool
) -> None:
    labels = write_labels(tmp_path / "labels.json",
                          {PREFIX + "framework": "pytorch", ON_ERROR: "warn"})
    check = 'test -z "$MASTER_ADDR" && test -z "$PET_NNODES" && echo "$BACKENDAI_CLUSTER_HOST"'
    result = run_shim(["sh", "-c", check], base_env(labels, **node_env("sub1")), script=script)
    assert (result.returncode, result.stdout) == (0, b"sub1\n"), text(result.stderr)
    assert text(result.stderr) == (
        f"derive-env: warning: {stray_label_message(PREFIX + 'framework', 'pytorch')}\n"
        + not_opted_in_note(backendai_job(3)))


def test_stray_label_with_on_error_warn_dry_run(sub1_env: Path) -> None:
    result = invoke(["--env-file", str(sub1_env), "--label", PREFIX + "framework=pytorch",
                     "--label", ON_ERROR + "=warn", "--dry-run", "--format", "json"])
    assert (result.exit_code, result.stdout) == (0, "{}\n")
    assert result.stderr == (
        f"derive-env: warning: {stray_label_message(PREFIX + 'framework', 'pytorch')}\n"
        + not_opted_in_note(backendai_job(3)))


# --------------------------------------------------------------------------- topology via the CLI


def test_replicas_not_adding_up_to_size_without_hosts_exits_3(
    tmp_path: Path, empty_labels: Path
) -> None:
    env_file = write_env_file(tmp_path / "one.env", {
        "BACKENDAI_CLUSTER_SIZE": "1", "BACKENDAI_CLUSTER_REPLICAS": "main:1,sub:3",
    }, empty_labels)
    result = invoke(["--env-file", str(env_file), "--label", FW + "=pytorch", "--dry-run"])
    assert (result.exit_code, result.stdout) == (3, "")
    assert result.stderr == (
        "derive-env: error: BACKENDAI_CLUSTER_REPLICAS='main:1,sub:3': expected counts adding "
        "up to BACKENDAI_CLUSTER_SIZE=1; they add up to 4\n"
    )


# --------------------------------------------------------------------------- dry-run output


@pytest.mark.parametrize("mode", [["--format", "json"], ["--explain"]], ids=lambda m: m[-1])
@pytest.mark.parametrize("opted_in", [True, False], ids=["opted-in", "not-opted-in"])
def test_dry_run_to_a_closed_stdout_exits_1(
    tmp_path: Path, mode: list[str], opted_in: bool
) -> None:
    labels = write_labels(tmp_path / "labels.json", {FW: "pytorch"} if opted_in else {})
    result = run_shim_redirected(">&-", ["--dry-run", *mode], base_env(labels))
    err = text(result.stderr)
    assert result.returncode == 1, err
    assert "Traceback" not in err
    assert err == "derive-env: error: cannot write the dry-run output: stdout is closed\n"


@pytest.mark.parametrize("mode", [["--format", "json"], ["--explain"]], ids=lambda m: m[-1])
def test_dry_run_to_a_full_stdout_reports_it_without_a_traceback(
    tmp_path: Path, mode: list[str]
) -> None:
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    labels = write_labels(tmp_path / "labels.json", {FW: "pytorch"})
    result = run_shim_redirected(">/dev/full", ["--dry-run", *mode], base_env(labels))
    err = text(result.stderr)
    assert result.returncode != 0
    assert "Traceback" not in err
    assert err.startswith(
        "derive-env: error: cannot write the dry-run output to stdout ([Errno 28] No space "
        "left on device)\n"
    ), err


@pytest.mark.parametrize("mode", [["--format", "json"], ["--explain"]], ids=lambda m: m[-1])
def test_dry_run_to_a_full_stdout_exits_1_with_one_message(
    tmp_path: Path, mode: list[str]
) -> None:
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    labels = write_labels(tmp_path / "labels.json", {FW: "pytorch"})
    result = run_shim_redirected(">/dev/full", ["--dry-run", *mode], base_env(labels))
    assert (result.returncode, text(result.stderr)) == (1, (
        "derive-env: error: cannot write the dry-run output to stdout ([Errno 28] No space "
        "left on device)\n"
    ))


def test_explain_escapes_control_characters_and_survives_undecodable_bytes(
    tmp_path: Path,
) -> None:
    labels = write_labels(tmp_path / "labels.json", {FW: "pytorch,jax"})
    env = {
        b"PATH": os.fsencode(os.environ["PATH"]),
        LABELS_VAR.encode(): os.fsencode(labels),
        b"BACKENDAI_CLUSTER_SIZE": b"1",
        # a kept value and the session id could otherwise forge lines or colour the terminal
        b"BACKENDAI_SESSION_ID": b"s\xff\x1b[31m\nsource: forged",
        # a job-wide value, kept (PET_MASTER_ADDR must now follow MASTER_ADDR)
        b"JAX_COORDINATOR_ADDRESS": b"h1:1234",
        b"PYTHONIOENCODING": b"utf-8",  # strict: an unescaped surrogate could not be written
    }
    result = subprocess.run([console_script(), "--dry-run", "--explain"], env=env,
                            capture_output=True, timeout=120, check=False)
    assert result.returncode == 0, text(result.stderr)
    assert result.stderr == b""
    lines = result.stdout.decode("ascii").splitlines()
    assert lines[0] == (
        "source: backendai session 's\\udcff\\x1b[31m\\nsource: forged', single container"
    )
    at = lines.index("JAX_COORDINATOR_ADDRESS = h1:1234")
    assert lines[at + 1].strip() == "kept: already set (derived: 127.0.0.1:1234)"
    assert not any(line.startswith("source: forged") for line in lines)
    # A malformed one is an error (issue 15, item 7), its value escaped on stderr.
    env[b"JAX_COORDINATOR_ADDRESS"] = b"h\xfe\r\x1b[2K"
    result = subprocess.run([console_script(), "--dry-run", "--explain"], env=env,
                            capture_output=True, timeout=120, check=False)
    assert result.returncode == 3
    assert result.stderr.decode("ascii").startswith(
        "derive-env: error: JAX_COORDINATOR_ADDRESS='h\\udcfe\\r\\x1b[2K': expected host:port")


def test_on_error_warn_warning_does_not_advise_on_error_warn(tmp_path: Path,
                                                            empty_labels: Path) -> None:
    """Issue 15, item 6: the warning printed under on-error=warn advised setting it."""
    env = {**node_env("sub1"), "NODE_RANK": "0"}
    env_file = write_env_file(tmp_path / "sub1.env", env, empty_labels)
    result = invoke(["--env-file", str(env_file), "--label", FW + "=pytorch",
                     "--label", "ai.backend.distributed.on-error=warn", "--dry-run"])
    assert result.exit_code == 0, result.output
    first, second = result.stderr.splitlines()
    assert first.startswith("derive-env: warning: NODE_RANK='0': expected '1'")
    assert first.endswith("derive-env derives it on every node)")
    assert "on-error" not in first
    assert second == "derive-env: warning: on-error=warn: nothing derived"
    failed = invoke(["--env-file", str(env_file), "--label", FW + "=pytorch", "--dry-run"])
    assert failed.exit_code == 3
    assert failed.stderr.rstrip("\n").endswith(
        "or set label ai.backend.distributed.on-error=warn to run the command with the "
        "environment unchanged")


def test_misspelt_label_in_the_image_labels_file_gets_did_you_mean(tmp_path: Path) -> None:
    """A baked labels.json with nproc-per-nod: exit 4, the close key named, nothing run."""
    labels = write_labels(tmp_path / "labels.json", {
        "ai.backend.distributed.frameworks": "pytorch",
        "ai.backend.distributed.nproc-per-nod": "2"})
    result = run_shim(["--", "sh", "-c", "echo ran"], base_env(labels))
    assert (result.returncode, text(result.stdout), text(result.stderr)) == (4, "", (
        "derive-env: error: label ai.backend.distributed.nproc-per-nod='2': expected a known "
        "label (did you mean ai.backend.distributed.nproc-per-node?); known: "
        "ai.backend.distributed.frameworks, ai.backend.distributed.jax-port, "
        "ai.backend.distributed.master-port, ai.backend.distributed.nproc-per-node, "
        "ai.backend.distributed.on-error, ai.backend.distributed.pytorch-mode, "
        "ai.backend.distributed.socket-ifname, ai.backend.distributed.tensorflow-port, "
        "ai.backend.distributed.tensorflow-roles\n"
        "derive-env: note: the command was not run (exit 4)\n"))
