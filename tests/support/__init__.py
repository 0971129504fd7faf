"""What several test modules share: builders of managers' environments, hypothesis
strategies, loaders of recorded fixtures. Test modules import from here, never from each
other, and never edit ``sys.path``: pytest puts ``tests/`` on the path (pyproject.toml,
``[tool.pytest.ini_options] pythonpath``), so ``from support.slurm import step`` works in
every venv the Makefile runs the tests in.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

#: The folder of the tests (``tests/``); the repository is its parent.
TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent


def load_script(path: Path) -> ModuleType:
    """The module of a script that is not on the path (``benchmarks/parsers.py``, an e2e
    recorder), imported once by its file under its own name."""
    name = path.stem
    loaded = sys.modules.get(name)
    if loaded is not None and Path(getattr(loaded, "__file__", "") or "").resolve() == path:
        return loaded
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module
