"""The tests' own Docker engine: a private dockerd, a Debian base image and the example images.

Debian's docker.io (dockerd 20.10, containerd, runc, tini; `make engine`, called by
`make managers`, installs it with Debian's own service never started). This module starts a
dockerd of the tests' own, which touches no network but the containers' internal ones:

* its own socket, pid file and exec-root in a fresh temporary folder (removed afterwards,
  with the network-namespace mounts dockerd leaves there unmounted first);
* no default bridge, no iptables, no IP masquerading or forwarding (``--bridge=none
  --iptables=false --ip-masq=false --ip-forward=false``), the address pool 198.19.0.0/24;
* a persistent ``--data-root``, /var/cache/derive-env-e2e/docker (images and BuildKit's
  cache survive between runs: the second run builds nothing; ``DERIVE_ENV_ENGINE_DATA_ROOT``
  names another folder, e.g. a fresh one to measure a cold start);
* one engine per machine: an exclusive ``fcntl.flock`` on /var/cache/derive-env-e2e/engine.lock
  held while it runs; a second test run waits for it (at most ``DERIVE_ENV_ENGINE_WAIT_S``,
  default 1800 s) and fails with a message after that; an engine left by a killed run (its
  pid recorded in engine.json) is stopped first;
* stopped, its containers and networks removed, also when a test fails, on Ctrl-C (pytest
  tears the session fixture down) and on SIGTERM (turned into KeyboardInterrupt); dockerd gets
  SIGTERM if the test process dies (PR_SET_PDEATHSIG).

Use (from a test module in tests/e2e; the fixtures are in tests/e2e/conftest.py)::

    def test_something(engine):                      # session fixture: an Engine
        image = example_image(engine, "pytorch")     # built once per session (BuildKit cache)
        with engine.network("de-test") as net:       # internal, 198.19.0.0/24, removed after
            ids = [engine.run(image, net, host, env={...}) for host in ("main1", "sub1")]
            codes = [engine.wait(i, timeout=120) for i in ids]
            print(engine.logs(ids[0]))
        engine.docker("image", "inspect", image)      # any client command, DOCKER_HOST set

``base_image(engine)``: Debian 12 minbase with python3, venv, pip (PEP 668 marker removed,
like python:3.11-slim) and this host's CA certificates (/usr/local/share/ca-certificates: the
package proxy's TLS CA), made with mmdebstrap and ``docker import``, tagged by a hash of its
inputs (rebuilt when they change). ``example_image(engine, framework)``:
docker/<framework>.Dockerfile built as docs/integration.md says (BuildKit, ``--network host``,
``BASE_IMAGE`` build arg; torch's CPU wheel from this host's disk: ``TORCH_WHEELS=folder``,
bind-mounted into the install step), tagged ``derive-env-example/<framework>`` (the name
the compose files use).

Under CI=true a missing engine, mmdebstrap or root FAILS the tests (``require``).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import fcntl
import hashlib
import ipaddress
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from helpers import require

#: Debian's client (BuildKit built in); a newer client elsewhere on PATH may lack buildx.
DOCKER = "/usr/bin/docker"
DOCKERD = "/usr/sbin/dockerd"
MMDEBSTRAP = "/usr/bin/mmdebstrap"
COMPOSE = "/usr/bin/docker-compose"
#: Persistent state: the lock, the running engine's record and (by default) the data root.
STATE = Path("/var/cache/derive-env-e2e")
#: The engine's data root: images and BuildKit's cache, kept between runs. Another folder
#: (DERIVE_ENV_ENGINE_DATA_ROOT) gives a cold start; the lock stays the machine's one.
DATA_ROOT = Path(os.environ.get("DERIVE_ENV_ENGINE_DATA_ROOT", STATE / "docker"))
#: The only addresses the engine may use (the machine's rule for containers).
SUBNET = "198.19.0.0/24"
#: Repository root (build context of the example images).
REPO = Path(__file__).resolve().parents[2]
#: How long a second test run waits for the engine of the first (seconds).
LOCK_WAIT_S = float(os.environ.get("DERIVE_ENV_ENGINE_WAIT_S", "1800"))
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0


def engine_missing() -> str | None:
    """Why the engine cannot run here (not root, a program missing), or None."""
    if os.geteuid() != 0:
        return "the container engine needs root"
    for program in (DOCKERD, DOCKER, MMDEBSTRAP, COMPOSE):
        if not os.access(program, os.X_OK):
            return f"{program} not found (run `make engine` as root)"
    return None


def require_engine() -> None:
    """Skip (FAIL under CI=true) when the engine cannot run here."""
    reason = engine_missing()
    require(reason is None, reason or "")


def dns_of(subnet: str) -> str:
    """The last usable address of ``subnet``: the containers' DNS server, which nobody
    answers, so Docker's embedded DNS resolves the network's names and forwards nothing out
    (198.19.0.0/24 -> 198.19.0.254)."""
    return str(ipaddress.ip_network(subnet).broadcast_address - 1)


@dataclass(frozen=True)
class Network:
    """An internal network of the engine: its name, subnet and the DNS address to give."""

    name: str
    subnet: str
    dns: str


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the test process dies (prctl PR_SET_PDEATHSIG)."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)


def _mounts_under(*roots: Path) -> list[str]:
    """Mount points at or below any of ``roots``, deepest first (from /proc/self/mountinfo)."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if any(point == str(r) or point.startswith(f"{r}/") for r in roots):
            found.append(point)
    return sorted(found, key=len, reverse=True)


