"""Fixtures of the end-to-end tests on the real container engine (tests/e2e/engine.py).

``engine``: the tests' own dockerd for the whole session (skipped without root or Debian's
docker.io and mmdebstrap; a FAILURE under CI=true), stopped and cleaned up afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from engine import Engine, require_engine


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
