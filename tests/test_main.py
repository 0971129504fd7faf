"""``derive_env.__main__``: derive-env's own imports ignore the image's PYTHONPATH; every path
of the program, and only the program, gets pydantic's stand-ins."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys

import pytest

from derive_env.__main__ import drop_pythonpath

SITE = "/opt/derive-env/lib/python3.12/site-packages"
STDLIB = ["/usr/lib/python312.zip", "/usr/lib/python3.12", "/usr/lib/python3.12/lib-dynload"]


def test_pythonpath_entries_are_dropped_the_rest_kept_in_order() -> None:
    path = ["/opt/derive-env/bin", "/workspace", "/opt/train/site", *STDLIB, SITE]
    pythonpath = os.pathsep.join(["/workspace", "/opt/train/site/"])
    assert drop_pythonpath(path, pythonpath, SITE) == ["/opt/derive-env/bin", *STDLIB, SITE]


def test_relative_entries_match_as_python_3_10_leaves_them(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    path = ["/opt/derive-env/bin", "lib", str(tmp_path / "other"), SITE]
    assert drop_pythonpath(path, f"lib{os.pathsep}other", SITE) == ["/opt/derive-env/bin", SITE]


def test_nothing_dropped_without_pythonpath_or_when_derive_env_lives_there() -> None:
    path = ["/opt/derive-env/bin", "/opt/target", *STDLIB]
    assert drop_pythonpath(path, None, SITE) is path
    assert drop_pythonpath(path, "", SITE) is path
    # installed with `pip install --target /opt/target`: its dependencies are there too
    assert drop_pythonpath(path, "/opt/target", "/opt/target") is path


def test_the_script_folder_is_never_dropped() -> None:
    path = ["/opt/derive-env/bin", *STDLIB]
    assert drop_pythonpath(path, "/opt/derive-env/bin", SITE) == path


# ------------------------------------------------------------- pydantic's stand-ins


def test_pydantic_plugin_stand_in_answers_no_plugins_and_falls_back(monkeypatch) -> None:
    """The stand-in for pydantic's plugin loader (startup cost, docs/performance.md) reports no
    plugins, and any other name is served by the real module: a pydantic that changes its
    loader loses the speed-up, never the start."""
    import sys

    import derive_env.__main__ as entry

    name = "pydantic.plugin._loader"
    monkeypatch.delitem(sys.modules, name, raising=False)
    entry._without_pydantic_plugins()
    stub = sys.modules[name]
    assert stub.get_plugins() == ()
    assert stub.get_plugins("any", extra=1) == ()
    with pytest.raises(AttributeError):
        stub.__path__  # noqa: B018  (the import system probes dunders: no real import)
    assert sys.modules[name] is stub
    real_value = stub._plugins  # not in the stand-in: the real module is imported
    assert sys.modules[name] is not stub
    assert real_value is sys.modules[name]._plugins
    entry._without_pydantic_plugins()  # a loaded loader is left alone
    assert sys.modules[name] is not stub


def test_secrets_stand_in_loads_the_real_module_on_first_use(monkeypatch) -> None:
    """``secrets`` (OpenSSL's libcrypto behind it) waits for a use (startup cost,
    docs/performance.md); the first use of a name gets the real module's."""
    import sys

    import derive_env.__main__ as entry

    monkeypatch.delitem(sys.modules, "secrets", raising=False)
    entry._without_secrets_until_used()
    stub = sys.modules["secrets"]
    with pytest.raises(AttributeError):
        stub.__path__  # noqa: B018  (the import system probes dunders: no real import)
    assert sys.modules["secrets"] is stub
    assert stub.compare_digest(b"derive", b"derive") is True
    assert stub.compare_digest(b"derive", b"env") is False
    real = sys.modules["secrets"]
    assert real is not stub and real.compare_digest is stub.compare_digest
    entry._without_secrets_until_used()  # a loaded module is left alone
    assert sys.modules["secrets"] is real