def _unmount_all(*roots: Path) -> None:
    for point in _mounts_under(*roots):
        subprocess.run(["umount", "-l", point], check=False, capture_output=True)


def _kill_recorded() -> None:
    """Stop the engine a killed test run left (recorded in engine.json), and its mounts."""
    record = STATE / "engine.json"
    if not record.exists():
        return
    with contextlib.suppress(ValueError, OSError):
        old = json.loads(record.read_text())
        pid, root = int(old["pid"]), Path(old["root"])
        cmdline = Path(f"/proc/{pid}/cmdline")
        if cmdline.exists() and str(root) in cmdline.read_text(errors="replace"):
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + STOP_TIMEOUT_S
            while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
                time.sleep(0.1)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        _unmount_all(root)
        shutil.rmtree(root, ignore_errors=True)
    record.unlink(missing_ok=True)


class Engine:
    """One private dockerd (see the module docstring). ``start_daemon()``/``stop()``; stop is
    idempotent and also registered with atexit."""

    def __init__(self) -> None:
        self.root: Path | None = None
        self.data_root = DATA_ROOT
        self.process: subprocess.Popen[bytes] | None = None
        self._lock: int | None = None
        self._previous_sigterm: object = None

    # ---- lifecycle -------------------------------------------------------------------
    def _acquire(self) -> None:
        STATE.mkdir(parents=True, exist_ok=True)
        fd = os.open(STATE / "engine.lock", os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    os.close(fd)
                    raise RuntimeError(
                        f"another test run holds the container engine ({STATE}/engine.lock) "
                        f"for more than {LOCK_WAIT_S:.0f} s (DERIVE_ENV_ENGINE_WAIT_S)"
                    ) from None
                time.sleep(1.0)
        self._lock = fd

    def start_daemon(self) -> Engine:
        """Take the machine's engine lock, start dockerd, wait until it answers (60 s)."""
        self._acquire()
        atexit.register(self.stop)
        if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            self._previous_sigterm = signal.signal(signal.SIGTERM, _sigterm_to_interrupt)
        _kill_recorded()
        self.root = Path(tempfile.mkdtemp(prefix="de-engine-", dir="/tmp"))
        self.data_root.mkdir(parents=True, exist_ok=True)
        log = (self.root / "dockerd.log").open("wb")
        self.process = subprocess.Popen(
            [DOCKERD, "-H", self.host, "--data-root", str(self.data_root),
             "--exec-root", str(self.root / "exec"), "--pidfile", str(self.root / "dockerd.pid"),
             "--bridge=none", "--iptables=false", "--ip-masq=false", "--ip-forward=false",
             "--default-address-pool", f"base={SUBNET},size=24"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True, preexec_fn=_die_with_parent,
        )
        log.close()
        (STATE / "engine.json").write_text(
            json.dumps({"pid": self.process.pid, "root": str(self.root)}))
        deadline = time.monotonic() + START_TIMEOUT_S
        while self.docker("version", check=False, timeout=10).returncode != 0:
            if self.process.poll() is not None or time.monotonic() > deadline:
                log_tail = self.log_tail()
                self.stop()
                raise RuntimeError(f"dockerd did not start in {START_TIMEOUT_S:.0f} s:\n{log_tail}")
            time.sleep(0.2)
        self.remove_leftovers()
        return self

    def remove_leftovers(self) -> None:
        """Remove every container and user network (a killed run's) and the untagged images
        that rebuilds leave behind; tagged images and the build cache stay."""
        ids = self.docker("ps", "-aq", check=False).stdout.split()
        if ids:
            self.docker("rm", "-f", *ids, check=False, timeout=120)
        self.docker("network", "prune", "-f", check=False)
        self.docker("image", "prune", "-f", check=False, timeout=120)

    def stop(self) -> None:
        """Remove containers and networks, stop dockerd (SIGTERM, SIGKILL after 30 s),
        unmount what it left, remove the temporary folder, release the lock."""
        if self.process is not None:
            if self.process.poll() is None:
                with contextlib.suppress(Exception):
                    self.remove_leftovers()
                self.process.terminate()
                try:
                    self.process.wait(STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait(10)
            self.process = None
            (STATE / "engine.json").unlink(missing_ok=True)
        if self.root is not None:
            _unmount_all(self.root, self.data_root)
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None
        if self._previous_sigterm is not None:
            signal.signal(signal.SIGTERM, self._previous_sigterm)  # type: ignore[arg-type]
            self._previous_sigterm = None
        if self._lock is not None:
            os.close(self._lock)  # releases the flock
            self._lock = None

    def log_tail(self, lines: int = 30) -> str:
        """The end of dockerd's log (for failure messages)."""
        if self.root is None or not (self.root / "dockerd.log").exists():
            return ""
        return "\n".join((self.root / "dockerd.log").read_text(errors="replace")
                         .splitlines()[-lines:])

    # ---- client ------------------------------------------------------------------------
    @property
    def host(self) -> str:
        """DOCKER_HOST of this engine."""
        assert self.root is not None, "engine not started"
        return f"unix://{self.root}/docker.sock"

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """This process's environment with DOCKER_HOST and DOCKER_BUILDKIT=1 (and ``extra``)."""
        env = {**os.environ, "DOCKER_HOST": self.host, "DOCKER_BUILDKIT": "1"}
        env.pop("DOCKER_CONTEXT", None)
        return {**env, **(extra or {})}

    def docker(self, *args: str, check: bool = True, timeout: float = 120,
               input: str | None = None, cwd: Path | None = None,
               env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """Run Debian's ``docker`` client against this engine; text output captured.
        ``check``: raise AssertionError with the output when it exits non-zero."""
        done = subprocess.run([DOCKER, *args], env=self.env(env), cwd=cwd, input=input,
                              capture_output=True, text=True, timeout=timeout, check=False)
        if check and done.returncode != 0:
            raise AssertionError(f"docker {' '.join(args)} -> {done.returncode}\n"
                                 f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        return done

    def has_image(self, ref: str) -> bool:
        return self.docker("image", "inspect", ref, check=False).returncode == 0

    @contextlib.contextmanager
    def network(self, name: str, subnet: str = SUBNET) -> Iterator[Network]:
        """An internal network (no route out) in ``subnet``; its containers and itself are
        removed on exit, also on failure."""
        self.docker("network", "create", "--internal", "--subnet", subnet, name)
        try:
            yield Network(name, subnet, dns_of(subnet))
        finally:
            ids = self.docker("ps", "-aq", "--filter", f"network={name}", check=False)
            if ids.stdout.split():
                self.docker("rm", "-f", *ids.stdout.split(), check=False, timeout=120)
            self.docker("network", "rm", name, check=False)

    def run(self, image: str, net: Network, host: str, *command: str,
              env: Mapping[str, str] | None = None, options: Sequence[str] = ()) -> str:
        """``docker run -d`` of ``image`` as ``host`` (hostname, network alias and name
        ``<network>-<host>``) on ``net``; returns the container id."""
        env_args = [a for k, v in (env or {}).items() for a in ("--env", f"{k}={v}")]
        return self.docker(
            "run", "-d", "--name", f"{net.name}-{host}", "--hostname", host,
            "--network", net.name, "--network-alias", host, "--dns", net.dns,
            *env_args, *options, image, *command).stdout.strip()

    def wait(self, container: str, timeout: float = 180) -> int:
        """Exit status of ``container`` once it ends (AssertionError after ``timeout`` s)."""
        try:
            done = self.docker("wait", container, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"container {container[:12]} still runs after {timeout} s:\n"
                                 f"{self.logs(container)}") from None
        return int(done.stdout.strip())

    def logs(self, container: str, stderr: bool = True) -> str:
        """stdout of ``container``, then its stderr (unless ``stderr`` is false)."""
        done = self.docker("logs", container, check=False)
        return done.stdout + (done.stderr if stderr else "")


@dataclass(frozen=True)
class Ended:
    """A container that ended: its exit status, stdout and stderr."""

    code: int
    out: str
    err: str


def ended(engine: Engine, containers: Mapping[str, str], timeout: float) -> dict[str, Ended]:
    """host -> :class:`Ended` of each container (host -> id), once all ended (each waited
    for at most ``timeout`` s)."""
    codes = {host: engine.wait(cid, timeout) for host, cid in containers.items()}
    logs = {host: engine.docker("logs", cid) for host, cid in containers.items()}
    return {h: Ended(codes[h], logs[h].stdout, logs[h].stderr) for h in containers}


def describe(results: Mapping[str, Ended]) -> str:
    """Each container's exit status and the end of its output (for failure messages)."""
    return "\n".join(f"--- {h}: exit {r.code}\n{r.out[-3000:]}\n{r.err[-3000:]}"
                     for h, r in results.items())


def _sigterm_to_interrupt(signum: int, frame: object) -> None:
    """SIGTERM during a test run: unwind like Ctrl-C, so the fixtures remove everything."""
    raise KeyboardInterrupt(f"signal {signum}")


# ---- images ------------------------------------------------------------------------------
#: mmdebstrap's inputs of the base image (any change gives a new tag, hence a rebuild).
BASE_SUITE = "bookworm"
BASE_MIRRORS = (
    "deb http://deb.debian.org/debian bookworm main",
    "deb http://deb.debian.org/debian bookworm-updates main",
    "deb http://deb.debian.org/debian-security bookworm-security main",
)
BASE_PACKAGES = ("python3", "python3-venv", "python3-pip", "python-is-python3",
                 "ca-certificates")
CA_DIR = Path("/usr/local/share/ca-certificates")
#: The image's config, like python:3.11-slim's.
BASE_CHANGES = ('ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
                "ENV LANG=C.UTF-8", 'CMD ["python3"]')
BASE_HOOKS = (
    # python:3.11-slim's pip installs into the image's Python: so does this base's.
    'rm -f "$1"/usr/lib/python3*/EXTERNALLY-MANAGED',
    'mkdir -p "$1/usr/local/share/ca-certificates"',
    'cp -r /usr/local/share/ca-certificates/. "$1/usr/local/share/ca-certificates/"',
    'chroot "$1" update-ca-certificates',
)


def base_key() -> str:
    """Content key of the base image: suite, mirrors, packages, hooks, config and the CA
    certificates' names and bytes (12 hex digits of SHA-256)."""
    digest = hashlib.sha256(json.dumps(
        [BASE_SUITE, BASE_MIRRORS, BASE_PACKAGES, BASE_HOOKS, BASE_CHANGES]).encode())
    for cert in sorted(p for p in CA_DIR.rglob("*") if p.is_file()):
        digest.update(str(cert.relative_to(CA_DIR)).encode() + b"\0" + cert.read_bytes())
    return digest.hexdigest()[:12]


def base_image(engine: Engine) -> str:
    """The Debian base image's tag (``derive-env-e2e/base:<key>``), made when missing:
    mmdebstrap (30-90 s) into a tarball, then ``docker import``."""
    tag = f"derive-env-e2e/base:{base_key()}"
    if engine.has_image(tag):
        return tag
    with tempfile.TemporaryDirectory(prefix="de-base-") as tmp:
        tarball = Path(tmp) / "base.tar"
        done = subprocess.run(
            [MMDEBSTRAP, "--quiet", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}",
             *[f"--customize-hook={hook}" for hook in BASE_HOOKS],
             BASE_SUITE, str(tarball), *BASE_MIRRORS],
            capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL, check=False)
        if done.returncode != 0:
            raise AssertionError(f"mmdebstrap of the base image -> {done.returncode}\n"
                                 f"{done.stderr[-3000:]}")
        changes = [a for c in BASE_CHANGES for a in ("--change", c)]
        engine.docker("import", *changes, str(tarball), tag, timeout=300)
    return tag


#: Example images built in this session (framework -> tag).
_BUILT: dict[str, str] = {}


#: Where torch's CPU wheel comes from when this host's disk has none (the Dockerfile's default).
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def torch_wheel_dir() -> Path:
    """The build context's folder torch-wheels/ (git-ignored) with torch 2.13.0's CPU wheel:
    found on this host's disk by ``pip download --no-deps --no-index`` (pip's configured
    find-links), else downloaded from PyTorch's CPU index (about 190 MB, once)."""
    folder = REPO / "torch-wheels"
    errors = []
    for source in (["--no-index"], ["--index-url", TORCH_CPU_INDEX]):
        if any(folder.glob("torch-2.13.0*.whl")):
            break
        folder.mkdir(exist_ok=True)
        done = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                               *source, "torch==2.13.0", "-d", str(folder)],
                              capture_output=True, text=True, timeout=900, check=False)
        errors.append(done.stderr[-1000:])
    else:
        if not any(folder.glob("torch-2.13.0*.whl")):
            raise AssertionError("torch 2.13.0's CPU wheel: " + "\n".join(errors))
    return folder


def example_image(engine: Engine, framework: str) -> str:
    """docker/<framework>.Dockerfile built from the repository root as docs/integration.md
    says (BuildKit, ``--network host``, ``--build-arg BASE_IMAGE=<the Debian base>``), once
    per session; BuildKit's cache in the data root makes a rebuild take seconds."""
    if framework in _BUILT:
        return _BUILT[framework]
    tag = f"derive-env-example/{framework}"  # the name the docs and compose files use
    dockerfile = f"docker/{framework}.Dockerfile"
    engine.docker("build", "--network", "host", "-f", dockerfile,
                  *offline_build_args(engine, dockerfile), "-t", tag, ".", cwd=REPO,
                  timeout=1800)
    _BUILT[framework] = tag
    return tag


#: The build arguments :func:`offline_build_args` sets: how a docker/ image gets its inputs
#: on this machine (the Debian base, torch from this host's disk), not what the image is.
OFFLINE_ARGS = frozenset({"BASE_IMAGE", "TORCH_WHEELS", "TORCH_INDEX_URL"})


def offline_build_args(engine: Engine, dockerfile: str) -> list[str]:
    """``--build-arg``s of this machine's build of ``dockerfile`` (from the repository
    root): ``BASE_IMAGE`` the Debian base; for a Dockerfile taking ``TORCH_WHEELS``, torch
    from torch-wheels/ and its small dependencies from PyPI (PyTorch's index is not
    reachable from this machine)."""
    args = ["--build-arg", f"BASE_IMAGE={base_image(engine)}"]
    if "ARG TORCH_WHEELS=" in (REPO / dockerfile).read_text():
        torch_wheel_dir()
        args += ["--build-arg", "TORCH_WHEELS=folder",
                 "--build-arg", "TORCH_INDEX_URL=https://pypi.org/simple"]
    return args
