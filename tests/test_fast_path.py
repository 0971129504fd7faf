"""The fast dry-run path (issue 6, item 3) changes speed only, never behaviour.

``derive-env --dry-run --format shell`` (the Backend.AI hook's command) and the other dry-run
forms are parsed by :func:`derive_env.cli.options.parse` without importing click. Each
command line below runs twice in-process, once through ``derive_env.__main__.main`` (the
console script's entry) and once through click's command itself, in the same environment:
stdout, stderr and the exit status must be identical, and the path taken must be the one
expected (fast, or handed to click). Subprocess tests then check the real console script:
no click import, complete output despite the exit without teardown, the same result as
click's with stdout on a full device.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import derive_env.__main__ as entry
from derive_env import cli
from derive_env.cli import command, options
from derive_env.render import FORMATS
from helpers import console_script

PREFIX = "ai.backend.distributed."
FW = PREFIX + "frameworks"
LABELS_VAR = "DERIVE_ENV_LABELS_FILE"


class ClickReached(Exception):
    """Raised by the stand-in for click's command: main() handed the command line over."""


@pytest.fixture
def files(tmp_path: Path, backendai_env) -> dict[str, str]:
    """Paths the command lines refer to (``{name}`` in an argv below)."""
    labels = tmp_path / "labels.json"
    labels.write_text(json.dumps({FW: "pytorch,tensorflow"}))
    other = tmp_path / "other.env"
    other.write_text("".join(
        f"{k}={v}\n" for k, v in backendai_env(["sub2", "main1", "sub1"], "sub2").items()
    ))
    return {"labels": str(labels), "envfile": str(other), "missing": str(tmp_path / "nope")}


#: (argv, taken by the fast path). ``{labels}``, ``{envfile}``, ``{missing}``: see ``files``.
ARGVS: list[tuple[list[str], bool]] = [
    # the hook's command and its spellings
    (["--dry-run", "--format", "shell"], True),
    (["--format", "shell", "--dry-run"], True),
    (["--dry-run", "--format=shell"], True),
    (["--format=shell", "--dry-run"], True),
    *[(["--dry-run", "--format", fmt], True) for fmt in FORMATS],
    (["--dry-run"], True),
    (["--dry-run", "--dry-run", "--format", "env"], True),  # click accepts a flag twice
    (["--dry-run", "--explain"], True),
    (["--explain", "--dry-run"], True),
    (["--explain"], True),  # implies --dry-run (issue 14)
    (["--explain", "--all-nodes"], True),
    (["--dry-run", "--explain", "--all-nodes"], True),
    # labels and environments given on the command line
    (["--dry-run", "--label", FW + "=pytorch"], True),
    (["--dry-run", "--label=" + FW + "=jax", "--format", "json"], True),
    (["--label", FW + "=tensorflow", "--dry-run", "--label", PREFIX + "on-error=warn"], True),
    (["--dry-run", "--label", "no-equals-sign"], True),  # a label error (exit 4)
    (["--dry-run", "--label="], True),
    (["--dry-run", "--label", "--format"], True),  # click takes "--format" as the value too
    (["--dry-run", "--labels-file", "{labels}", "--format", "toml"], True),
    (["--dry-run", "--labels-file={labels}", "--labels-file", "{labels}"], True),
    (["--dry-run", "--labels-file", "{missing}"], True),
    (["--dry-run", "--env-file", "{envfile}", "--format", "shell"], True),
    (["--dry-run", "--env-file={envfile}", "--explain"], True),
    (["--dry-run", "--env-file", "{missing}"], True),
    (["--dry-run", "--env-file", "-"], True),
    (["--dry-run", "--labels-file", "-", "--format", "json"], True),
    # the source choice (a bad name is a usage error on both paths, exit 2)
    (["--dry-run", "--source", "backendai", "--format", "json"], True),
    (["--dry-run", "--source=none"], True),
    (["--dry-run", "--source", "auto", "--explain"], True),
    (["--dry-run", "--source", "slurm"], False),  # not a source name: click's usage error
    (["--dry-run", "--source", "slurm-step"], True),  # its variables are not set: exit 3
    (["--dry-run", "--source", "none", "--source", "auto"], False),
    # everything else goes to click, unchanged
    (["--dry-run", "--format"], False),
    (["--dry-run", "--format", "bogus"], False),
    (["--dry-run", "--format="], False),
    (["--dry-run", "--format", "SHELL"], False),
    (["--dry-run", "--format", "json", "--format", "shell"], False),
    (["--dry-run", "--format", "--explain"], False),
    (["--dry-run", "--explain", "--format", "json"], False),
    (["--dry-run", "--env-file", "{envfile}", "--env-file", "{envfile}"], False),
    (["--dry-run", "--env-file", "-", "--labels-file", "-"], False),
    (["--dry-run", "--label"], False),
    (["--dry-run", "--labels-file"], False),
    (["--format", "shell"], False),
    (["--all-nodes", "--dry-run"], False),  # --all-nodes needs --explain: click's usage error
    (["--explain", "--", "true"], False),
    (["--label", FW + "=pytorch"], False),
    (["--dry-run=1"], False),
    (["--dry-run", "--bogus"], False),
    (["--dry"], False),
    (["--Dry-run"], False),
    (["--dry-run", "--form", "shell"], False),
    (["--dry-run", "-h"], False),
    (["--help"], False),
    (["--version"], False),
    (["--dry-run", "--"], False),
    (["--dry-run", "--", "true"], False),
    (["--dry-run", "true"], False),
    (["--dry-run", ""], False),
    (["--dry-run", "-"], False),
    (["-"], False),
    ([], False),
]