def test_main_installs_the_stand_ins_before_it_picks_a_path(monkeypatch) -> None:
    """ENTRYPOINT, the click-free dry run and click: the stand-ins come first on each."""
    import derive_env.__main__ as entry
    from derive_env import cli
    from derive_env.cli import command, options

    events: list[str] = []
    monkeypatch.setattr(entry, "before_pydantic", lambda: events.append("stand-ins"))
    monkeypatch.setattr(cli, "run_command", lambda argv: events.append("exec path") or 0)
    monkeypatch.setattr(options, "parse", lambda args: events.append("dry-run parser"))
    monkeypatch.setattr(command, "cli", lambda **kwargs: events.append("click"))
    for argv in (["--", "true"], ["--help"]):
        monkeypatch.setattr(sys, "argv", ["derive-env", *argv])
        with contextlib.suppress(SystemExit):
            entry.main()
    assert events == ["stand-ins", "exec path", "stand-ins", "dry-run parser", "click"]


def test_a_library_user_keeps_the_real_modules() -> None:
    """``derive_env.derive`` from a program of its own: no stand-in is installed."""
    code = (
        "import sys, derive_env\n"
        "derive_env.derive({}, {'ai.backend.distributed.frameworks': 'pytorch'})\n"
        "print([name not in sys.modules or getattr(sys.modules[name], '__file__', None)\n"
        "       is not None for name in ('secrets', 'pydantic.plugin._loader')],\n"
        "      'pydantic.plugin._loader' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True, env={"PATH": os.environ["PATH"]})
    # secrets: not imported at all by older pydantic (2.6), else the real module
    assert out.stdout == "[True, True] True\n"


@pytest.mark.parametrize("value", ["bash_complete", "x"])
def test_a_stray_completion_variable_changes_nothing(value: str) -> None:
    """click's _DERIVE_ENV_COMPLETE switch is off: the command runs on the click path too."""
    from helpers import console_script

    env = {"PATH": os.environ["PATH"], "_DERIVE_ENV_COMPLETE": value}
    out = subprocess.run([console_script(), "--label", "ai.backend.distributed.frameworks=pytorch",
                          "--", "sh", "-c", "echo ran"], capture_output=True, text=True,
                         timeout=60, env=env)
    assert (out.returncode, out.stdout, out.stderr) == (0, "ran\n", "")


@pytest.mark.parametrize("option", ["--help", "--version"])
def test_help_into_a_full_stdout_is_exit_1_with_one_line(option: str) -> None:
    """Issue 15, item 7: click's --help into /dev/full ended in a traceback and exit 120."""
    from helpers import console_script

    with open("/dev/full", "w") as full:
        out = subprocess.run([console_script(), option], stdout=full, stderr=subprocess.PIPE,
                             text=True, timeout=60, env={"PATH": os.environ["PATH"]})
    assert (out.returncode, out.stderr) == (
        1, "derive-env: error: cannot write to stdout (No space left on device)\n")


def test_help_into_a_closed_pipe_is_quiet() -> None:
    """A reader that stops early (`derive-env --help | head -1`): no traceback."""
    from helpers import console_script

    proc = subprocess.Popen([console_script(), "--help"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env={"PATH": os.environ["PATH"]})
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    assert proc.wait(timeout=60) in (0, 1)
    assert b"Traceback" not in proc.stderr.read()


# ------------------------------------------------------------------ shell completion (click)

#: The line each shell's script starts with (click.shell_completion's templates).
COMPLETION_SCRIPTS = {
    "bash": "_derive_env_completion() {\n",
    "zsh": "#compdef derive-env\n",
    "fish": "function _derive_env_completion;\n",
}


def completion(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    from helpers import console_script

    return subprocess.run([console_script()], capture_output=True, text=True, timeout=60,
                          env={"PATH": os.environ["PATH"], **env})


@pytest.mark.parametrize("shell", sorted(COMPLETION_SCRIPTS))
def test_completion_script_of_each_shell(shell: str) -> None:
    """``_DERIVE_ENV_COMPLETE={shell}_source derive-env`` prints the script to evaluate."""
    out = completion({"_DERIVE_ENV_COMPLETE": f"{shell}_source"})
    assert (out.returncode, out.stderr) == (0, "")
    assert out.stdout.startswith(COMPLETION_SCRIPTS[shell])
    # the script asks derive-env itself for the candidates, with the same switch
    assert f"_DERIVE_ENV_COMPLETE={shell}_complete" in out.stdout


def test_bash_completion_protocol_offers_dry_run() -> None:
    """What the bash script runs on Tab: COMP_WORDS/COMP_CWORD in, ``type,value`` lines out."""
    out = completion({"_DERIVE_ENV_COMPLETE": "bash_complete",
                      "COMP_WORDS": "derive-env --dr", "COMP_CWORD": "1"})
    assert (out.returncode, out.stdout, out.stderr) == (0, "plain,--dry-run\n", "")
    out = completion({"_DERIVE_ENV_COMPLETE": "bash_complete",
                      "COMP_WORDS": "derive-env --format js", "COMP_CWORD": "2"})
    assert (out.returncode, out.stdout, out.stderr) == (0, "plain,json\n", "")


def test_bash_completes_dry_run_through_the_sourced_script() -> None:
    """A real bash: the script sourced, its function called as bash's `complete` would."""
    from helpers import console_script

    script = (
        'eval "$(_DERIVE_ENV_COMPLETE=bash_source derive-env)" || exit 9\n'
        "COMP_WORDS=(derive-env --dr); COMP_CWORD=1\n"
        # bash's `complete -F` passes: the command, the word being completed, the one before
        "_derive_env_completion derive-env --dr derive-env\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
        "complete -p derive-env\n"
    )
    bin_dir = os.path.dirname(console_script())
    out = subprocess.run(["bash", "--norc", "--noprofile", "-c", script], capture_output=True,
                         text=True, timeout=60,
                         env={"PATH": f"{bin_dir}:{os.environ['PATH']}"})
    assert (out.returncode, out.stdout, out.stderr) == (
        0, "--dry-run\ncomplete -o nosort -F _derive_env_completion derive-env\n", "")


@pytest.mark.parametrize("value", ["bash_source", "zsh_complete"])
def test_completion_variable_beside_a_command_line_changes_nothing(value: str) -> None:
    """Only a start with no argument is a completion request: a command line runs."""
    from helpers import console_script

    env = {"PATH": os.environ["PATH"], "_DERIVE_ENV_COMPLETE": value}
    out = subprocess.run([console_script(), "--", "sh", "-c", "echo ran"], capture_output=True,
                         text=True, timeout=60, env=env)
    assert (out.returncode, out.stdout, out.stderr) == (0, "ran\n", "")


@pytest.mark.parametrize(("value", "env"), [
    ("bash_complete", {}),
    ("zsh_complete", {"COMP_WORDS": "derive-env "}),
    ("fish_complete", {"COMP_CWORD": ""}),
    ("bash_complete", {"COMP_WORDS": "derive-env ", "COMP_CWORD": "x"}),
])
def test_a_complete_request_without_the_shell_s_words_is_a_start(
        value: str, env: dict[str, str]) -> None:
    """An ENTRYPOINT with an empty CMD and a stray ``*_complete`` value: no traceback (it was
    a KeyError on COMP_WORDS, exit 1), no success: the start's usage error (adversarial
    trial)."""
    out = completion({"_DERIVE_ENV_COMPLETE": value, **env})
    assert (out.returncode, out.stdout) == (2, "")
    assert out.stderr.endswith(
        "Error: no command given: derive-env [OPTIONS] -- COMMAND [ARG]..., or --dry-run.\n")


def test_fish_completes_with_the_incomplete_word_in_comp_cword() -> None:
    out = completion({"_DERIVE_ENV_COMPLETE": "fish_complete",
                      "COMP_WORDS": "derive-env --dr", "COMP_CWORD": "--dr"})
    assert (out.returncode, out.stderr) == (0, "")
    # click 8.4.0 writes type, value and help on lines of their own, later ones
    # "plain,--dry-run\tHELP": the same three fields either way
    assert re.split(r"[,\t\n]", out.stdout)[:3] == [
        "plain", "--dry-run",
        "Print the derived variables (those a command after -- would get); run nothing."]
