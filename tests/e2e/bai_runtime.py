"""Backend.AI's own container runtime, from its PyPI wheels (test-only), fetched and cached.

What the agent mounts into every kernel container comes from four wheels, pinned here:

- ``backend.ai-kernel-binary`` (:data:`VERSION`): ``ai/backend/runner/``: entrypoint.sh,
  su-exec, dropbearmulti (the SSH server on port 2200), libbaihook, extract_dotfiles.py,
  fantompass.py, ... (the agent copies them to /opt/kernel: ``mount_krunner`` in
  src/ai/backend/agent/docker/agent.py and ``_kernel_runner_mounts`` in
  src/ai/backend/agent/stage/kernel_lifecycle/docker/mount/krunner.py of lablup/backend.ai);
- ``backend.ai-kernel`` (:data:`VERSION`): the kernel runner, package ``ai.backend.kernel``
  (mounted into the static Python's site-packages);
- ``backend.ai-kernel-helper`` (:data:`VERSION`): package ``ai.backend.helpers``;
- ``backend.ai-krunner-static-gnu`` (:data:`KRUNNER_VERSION`): the static CPython the agent
  extracts into a volume mounted at /opt/backend.ai (``krunner-env.static-gnu.x86_64.tar.xz``).

:func:`wheels` downloads them once (``pip download --no-deps``, CPython 3.13 tags: the
kernel-binary wheel only declares ``Requires-Python >=3.13``) into :func:`cache_dir`;
:func:`unpacked` unzips them and extracts the static Python into the same cache (about
200 MB), keyed by the pinned versions, so later runs cost nothing. Standard library only.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["KRUNNER_VERSION", "VERSION", "Runtime", "cache_dir", "unpacked", "wheels"]

VERSION = "26.9.6"
KRUNNER_VERSION = "4.4.0"
#: (distribution, version, file name prefix) of each wheel.
WHEELS = (
    ("backend.ai-kernel-binary", VERSION, "backend_ai_kernel_binary-"),
    ("backend.ai-kernel", VERSION, "backend_ai_kernel-"),
    ("backend.ai-kernel-helper", VERSION, "backend_ai_kernel_helper-"),
    ("backend.ai-krunner-static-gnu", KRUNNER_VERSION, "backend_ai_krunner_static_gnu-"),
)
#: Seconds for one ``pip download`` of the four wheels (about 58 MB).
DOWNLOAD_TIMEOUT_S = 600.0


class RuntimeMissing(RuntimeError):
    """The wheels could not be fetched (no network, no pip): the message says why."""


def cache_dir() -> Path:
    """``$DERIVE_ENV_CACHE/backendai-runtime``, else ``$XDG_CACHE_HOME/derive-env/...``,
    else ``~/.cache/derive-env/backendai-runtime``."""
    base = os.environ.get("DERIVE_ENV_CACHE")
    if base:
        return Path(base) / "backendai-runtime"
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "derive-env" / "backendai-runtime"


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive flock on ``path`` (two test processes fetch or unpack only once)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _found(folder: Path) -> dict[str, Path]:
    found = {}
    for dist, version, prefix in WHEELS:
        hits = sorted(folder.glob(f"{prefix}{version}-*.whl"))
        if hits:
            found[dist] = hits[0]
    return found


def wheels() -> dict[str, Path]:
    """distribution -> its cached wheel, downloaded first when missing.

    :raises RuntimeMissing: pip failed (its last line in the message).
    """
    folder = cache_dir() / "wheels"
    with _locked(cache_dir() / ".lock"):
        found = _found(folder)
        missing = [f"{d}=={v}" for d, v, _ in WHEELS if d not in found]
        if missing:
            cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                   "--python-version", "3.13", "--only-binary=:all:", "-d", str(folder),
                   *missing]
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, check=False,
                                      timeout=DOWNLOAD_TIMEOUT_S)
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise RuntimeMissing(f"pip download {' '.join(missing)}: {exc}") from exc
            found = _found(folder)
            if proc.returncode != 0 or len(found) != len(WHEELS):
                last = (proc.stderr.strip().splitlines() or ["(no message)"])[-1]
                raise RuntimeMissing(f"pip download {' '.join(missing)} failed: {last}")
    return found


class Runtime:
    """The unpacked runtime (every path exists once :func:`unpacked` returned it).

    :ivar runner: ``ai/backend/runner`` of kernel-binary (entrypoint.sh, dropbearmulti, ...).
    :ivar kernel_pkg: the ``ai/backend/kernel`` package (the kernel runner).
    :ivar helpers_pkg: the ``ai/backend/helpers`` package.
    :ivar krunner_env: the static Python's root (``bin/python``, ``lib/python3.x``), the
        agent's /opt/backend.ai.
    :ivar python_dir: its ``lib/python3.x`` folder name (site-packages lives below it).
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.runner = root / "site" / "ai" / "backend" / "runner"
        self.kernel_pkg = root / "site" / "ai" / "backend" / "kernel"
        self.helpers_pkg = root / "site" / "ai" / "backend" / "helpers"
        self.krunner_env = root / "krunner-env"
        found = sorted((self.krunner_env / "lib").glob("python3.*"))
        self.python_dir = found[0].name if found else "python3"

    @property
    def dropbearmulti(self) -> Path:
        """The dropbear multi-call binary Backend.AI runs as the SSH server."""
        return self.runner / "dropbearmulti.x86_64.bin"


def unpacked() -> Runtime:
    """The wheels unzipped and the static Python extracted, in the cache (once).

    :raises RuntimeMissing: the wheels could not be fetched.
    """
    found = wheels()
    root = cache_dir() / f"unpacked-{VERSION}-{KRUNNER_VERSION}"
    with _locked(cache_dir() / ".lock"):
        if not (root / ".done").exists():
            shutil.rmtree(root, ignore_errors=True)
            site = root / "site"
            for wheel in found.values():
                with zipfile.ZipFile(wheel) as z:
                    z.extractall(site)
            for path in (site / "ai" / "backend" / "runner").glob("*.bin"):
                path.chmod(0o755)  # zipfile drops the mode bits
            (site / "ai" / "backend" / "runner" / "entrypoint.sh").chmod(0o755)
            archive = site / "ai" / "backend" / "krunner" / "static_gnu" / \
                "krunner-env.static-gnu.x86_64.tar.xz"
            with tarfile.open(archive) as tar:
                tar.extractall(root / "krunner-env", filter="fully_trusted")
            (root / ".done").touch()
    return Runtime(root)