#: name -> (environment without the labels variable, labels file content)
ENVIRONMENTS: dict[str, tuple[Callable[..., dict[str, str]], dict[str, str]]] = {
    "not-opted-in": (lambda bai: {}, {}),
    "stray-label": (lambda bai: {}, {PREFIX + "framework": "pytorch"}),
    "opted-in": (lambda bai: bai(["sub1", "main1", "sub2"], "sub1"), {FW: "pytorch,tensorflow"}),
    "bad-topology": (
        lambda bai: {**bai(["sub1", "main1"], "sub1"), "BACKENDAI_CLUSTER_SIZE": "3"},
        {FW: "pytorch"},
    ),
    "warn": (
        lambda bai: {**bai(["sub1", "main1"], "sub1"), "BACKENDAI_CLUSTER_SIZE": "3"},
        {FW: "pytorch", PREFIX + "on-error": "warn"},
    ),
    "quoting": (
        lambda bai: {**bai(["sub1", "main1"], "sub1"),
                     "MASTER_PORT": "1", "PET_NPROC_PER_NODE": "a'b\n$(touch x)"},
        {FW: "pytorch"},
    ),
}


def _setup(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, env: dict[str, str],
           labels: dict[str, str]) -> None:
    baked = tmp_path / "baked-labels.json"
    baked.write_text(json.dumps(labels))
    for name in list(os.environ):
        if name.startswith(("BACKENDAI_", "DERIVE_ENV_", "MASTER_", "PET_", "_DERIVE_ENV")):
            monkeypatch.delenv(name)
    for name in ("GPU_COUNT", "N_GPUS", "TF_CONFIG", "NODE_RANK", "RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in {**env, LABELS_VAR: str(baked)}.items():
        monkeypatch.setenv(name, value)
    # One fresh run id for both runs of a comparison (a single container draws one per start).
    monkeypatch.setattr(cli, "new_run_id", lambda: "0123456789abcdef")


def _outcome(call: Callable[[], object], capsys: pytest.CaptureFixture[str]
             ) -> tuple[int | str, str, str]:
    capsys.readouterr()
    try:
        call()
        code: int | str = "returned"
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
    out, err = capsys.readouterr()
    return code, out, err


def run_main(argv: list[str], monkeypatch: pytest.MonkeyPatch,
             capsys: pytest.CaptureFixture[str]) -> tuple[tuple[int | str, str, str], bool]:
    """main() with click's command replaced: (outcome, whether click was reached)."""
    reached = []

    def stand_in(*args: object, **kwargs: object) -> None:
        reached.append(True)
        raise ClickReached

    def exit_now(status: int) -> None:  # os._exit would end the test run
        raise SystemExit(status)

    with monkeypatch.context() as patch:
        patch.setattr(sys, "argv", ["derive-env", *argv])
        patch.setattr(command, "cli", stand_in)
        patch.setattr(entry.os, "_exit", exit_now)
        try:
            outcome = _outcome(entry.main, capsys)
        except ClickReached:
            outcome = ("click", "", "")
    return outcome, bool(reached)


def run_click(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int | str, str, str]:
    """click's command itself, as main() would call it."""
    return _outcome(lambda: command.cli.main(args=argv, prog_name="derive-env"), capsys)


@pytest.mark.parametrize("environment", sorted(ENVIRONMENTS))
@pytest.mark.parametrize(("argv", "fast"), ARGVS, ids=[" ".join(a) or "(none)" for a, _ in ARGVS])
def test_fast_path_equals_click(
    argv: list[str], fast: bool, environment: str, files: dict[str, str], backendai_env,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path,
) -> None:
    make_env, labels = ENVIRONMENTS[environment]
    _setup(monkeypatch, tmp_path, make_env(backendai_env), labels)
    argv = [arg.format(**files) for arg in argv]
    monkeypatch.chdir(tmp_path)  # a value that executed would leave ./x behind
    assert (options.parse(argv) is not None) == fast
    main_outcome, reached_click = run_main(argv, monkeypatch, capsys)
    assert reached_click == (not fast)
    click_outcome = run_click(argv, capsys)
    if fast:
        assert main_outcome == click_outcome
    assert not (tmp_path / "x").exists()


def test_the_comparison_can_fail(files: dict[str, str], backendai_env, tmp_path: Path,
                                 monkeypatch: pytest.MonkeyPatch,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    """A fast path that rendered another format would be caught: outputs really differ."""
    _setup(monkeypatch, tmp_path, backendai_env(["sub1", "main1"], "sub1"), {FW: "pytorch"})
    (shell, _), json_ = (run_main(["--dry-run", "--format", "shell"], monkeypatch, capsys),
                         run_click(["--dry-run", "--format", "json"], capsys))
    assert shell[0] == json_[0] == 0
    assert shell[1].startswith("export MASTER_ADDR='main1'\n")
    assert shell != json_


def test_shell_completion_goes_to_click(monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str],
                                        tmp_path: Path) -> None:
    """click answers completion requests (``_DERIVE_ENV_COMPLETE``, no argument); the
    variable beside a dry run's command line is no request: the fast path parses it."""
    _setup(monkeypatch, tmp_path, {}, {})
    monkeypatch.setenv("_DERIVE_ENV_COMPLETE", "bash_source")
    _, reached_click = run_main([], monkeypatch, capsys)
    assert reached_click
    outcome, reached_click = run_main(["--dry-run", "--format", "shell"], monkeypatch, capsys)
    assert (outcome, reached_click) == ((0, "", ""), False)


def test_ctrl_c_ends_both_paths_alike(monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str],
                                      tmp_path: Path) -> None:
    """Ctrl-C before the exec: exit 130 with one line, on the click path and the fast path
    alike (and as the ENTRYPOINT path, which exits 130 too)."""
    _setup(monkeypatch, tmp_path, {}, {})

    def interrupted(*args: object, **kwargs: object) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "run", interrupted)
    monkeypatch.setattr(command, "run", interrupted)
    argv = ["--dry-run", "--format", "shell"]
    said = "derive-env: error: interrupted before the exec (SIGINT); nothing was run\n"
    assert run_click(argv, capsys) == (130, "", said)
    assert run_main(argv, monkeypatch, capsys) == ((130, "", said), False)


