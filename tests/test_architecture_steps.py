"""docs/architecture.md, followed literally: "add a manager" is one table line (plus a module
for rules of its own), "add a framework" one new file plus one table line, and the tests
mirror the tree.

Each step list is applied to a copy of src/ (the file written from the doc's code block,
the line inserted into the table from the doc's other block); the copy then derives in a
fresh interpreter, so nothing else may need editing for the new manager or framework.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from derive_env.sources import SOURCE_NAMES

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
SRC = ROOT / "src" / "derive_env"


def _blocks_after(text: str, marker: str) -> str:
    """The first ```python block after ``marker`` in the doc."""
    start = text.index(marker)
    match = re.compile(r"```python\n(.*?)```", re.S).search(text, start)
    assert match is not None, marker
    return match.group(1)


def _apply(tmp_path: Path, module: str | None, table_file: str, table_start: str,
           step1: str | None, step2: str) -> Path:
    """A copy of the package with the doc's steps done (``module`` ``None``: the line
    alone): returns the copy's src/."""
    doc = DOC.read_text(encoding="utf-8")
    src = tmp_path / "src"
    shutil.copytree(SRC, src / "derive_env",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    if module is not None and step1 is not None:
        (src / "derive_env" / module).write_text(_blocks_after(doc, step1), encoding="utf-8")
    table = src / "derive_env" / table_file
    text = table.read_text(encoding="utf-8")
    start = text.index(table_start)
    end = text.index("\n)\n", start)
    line = "".join("    " + row if row else row
                   for row in _blocks_after(doc, step2).splitlines(keepends=True))
    table.write_text(text[:end + 1] + line + text[end + 1:], encoding="utf-8")
    return src


_DERIVE = """
import json, sys
sys.path.insert(0, sys.argv[1])
from derive_env.errors import DeriveEnvError
from derive_env.pipeline import derive
environ, labels = json.loads(sys.argv[2]), json.loads(sys.argv[3])
try:
    result = derive(environ, labels)
except DeriveEnvError as exc:
    print(json.dumps({"error": str(exc)}))
else:
    print(json.dumps({"source": result.topology.source, "changes": result.changes()}))
"""


def _derive(src: Path, environ: dict[str, str], labels: dict[str, str]) -> dict:
    out = subprocess.run(
        [sys.executable, "-I", "-c", _DERIVE, str(src), json.dumps(environ), json.dumps(labels)],
        capture_output=True, text=True, timeout=60, check=True)
    return json.loads(out.stdout)


def _check_example_manager(src: Path, bad_rank: str) -> None:
    """The example manager of the doc, added to the copy ``src``: its job derived, its bad
    rank refused with ``bad_rank``, its name in --help, and nothing without the step."""
    labels = {"ai.backend.distributed.frameworks": "pytorch,jax"}
    env = {"EXAMPLE_HOSTS": "n1,n2,n3", "EXAMPLE_NODE_RANK": "1", "PATH": "/bin"}
    got = _derive(src, env, labels)
    assert got["source"] == "example"
    changes = got["changes"]
    assert changes["MASTER_ADDR"] == "n1"
    assert changes["PET_NNODES"] == "3"
    assert changes["PET_NODE_RANK"] == "1"
    assert changes["JAX_COORDINATOR_ADDRESS"] == "n1:1234"
    assert changes["JAX_NUM_PROCESSES"] == "3"
    assert changes["JAX_PROCESS_ID"] == "1"
    # the checks, through the table's detection
    bad = _derive(src, {**env, "EXAMPLE_NODE_RANK": "3"}, labels)
    assert bad == {"error": bad_rank}
    # the table drives --help
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from derive_env.cli import options; "
            "print(options.help_of(next(o for o in options.OPTIONS if o.name == '--source')))")
    shown = subprocess.run([sys.executable, "-I", "-c", code, str(src)], capture_output=True,
                           text=True, timeout=60, check=True).stdout
    assert f"{', '.join(SOURCE_NAMES)}, example)" in shown
    # without the step, the same environment is a single container
    plain = _derive(ROOT / "src", env, labels)
    assert plain["changes"]["MASTER_ADDR"] == "127.0.0.1"


def test_add_a_manager_is_one_table_line(tmp_path: Path) -> None:
    """A manager its roles describe: the line alone, no module."""
    src = _apply(tmp_path, None, "sources/__init__.py", "SOURCES: tuple[Source, ...] = (",
                 None, "**Add its line to `SOURCES`**")
    assert not list((src / "derive_env" / "sources").rglob("example.py"))
    _check_example_manager(src, "EXAMPLE_NODE_RANK='3': expected a node rank below 3, the 3 "
                                "hosts in EXAMPLE_HOSTS; the example manager sets both for "
                                "every node")
    # the refusal data comes from the roles too: an image that did not opt in is told
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from derive_env.sources.sizes import "
            "larger_job; print(larger_job({'EXAMPLE_HOSTS': 'n1,n2', 'EXAMPLE_NODE_RANK': '0'}))")
    told = subprocess.run([sys.executable, "-I", "-c", code, str(src)], capture_output=True,
                          text=True, timeout=60, check=True).stdout.strip()
    assert told == "an example job states a job of more than one node (EXAMPLE_HOSTS='n1,n2')"


def test_a_manager_with_rules_of_its_own_is_one_module_more(tmp_path: Path) -> None:
    src = _apply(tmp_path, "sources/managers/example.py", "sources/__init__.py",
                 "SOURCES: tuple[Source, ...] = (",
                 "**Write `src/derive_env/sources/managers/example.py`**",
                 "**Name it on its line**")
    _check_example_manager(src, "EXAMPLE_NODE_RANK='3': expected a node rank below 3, the 3 "
                                "hosts in EXAMPLE_HOSTS; the example manager sets both for "
                                "every node")
    # the module's own rule, beside the roles
    env = {"EXAMPLE_HOSTS": "n1,n2", "EXAMPLE_NODE_RANK": "1", "EXAMPLE_MASTER": "n2"}
    assert _derive(src, env, {"ai.backend.distributed.frameworks": "pytorch"}) == {
        "error": "EXAMPLE_MASTER='n2': expected n1, the first host of EXAMPLE_HOSTS"}


def test_add_a_framework_is_one_file_plus_one_line(tmp_path: Path, backendai_env) -> None:
    src = _apply(tmp_path, "frameworks/example.py", "frameworks/__init__.py",
                 "FRAMEWORKS = (",
                 "Write `src/derive_env/frameworks/example.py`",
                 "Add its line to `FRAMEWORKS`")
    env = backendai_env(["main1", "sub1", "sub2"], "sub2")
    labels = {"ai.backend.distributed.frameworks": "pytorch,example"}
    changes = _derive(src, env, labels)["changes"]
    assert changes["EXAMPLE_COORDINATOR"] == "main1:4000"
    assert changes["EXAMPLE_NUM_NODES"] == "3"
    assert changes["EXAMPLE_NODE_ID"] == "2"
    assert changes["MASTER_ADDR"] == "main1"
    # its port label is a label of the policy, read like the others
    labelled = _derive(src, env, {**labels, "ai.backend.distributed.example-port": "4100"})
    assert labelled["changes"]["EXAMPLE_COORDINATOR"] == "main1:4100"
    # the port policy keeps it clear of the others: a default moves, two labels are refused
    moved = _derive(src, env, {**labels, "ai.backend.distributed.example-port": "29500"})
    assert (moved["changes"]["EXAMPLE_COORDINATOR"], moved["changes"]["MASTER_PORT"]) == (
        "main1:29500", "29501")
    clash = _derive(src, env, {**labels, "ai.backend.distributed.example-port": "4100",
                               "ai.backend.distributed.master-port": "4100"})
    assert clash["error"].startswith(
        "the example coordinator's port 4100 (label ai.backend.distributed.example-port) and "
        "the master port 4100 (label ai.backend.distributed.master-port) both hold port 4100")
    # its NODE variable is judged by its scope: a session-wide value is refused
    wrong = _derive(src, {**env, "EXAMPLE_NODE_ID": "0"}, labels)
    assert wrong["error"].startswith("EXAMPLE_NODE_ID='0': expected '2', this node's rank")
    # a name the table does not list is still refused
    unknown = _derive(ROOT / "src", env, labels)
    assert "example" in unknown["error"]


def _expected_test(module: Path) -> Path:
    relative = module.relative_to(SRC)
    if relative == Path("__init__.py"):
        return ROOT / "tests" / "test_api.py"
    if relative == Path("__main__.py"):
        return ROOT / "tests" / "test_main.py"
    folder = relative.parent
    stem = relative.stem if relative.stem != "__init__" else (
        "run" if folder == Path("cli") else folder.name)
    if folder == Path("sources/managers"):  # the managers' tests sit beside the engine's
        folder = folder.parent
    return ROOT / "tests" / folder / f"test_{stem}.py"


@pytest.mark.parametrize("module", sorted(SRC.rglob("*.py")),
                         ids=lambda p: str(p.relative_to(SRC)))
def test_every_module_has_its_test_file(module: Path) -> None:
    assert _expected_test(module).is_file(), (
        f"{module.relative_to(ROOT)} has no {_expected_test(module).relative_to(ROOT)}")
