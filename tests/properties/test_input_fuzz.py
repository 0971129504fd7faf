"""--env-file formats and labels files (issue 7, items 3, 4), with fuzzing.

Every accepted env-file format round-trips what an operator captures; random files in every
format, random labels files and random cluster variables never give a traceback or a hang
(only a DeriveEnvError, which the command line prints with its exit code).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from derive_env.cli.envfile import parse_env_file
from derive_env.errors import DeriveEnvError, UsageError

FUZZ = settings(max_examples=200, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
USE_NUL = ("capture the environment with `env -0` (or copy /proc/PID/environ, or "
           "`docker exec CONTAINER env -0`), which --env-file reads exactly")
CAPTURED = {
    "BACKENDAI_CLUSTER_HOST": "sub1",
    "MULTI": "line 1\nline 2\n  KEY=not a variable\n",
    "BASH_FUNC_greet%%": "() {  echo hi\n}",
    "QUOTED": "'kept with its quotes'",
    "EMPTY": "",
    "EQ": "a=b",
}


def error_of(text: str, origin: str = "f.env") -> str:
    with pytest.raises(UsageError) as info:
        parse_env_file(text, origin)
    assert info.value.exit_code == 2
    return str(info.value)


# --- NUL-separated ----------------------------------------------------------------------------


def test_nul_separated_is_exact() -> None:
    text = "".join(f"{k}={v}\0" for k, v in CAPTURED.items())
    assert parse_env_file(text, "environ") == CAPTURED


def test_real_env_dash_0_output_is_read(tmp_path: Path) -> None:
    # What `env -0` (GNU coreutils) prints for an environment with a multi-line value and an
    # exported bash function.
    script = 'greet() { echo hi; }; export -f greet; export MULTI="a\nb"; exec env -0'
    out = subprocess.run(["bash", "-c", script], capture_output=True, timeout=30, check=True,
                         env={"PATH": os.environ["PATH"], "ONE": "1"}).stdout
    parsed = parse_env_file(out.decode(), "env0")
    assert parsed["MULTI"] == "a\nb"
    assert parsed["ONE"] == "1"
    assert parsed["BASH_FUNC_greet%%"].startswith("() {")


def test_proc_environ_of_a_process_is_read() -> None:
    env = {"PATH": os.environ["PATH"], "MULTI": "x\ny", "A": "1"}
    import time

    child = subprocess.Popen(["sleep", "30"], env=env)
    try:
        deadline = time.monotonic() + 10
        while True:  # until the exec is done (before it the file may still be empty)
            with open(f"/proc/{child.pid}/environ", "rb") as handle:
                data = handle.read()
            if data or time.monotonic() > deadline:
                break
            time.sleep(0.05)
    finally:
        child.kill()
        child.wait(timeout=30)
    assert parse_env_file(data.decode(), f"/proc/{child.pid}/environ") == env


@pytest.mark.parametrize(("text", "message"), [
    ("A=1\0junk\0", "--env-file f.env (NUL-separated, as /proc/PID/environ and env -0), entry 2: "
                    "expected KEY=VALUE, got no '='"),
    ("=x\0", "--env-file f.env (NUL-separated, as /proc/PID/environ and env -0), entry 1: "
             "expected KEY=VALUE, got an empty name"),
])
def test_nul_separated_errors_name_the_format_and_entry(text: str, message: str) -> None:
    assert error_of(text) == message


# --- docker inspect ---------------------------------------------------------------------------

ENV_LIST = ["PATH=/usr/bin:/bin", "BACKENDAI_CLUSTER_HOST=sub1", "EQ=a=b", "EMPTY="]
PARSED = {"PATH": "/usr/bin:/bin", "BACKENDAI_CLUSTER_HOST": "sub1", "EQ": "a=b", "EMPTY": ""}


@pytest.mark.parametrize("document", [
    [{"Id": "abc", "Config": {"Hostname": "sub1", "Env": ENV_LIST, "Labels": {}}}],  # inspect C
    {"Id": "abc", "Config": {"Env": ENV_LIST}},  # one item
    {"Hostname": "sub1", "Env": ENV_LIST, "Labels": None},  # --format '{{json .Config}}'
    ENV_LIST,  # --format '{{json .Config.Env}}'
], ids=["inspect", "item", "config", "env"])
def test_docker_inspect_output_is_read(document: object) -> None:
    assert parse_env_file(json.dumps(document, indent=4), "inspect.json") == PARSED


def test_docker_inspect_null_env_is_empty() -> None:
    assert parse_env_file('[{"Config": {"Env": null}}]', "i.json") == {}


@pytest.mark.parametrize(("text", "message"), [
    ("[{", "not valid JSON (Expecting property name enclosed in double quotes: line 1 "
           "column 3 (char 2))"),
    ('[{"Config": {"Env": []}}, {"Config": {}}]',
     "holds 2 containers; inspect one (docker inspect CONTAINER > FILE)"),
    ('{"Config": {"Image": "x"}}',
     "expected `docker inspect` output, an object with Config.Env (or Env); found none"),
    ('{"Env": "A=1"}', "expected Config.Env to be a list of KEY=VALUE strings"),
    ('["A=1", "B"]', "Env entry 2: expected KEY=VALUE, got no '='"),
])
def test_docker_inspect_errors(text: str, message: str) -> None:
    first = text.lstrip()[0]
    prefix = f"--env-file i.json (docker inspect JSON, as it starts with {first!r})"
    assert error_of(text, "i.json") in (f"{prefix}: {message}", f"{prefix}, {message}")


# --- lines: dotenv, env output, Backend.AI's environ.txt ---------------------------------------


def test_environ_txt_values_are_taken_as_written() -> None:
    # Backend.AI's kernel runner reads it with line.split("=", 1): nothing stripped.
    text = "A='q'\nB= spaced \nC=#x\n"
    assert parse_env_file(text, "/home/config/environ.txt") == {
        "A": "'q'", "B": " spaced ", "C": "#x"}
    assert parse_env_file(text, "copy.env") == {"A": "q", "B": " spaced", "C": "#x"}


def test_env_output_with_a_multi_line_value_says_to_use_env_0() -> None:
    assert error_of("A=1\nMULTI=line 1\nline 2\n") == (
        "--env-file f.env (dotenv lines), line 3: expected KEY=VALUE with KEY a variable name, "
        "got a line without '='; if the file is `env` output, the value of MULTI (line 2) may "
        f"span lines: {USE_NUL}"
    )


def test_env_output_with_an_exported_function_says_to_use_env_0() -> None:
    assert error_of("A=1\nBASH_FUNC_greet%%=() {  echo hi\n}\n") == (
        "--env-file f.env (dotenv lines), line 2: BASH_FUNC_greet%% is an exported shell "
        f"function, which `env` prints over several lines; {USE_NUL}"
    )


def test_real_env_output_with_a_function_gets_the_hint() -> None:
    script = 'greet() { echo hi; }; export -f greet; exec env'
    out = subprocess.run(["bash", "-c", script], capture_output=True, timeout=30, check=True,
                         env={"PATH": os.environ["PATH"]}, text=True).stdout
    assert USE_NUL in error_of(out)


def test_environ_txt_errors_name_the_format() -> None:
    assert error_of("A=1\nbad\n", "/home/config/environ.txt").startswith(
        "--env-file /home/config/environ.txt (Backend.AI environ.txt lines), line 2: ")


# --- both from stdin: a usage error ----------------------------------------------------------


def test_env_file_and_labels_file_both_from_stdin_is_a_usage_error() -> None:
    from click.testing import CliRunner

    from derive_env.cli.command import cli

    result = CliRunner().invoke(cli, ["--env-file", "-", "--labels-file", "-", "--dry-run"],
                                input="A=1\n")
    assert result.exit_code == 2
    assert result.output.endswith(
        "Error: --env-file - and --labels-file - both read stdin, which holds one file: give "
        "one of them a path.\n"
    )


# --- fuzzing ---------------------------------------------------------------------------------

names = st.sampled_from(["A", "PATH", "BACKENDAI_CLUSTER_SIZE", "BASH_FUNC_f%%", "", "1A",
                         "export A", " A", "A B", "NODE_RANK", "MASTER_ADDR"])
values = st.text(max_size=30)
entries = st.lists(st.tuples(names, values), max_size=8)


@given(entries=entries, fmt=st.sampled_from(["nul", "lines", "inspect", "config", "raw"]),
       raw=st.text(max_size=200), origin=st.sampled_from(["f.env", "/home/config/environ.txt"]))
@FUZZ
def test_env_files_in_every_format_never_crash(entries, fmt, raw, origin) -> None:
    items = [f"{k}={v}" for k, v in entries]
    if fmt == "nul":
        text = "".join(f"{i}\0" for i in items)
    elif fmt == "lines":
        text = "".join(f"{i}\n" for i in items)
    elif fmt == "inspect":
        text = json.dumps([{"Config": {"Env": items}}])
    elif fmt == "config":
        text = json.dumps({"Env": items})
    else:
        text = raw
    try:
        parsed = parse_env_file(text, origin)
    except UsageError as exc:
        assert str(exc).startswith(f"--env-file {origin} (")
        return
    assert all(isinstance(k, str) and k and "=" not in k for k in parsed)
    if fmt in ("nul", "inspect", "config") and all(k and "\0" not in v for k, v in entries):
        assert parsed == dict(entries)


@given(text=st.text(max_size=300))
@FUZZ
def test_labels_files_never_crash(text: str) -> None:
    from derive_env.labels import parse_labels_document

    try:
        parse_labels_document(text, "labels.json")
    except DeriveEnvError as exc:
        assert str(exc).startswith("labels file labels.json: ")


@given(document=st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["Config", "Labels", "ai.backend.distributed.frameworks",
                         "ai.backend.distibuted.frameworks", "AI.BACKEND.DISTRIBUTED.ON-ERROR",
                         "ai.backend.master-port", "x"]), inner, max_size=4),
    max_leaves=8,
))
@FUZZ
def test_labels_documents_never_crash(document: object) -> None:
    from derive_env.labels import check_not_opted_in, parse_labels_document

    try:
        labels = parse_labels_document(json.dumps(document), "labels.json")
        check_not_opted_in(labels)
    except DeriveEnvError:
        return


def test_the_command_line_never_tracebacks_on_a_bad_env_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.env"
    bad.write_bytes(b"A=1\nB\n\x00C=1")
    result = subprocess.run(
        [sys.executable, "-m", "derive_env", "--env-file", str(bad), "--dry-run"],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert result.returncode == 2
    assert result.stderr.startswith(f"derive-env: error: --env-file {bad} (dotenv lines), line ")
    assert "Traceback" not in result.stderr


# --- item 3: labels -------------------------------------------------------------------------

from derive_env.errors import LabelError  # noqa: E402
from derive_env.labels import (  # noqa: E402  (grouped with the tests that use them)
    PREFIX,
    check_not_opted_in,
    label_names,
    near_miss,
    on_error_of,
    parse_labels_document,
)
from derive_env.policy import ImagePolicy  # noqa: E402


def test_label_names_match_the_policy() -> None:
    assert {PREFIX + n for n in label_names()} == ImagePolicy.known_labels()


@pytest.mark.parametrize(("key", "meant", "why"), [
    ("ai.backend.distibuted.frameworks", PREFIX + "frameworks",
     "its prefix is two edits or fewer from ai.backend.distributed."),
    ("AI.BACKEND.DISTRIBUTED.FRAMEWORKS", PREFIX + "frameworks", "the same but for letter case"),
    ("Ai.Backend.Distributed.on-error", PREFIX + "on-error", "the same but for letter case"),
    ("ai.backend.frameworks", PREFIX + "frameworks",
     "a derive-env label name under ai.backend."),
    ("ai.backend.distributed-frameworks", PREFIX + "frameworks", "two edits or fewer from it"),
    ("ai.backend.framework", PREFIX + "frameworks", "a derive-env label name under ai.backend."),
    ("ai.backend.master_port", PREFIX + "master-port",
     "a derive-env label name under ai.backend."),
    ("ai.backend.distrbuted.master-port", PREFIX + "master-port",
     "its prefix is two edits or fewer from ai.backend.distributed."),
])
def test_near_misses(key: str, meant: str, why: str) -> None:
    assert near_miss(key) == (meant, why)


@pytest.mark.parametrize("key", [
    PREFIX + "frameworks", PREFIX + "nonsense", "ai.backend.kernelspec", "ai.backend.features",
    "ai.backend.resource.min.cpu", "ai.backend.service-ports", "ai.backend.envs.corecount",
    "org.opencontainers.image.version", "maintainer", "ai.backend.base-distro", "",
])
def test_not_near_misses(key: str) -> None:
    assert near_miss(key) is None


def test_misspelt_opt_in_label_stops_the_entrypoint_path(tmp_path: Path) -> None:
    # The plain ENTRYPOINT path (no click, no pydantic): the command is not run.
    labels = tmp_path / "labels.json"
    labels.write_text(json.dumps({"Labels": {"AI.BACKEND.DISTRIBUTED.FRAMEWORKS": "pytorch"}}))
    env = {"PATH": os.environ["PATH"], "DERIVE_ENV_LABELS_FILE": str(labels)}
    result = subprocess.run([sys.executable, "-m", "derive_env", "--", "echo", "ran"], env=env,
                            capture_output=True, text=True, timeout=60, check=False)
    assert (result.returncode, result.stdout) == (4, "")
    assert result.stderr == (
        "derive-env: error: label AI.BACKEND.DISTRIBUTED.FRAMEWORKS='pytorch': expected the key "
        "ai.backend.distributed.frameworks (the same but for letter case); derive-env reads "
        "only keys starting exactly with ai.backend.distributed., so this label would be "
        "ignored. Rename it\n"
        "derive-env: note: the command was not run (exit 4)\n"
    )


def test_misspelt_opt_in_label_is_an_error_on_the_not_opted_in_path() -> None:
    with pytest.raises(LabelError) as info:
        check_not_opted_in({"ai.backend.distibuted.frameworks": "pytorch",
                            "ai.backend.kernelspec": "1"})
    assert str(info.value) == (
        "label ai.backend.distibuted.frameworks='pytorch': expected the key "
        "ai.backend.distributed.frameworks (its prefix is two edits or fewer from "
        "ai.backend.distributed.); derive-env reads only keys starting exactly with "
        "ai.backend.distributed., so this label would be ignored. Rename it"
    )
    assert info.value.exit_code == 4


def test_all_bad_labels_are_reported_in_one_run() -> None:
    labels = {PREFIX + "frameworks": "pytorch,tf", PREFIX + "master-port": "0",
              "AI.BACKEND.DISTRIBUTED.JAX-PORT": "1", PREFIX + "master_port": "1"}
    with pytest.raises(LabelError) as info:
        ImagePolicy.from_labels(labels)
    assert str(info.value).splitlines() == [
        "4 label problems:",
        "  1. label AI.BACKEND.DISTRIBUTED.JAX-PORT='1': expected the key "
        "ai.backend.distributed.jax-port (the same but for letter case); derive-env reads only "
        "keys starting exactly with ai.backend.distributed., so this label would be ignored. "
        "Rename it",
        "  2. label ai.backend.distributed.master_port='1': expected a known label (did you "
        "mean ai.backend.distributed.master-port?); known: "
        "ai.backend.distributed.frameworks, ai.backend.distributed.jax-port, "
        "ai.backend.distributed.master-port, ai.backend.distributed.nproc-per-node, "
        "ai.backend.distributed.on-error, ai.backend.distributed.pytorch-mode, "
        "ai.backend.distributed.socket-ifname, ai.backend.distributed.tensorflow-port, "
        "ai.backend.distributed.tensorflow-roles",
        "  3. label ai.backend.distributed.frameworks='pytorch,tf': expected a comma list of "
        "pytorch, tensorflow, jax; 'tf' is not one",
        "  4. label ai.backend.distributed.master-port='0': expected a port number 1-65535",
    ]


def test_misspelt_label_of_an_opted_in_image_is_an_error() -> None:
    from derive_env.pipeline import derive

    with pytest.raises(LabelError) as info:
        derive({}, {PREFIX + "frameworks": "pytorch", "ai.backend.distributed.master-prot": "1"})
    assert str(info.value).startswith(
        "label ai.backend.distributed.master-prot='1': expected a known label (did you mean "
        "ai.backend.distributed.master-port?); known: ")
    with pytest.raises(LabelError) as info:
        derive({}, {PREFIX + "frameworks": "pytorch", "ai.backend.master-port": "1"})
    assert str(info.value).startswith(
        "label ai.backend.master-port='1': expected the key ai.backend.distributed.master-port ")


def test_keyword_values_ignore_letter_case_names_do_not() -> None:
    policy = ImagePolicy.from_labels({
        PREFIX + "frameworks": "PyTorch,JAX", PREFIX + "pytorch-mode": "Process-Per-Container",
        PREFIX + "on-error": "Warn", PREFIX + "socket-ifname": "AUTO",
        PREFIX + "tensorflow-roles": "main:Chief,Sub:WORKER",
    })
    assert policy.frameworks == ("pytorch", "jax")
    assert (policy.pytorch_mode, policy.on_error, policy.socket_ifname) == (
        "process-per-container", "warn", "auto")
    assert policy.tensorflow_roles == (("main", "chief"), ("Sub", "worker"))
    assert on_error_of({PREFIX + "on-error": "WARN"}) == "warn"
    assert ImagePolicy.from_labels({PREFIX + "frameworks": "jax",
                                    PREFIX + "socket-ifname": "Eth0"}).socket_ifname == "Eth0"


def test_docker_inspect_config_output_is_a_labels_file() -> None:
    config = {"Hostname": "", "Env": ["PATH=/bin"], "Cmd": ["python"],
              "Labels": {PREFIX + "frameworks": "pytorch", "maintainer": "x"}}
    assert parse_labels_document(json.dumps(config), "c.json") == {PREFIX + "frameworks": "pytorch"}
    assert parse_labels_document(json.dumps({**config, "Labels": None}), "c.json") == {}


def test_every_non_string_label_value_is_reported() -> None:
    with pytest.raises(LabelError) as info:
        parse_labels_document(json.dumps({PREFIX + "master-port": 1, PREFIX + "jax-port": None,
                                          "ai.backend.distibuted.frameworks": True}), "l.json")
    assert str(info.value).splitlines() == [
        "3 label problems:",
        "  1. labels file l.json: label ai.backend.distributed.master-port = 1: expected a JSON "
        'string (Docker label values are strings, write "1")',
        "  2. labels file l.json: label ai.backend.distributed.jax-port = null: expected a JSON "
        "string (Docker label values are strings)",
        "  3. labels file l.json: label ai.backend.distibuted.frameworks = true: expected a JSON "
        'string (Docker label values are strings, write "true")',
    ]


def test_reading_problems_of_every_source_are_reported_together(tmp_path: Path) -> None:
    from derive_env.cli import load_labels

    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(LabelError) as info:
        load_labels({"DERIVE_ENV_LABELS_FILE": str(tmp_path / "none.json")}, [str(bad)],
                    ["novalue"])
    lines = str(info.value).splitlines()
    assert lines[0] == "3 label problems:"
    assert lines[1].startswith("  1. labels file ($DERIVE_ENV_LABELS_FILE) ")
    assert lines[2].startswith(f"  2. labels file {bad}: not valid JSON")
    assert lines[3] == "  3. --label 'novalue': expected KEY=VALUE"


@given(labels=st.dictionaries(
    st.one_of(st.sampled_from([PREFIX + n for n in label_names()]),
              st.sampled_from(["ai.backend.distibuted.frameworks", "AI.BACKEND.DISTRIBUTED.X",
                               "ai.backend.frameworks", "ai.backend.kernelspec"]),
              st.text(max_size=30)),
    st.text(max_size=20), max_size=6))
@FUZZ
def test_label_sets_never_crash(labels: dict[str, str]) -> None:
    from derive_env.pipeline import derive

    try:
        derive({}, labels)
        check_not_opted_in(labels) if PREFIX + "frameworks" not in labels else None
    except DeriveEnvError:
        return