# ------------------------------------------------------------------ the real console script


def _script_env(tmp_path: Path, labels: dict[str, str], extra: dict[str, str]) -> dict[str, str]:
    path = tmp_path / "labels.json"
    path.write_text(json.dumps(labels))
    return {"PATH": os.environ["PATH"], LABELS_VAR: str(path), **extra}


CLICK_ONLY = [sys.executable, "-c",
              "import sys; from derive_env.cli.command import cli; cli(prog_name='derive-env')"]


def test_console_script_hook_imports_no_click_and_prints_everything(
    tmp_path: Path, backendai_env
) -> None:
    """The exit without teardown loses nothing: a 64-node TF_CONFIG is printed whole."""
    hosts = ["main1", *(f"sub{i}" for i in range(1, 64))]
    env = _script_env(tmp_path, {FW: "pytorch,tensorflow"}, backendai_env(hosts[::-1], "sub7"))
    argv = ["--dry-run", "--format", "shell"]
    fast = subprocess.run([sys.executable, "-X", "importtime", console_script(), *argv],
                          env=env, capture_output=True, text=True, timeout=60, check=False)
    slow = subprocess.run([*CLICK_ONLY, *argv], env=env, capture_output=True, text=True,
                          timeout=60, check=False)
    imported = {line.rsplit("|", 1)[-1].strip() for line in fast.stderr.splitlines()
                if line.startswith("import time:")}
    assert "pydantic" in imported and "click" not in imported
    assert (fast.returncode, fast.stdout) == (slow.returncode, slow.stdout) == (0, slow.stdout)
    workers = json.loads(slow.stdout.split("export TF_CONFIG=", 1)[1].splitlines()[0].strip("'"))
    assert workers["cluster"]["worker"] == [f"{h}:2222" for h in hosts]
    assert workers["task"] == {"type": "worker", "index": 7}


