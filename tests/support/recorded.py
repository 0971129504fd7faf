"""The environments real managers gave their tasks, recorded as fixtures
(tests/fixtures/recorded by tests/e2e/record_envs.py, tests/fixtures/gridengine by
tests/e2e/record_gridengine.py; README.md there has the exact commands), and their loaders.

A fixture file is dotenv text (:func:`dump_env`) whose first line names the node the task
really ran on (:data:`RAN_ON`). :func:`recorder` gives a recorder's module (its SCENARIOS),
for the tests that check the fixtures against it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType

from support import TESTS, load_script

#: Where the Slurm, MPI and torchrun fixtures live (one folder per scenario).
FIXTURES = TESTS / "fixtures" / "recorded"
#: Where the Grid Engine fixtures live.
GRIDENGINE = TESTS / "fixtures" / "gridengine"
#: Stands for the Slurm cluster's temporary folder in recorded values (it differs per run).
RUN_DIR = "/tmp/derive-slurm-run"
#: Stands for the Grid Engine cluster's temporary folder.
SGE_RUN_DIR = "/tmp/derive-sge-run"

#: First line of every fixture: the comment naming the node the task really ran on.
RAN_ON = "# ran on: "
#: One recorded task: (the node it ran on, its kept variables).
Recorded = tuple[str, dict[str, str]]

_BARE = re.compile(r"^[A-Za-z0-9_./:,@%+=\[\]()-]*$")


def dump_env(env: Mapping[str, str]) -> str:
    """dotenv text: one ``KEY=value`` per variable, sorted by name. A value of only
    ``[A-Za-z0-9_./:,@%+=[]()-]`` is written bare, one without ``'`` or a newline in single
    quotes (literal), any other as a JSON string in double quotes. :func:`load_env` reverses
    it exactly."""
    lines = []
    for k in sorted(env):
        v = env[k]
        if _BARE.match(v):
            lines.append(f"{k}={v}")
        elif "'" not in v and "\n" not in v:
            lines.append(f"{k}='{v}'")
        else:
            lines.append(f"{k}={json.dumps(v)}")
    return "\n".join(lines) + "\n"


def load_env(text: str) -> dict[str, str]:
    """Parse :func:`dump_env` text back into a dict. Raises ValueError naming the line when a
    line is not ``KEY=value`` in one of the three forms."""
    env: dict[str, str] = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line or line.startswith("#"):
            continue
        key, sep, raw = line.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise ValueError(f"line {n}: expected KEY=value, got {line!r}")
        if raw.startswith("'") and raw.endswith("'") and len(raw) >= 2:
            env[key] = raw[1:-1]
        elif raw.startswith('"'):
            env[key] = json.loads(raw)
        elif _BARE.match(raw):
            env[key] = raw
        else:
            raise ValueError(f"line {n}: value of {key} is neither bare nor quoted: {raw!r}")
    return env


def load_fixture(path: Path) -> Recorded:
    """(node the task ran on, variables) of one fixture file written by :func:`write_fixtures`.
    Raises ValueError when the first line is not the ``# ran on:`` comment."""
    text = path.read_text()
    first = text.split("\n", 1)[0]
    if not first.startswith(RAN_ON):
        raise ValueError(f"{path}: first line must start with {RAN_ON!r}, got {first!r}")
    return first[len(RAN_ON):].strip(), load_env(text)


def recorder(name: str) -> ModuleType:
    """The e2e recorder ``tests/e2e/<name>.py`` as a module (``record_envs``,
    ``record_torchrun``): its SCENARIOS, without running it."""
    return load_script(TESTS / "e2e" / f"{name}.py")
