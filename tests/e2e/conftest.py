"""Fixtures of the end-to-end tests on the real container engine (tests/e2e/engine.py).

``engine``: the tests' own dockerd for the whole session (skipped without root or Debian's
docker.io and mmdebstrap; a FAILURE under CI=true), stopped and cleaned up afterwards.
``bai_image``: the example PyTorch image for the sessions on Backend.AI's own runtime
(tests/e2e/bai_containers.py), that runtime's wheels fetched first.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bai_runtime import RuntimeMissing, unpacked
from engine import Engine, example_image, require_engine
from helpers import require


@pytest.fixture(scope="session")
def engine() -> Iterator[Engine]:
    """A started :class:`engine.Engine`; only requested by the container tests, so a run
    without them never takes the machine's engine lock."""
    require_engine()
    started = Engine().start_daemon()
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture(scope="session")
def bai_image(engine: Engine) -> str:
    """The example PyTorch image, and Backend.AI's runtime fetched (FAIL under CI=true)."""
    try:
        unpacked()
    except RuntimeMissing as exc:
        require(False, f"Backend.AI's runtime wheels: {exc}")
    return example_image(engine, "pytorch")