@pytest.mark.parametrize("labels", [{}, {FW: "pytorch"}])
def test_console_script_full_stdout_same_as_click(tmp_path: Path, labels: dict[str, str],
                                                  backendai_env) -> None:
    """stdout on /dev/full: the same message and exit 1 on both paths (the flush before the
    exit without teardown must not hide it)."""
    env = _script_env(tmp_path, labels, backendai_env(["sub1", "main1"], "sub1"))
    argv = ["--dry-run", "--format", "json"]
    results = []
    for started in ([console_script(), *argv], [*CLICK_ONLY, *argv]):
        with open("/dev/full", "w") as full:
            proc = subprocess.run(started, env=env, stdout=full, stderr=subprocess.PIPE,
                                  text=True, timeout=60, check=False)
        results.append((proc.returncode, proc.stderr))
    assert results[0] == results[1]
    # Not opted in inside a session of 2 nodes: the note of contract section 11 first.
    note = "" if labels else (
        "derive-env: warning: nothing derived: the image did not opt in (label "
        "ai.backend.distributed.frameworks is not set), but a Backend.AI session states a job "
        "of more than one node (BACKENDAI_CLUSTER_SIZE='2'), so every node runs the command "
        "as a job of its own. To opt in, set the label ai.backend.distributed.frameworks="
        "pytorch (or tensorflow, jax) in the image, DERIVE_ENV_FRAMEWORKS=pytorch for the "
        "job, or derive-env --frameworks pytorch\n")
    assert results[0] == (1, note + "derive-env: error: cannot write the dry-run output to "
                             "stdout ([Errno 28] No space left on device)\n")


# ------------------------------------------------- source modules: only the ones seen are imported

#: Runs the console script's entry in a fresh interpreter up to the exec (ENTRYPOINT path) or
#: to the exit after the output (hook), then prints the ``derive_env.sources`` modules loaded,
#: every module loaded from a file, and every ``derive_env`` module.
#: (``-X importtime`` cannot tell: it does not log modules loaded by ``import_module``.)
#: ``launch`` is imported here on the ENTRYPOINT path only, which loads it anyway.
_SOURCE_MODULES = """
import json, sys
import derive_env.__main__ as entry

def report(*args, **kwargs):
    real = [m for m, v in sys.modules.items() if getattr(v, "__file__", None)]
    print(json.dumps(sorted(m for m in sys.modules if m.startswith("derive_env.sources"))))
    print(json.dumps(sorted(real)))
    print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] == "derive_env")))
    sys.stdout.flush()
    import os
    os._exit(0)

if sys.argv[1:2] == ["--"]:
    from derive_env import launch

    launch.exec_command = report  # the ENTRYPOINT path, instead of the exec
entry._exit_now = report  # the hook, after the dry run's output
sys.argv = ["derive-env", *sys.argv[1:]]
entry.main()
"""
#: What every opted-in derive imports: the table, the resolver and the report it reads.
_TABLE = ["derive_env.sources", "derive_env.sources.compose", "derive_env.sources.refusals",
          "derive_env.sources.report"]
#: The managers' package (an empty one: its docstring), with the first manager module a start
#: reads (issue 23: the engine's modules beside the managers' folder).
_MANAGERS = "derive_env.sources.managers"
_UNSEEN = {"derive_env.sources.managers.slurm", "derive_env.sources.managers.slurm_hostlist",
           "derive_env.sources.roles", "derive_env.sources.managers.torchrun",
           "derive_env.sources.managers.kubeflow"}
_SRUN_TASK = Path(__file__).resolve().parent / "fixtures/recorded/srun-block/task3.env"


def _recorded_srun_task() -> dict[str, str]:
    lines = _SRUN_TASK.read_text().splitlines()[1:]  # after "# ran on: ..."
    return dict(line.split("=", 1) for line in lines if line)


def _until_exec(tmp_path: Path, labels: dict[str, str], extra: dict[str, str],
                argv: list[str]) -> tuple[list[str], set[str], list[str]]:
    """(the ``derive_env.sources`` modules loaded, every module loaded from a file (a
    stand-in has none), every ``derive_env`` module) when the exec (or the hook's exit)
    would run."""
    env = _script_env(tmp_path, labels, extra)
    out = subprocess.run([sys.executable, "-c", _SOURCE_MODULES, *argv], env=env,
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    sources, loaded, own = out.stdout.splitlines()[-3:]
    return json.loads(sources), set(json.loads(loaded)), json.loads(own)


def _source_modules(tmp_path: Path, labels: dict[str, str], extra: dict[str, str],
                    argv: list[str]) -> list[str]:
    return _until_exec(tmp_path, labels, extra, argv)[0]


PATH_ARGVS = [pytest.param(["--", "true"], id="entrypoint"),
              pytest.param(["--dry-run", "--format", "shell"], id="hook")]


@pytest.mark.parametrize("argv", PATH_ARGVS)
def test_backendai_start_imports_no_other_source_module(tmp_path: Path, backendai_env,
                                                        argv: list[str]) -> None:
    """Detecting the absent sources reads the table only (docs/performance.md): a Backend.AI
    start imports the Backend.AI source and none of Slurm, MPI, torchrun, Kubeflow; its
    canonical node order only for a session of several nodes."""
    env = backendai_env(["sub1", "main1", "sub2"], "sub2")
    modules = _source_modules(tmp_path, {FW: "pytorch,tensorflow"}, env, argv)
    assert modules == sorted([*_TABLE, _MANAGERS, "derive_env.sources.managers.backendai",
                              "derive_env.sources.managers.backendai_order"])
    assert _UNSEEN.isdisjoint(modules)
    single = _source_modules(tmp_path, {FW: "pytorch,tensorflow"},
                             {"BACKENDAI_CLUSTER_SIZE": "1", "BACKENDAI_CLUSTER_HOST": "main1"},
                             argv)
    assert single == sorted([*_TABLE, _MANAGERS, "derive_env.sources.managers.backendai"])


@pytest.mark.parametrize("argv", PATH_ARGVS)
@pytest.mark.parametrize("manager", ["backendai", "slurm", "none"])
def test_not_opted_in_start_imports_no_source_module(tmp_path: Path, backendai_env,
                                                     argv: list[str], manager: str) -> None:
    """An image that did not opt in reads no source, whatever manager started it: only the
    table, whose ``states`` and ``counts`` tell whether the job is larger than one node or
    process (the note of contract section 11), and its sizes (``larger_job``)."""
    env = {"backendai": backendai_env(["sub1", "main1"], "sub1"),
           "slurm": _recorded_srun_task(), "none": {}}[manager]
    assert _source_modules(tmp_path, {}, env, argv) == ["derive_env.sources",
                                                        "derive_env.sources.sizes"]


@pytest.mark.parametrize("argv", PATH_ARGVS)
def test_a_seen_source_is_imported_and_only_it(tmp_path: Path, argv: list[str]) -> None:
    """The same check sees a source when it is there (so the tests above can fail): a task of
    a recorded srun step imports the Slurm source, not Backend.AI's nor MPI's."""
    modules = _source_modules(tmp_path, {FW: "pytorch"}, _recorded_srun_task(), argv)
    assert modules == sorted([*_TABLE, _MANAGERS, "derive_env.sources.managers.slurm",
                              "derive_env.sources.managers.slurm_hostlist"])


@pytest.mark.parametrize("argv", PATH_ARGVS)
def test_opted_in_start_loads_no_secrets_nor_libcrypto(tmp_path: Path, backendai_env,
                                                       argv: list[str]) -> None:
    """pydantic.types imports ``secrets`` (hmac, hashlib, OpenSSL's _hashlib: 0.05x of the
    pydantic import) for a comparison derive-env never makes: it stays a stand-in."""
    env = backendai_env(["sub1", "main1", "sub2"], "sub2")
    loaded = _until_exec(tmp_path, {FW: "pytorch,tensorflow"}, env, argv)[1]
    assert "pydantic.types" in loaded
    assert {"secrets", "hmac", "hashlib", "_hashlib"} & loaded == set()


@pytest.mark.parametrize("labels", [{}, {FW: "pytorch,tensorflow"}],
                         ids=["not-opted-in", "opted-in"])
@pytest.mark.parametrize(("argv", "wanted", "unwanted"), [
    (["--dry-run", "--format", "shell"], "derive_env.render",
     {"derive_env.render.hostfiles", "derive_env.render.explain", "derive_env.digest"}),
    (["--dry-run", "--explain"], "derive_env.render.explain", {"derive_env.render.hostfiles"}),
    (["--dry-run", "--format", "hosts"], "derive_env.render.hostfiles",
     {"derive_env.render.explain", "derive_env.digest"}),
    (["--dry-run", "--format", "digest"], "derive_env.digest",
     {"derive_env.render.explain", "derive_env.render.hostfiles"}),
    (["--dry-run", "--format", "digest-facts"], "derive_env.digest",
     {"derive_env.render.explain", "derive_env.render.hostfiles"}),
], ids=["hook", "explain", "hosts", "digest", "digest-facts"])
def test_each_output_loads_only_its_renderer(tmp_path: Path, backendai_env, labels: dict[str, str],
                                             argv: list[str], wanted: str,
                                             unwanted: set[str]) -> None:
    """The host formats and --explain are imported only by the option that needs them: the
    hook's ``--format shell`` loads neither (redesign.md 4.4)."""
    env = backendai_env(["sub1", "main1", "sub2"], "sub2")
    loaded = _until_exec(tmp_path, labels, env, argv)[1]
    assert wanted in loaded
    assert unwanted & loaded == set()


# ------------------------------------------------------- what each start path loads, exactly

#: The ``derive_env`` modules each start path loads (redesign.md 4.4's table), up to the
#: exec or the hook's exit: a module added to a path is added here, and measured
#: (benchmarks/startup.py --check). Not on any of them: ``cli.command`` (click),
#: ``cli.envfile`` (--env-file), ``cli.hostfacts`` (label socket-ifname).
#: ``derive_env.sources`` (the table alone, no source module) is on the not-opted-in paths
#: since issue 15: an image that did not opt in, inside a job a source states as larger than
#: one node or process, says so in one line (contract section 11; docs/performance.md);
#: ``derive_env.sources.sizes`` with it since issue 16 (``larger_job``, no json).
_EVERY_PATH = ["derive_env", "derive_env.__main__", "derive_env.cli", "derive_env.errors",
               "derive_env.labels", "derive_env.sources"]
_NOT_OPTED_IN = [*_EVERY_PATH, "derive_env.sources.sizes"]
_HOOK = ["derive_env.cli.options", "derive_env.render"]
_OPTED_IN = [*_EVERY_PATH, *_TABLE[1:], "derive_env.merge", "derive_env.frameworks",
             "derive_env.frameworks.context",
             "derive_env.frameworks.network", "derive_env.frameworks.pytorch",
             "derive_env.frameworks.tensorflow", "derive_env.hosts", "derive_env.launch",
             "derive_env.pipeline", "derive_env.policy", _MANAGERS,
             "derive_env.sources.managers.backendai",
             "derive_env.sources.managers.backendai_order",
             "derive_env.tf_config", "derive_env.topology", "derive_env.validation"]
START_PATHS = [
    pytest.param(False, ["--", "true"], [*_NOT_OPTED_IN, "derive_env.launch"],
                 id="not-opted-in-entrypoint"),
    pytest.param(False, ["--dry-run", "--format", "shell"], [*_NOT_OPTED_IN, *_HOOK],
                 id="not-opted-in-hook"),
    pytest.param(True, ["--", "true"], _OPTED_IN, id="opted-in-backendai-4-entrypoint"),
    pytest.param(True, ["--dry-run", "--format", "shell"], [*_OPTED_IN, *_HOOK],
                 id="opted-in-backendai-4-hook"),
]


@pytest.mark.parametrize(("opted_in", "argv", "expected"), START_PATHS)
def test_each_start_path_loads_exactly_its_modules(
    tmp_path: Path, backendai_env, opted_in: bool, argv: list[str], expected: list[str]
) -> None:
    """A 4-node Backend.AI container, its image opted in (pytorch, tensorflow) or not."""
    env = backendai_env(["sub1", "main1", "sub2", "sub3"], "sub2")
    labels = {FW: "pytorch,tensorflow"} if opted_in else {"maintainer": "a team"}
    assert _until_exec(tmp_path, labels, env, argv)[2] == sorted(expected)
