"""A simulated Backend.AI session with OpenSSH's sshd: hook, stand-in runner, SSH.

Backend.AI's own runtime in real containers is tests/e2e/bai_containers.py (entrypoint,
kernel runner and dropbear from its wheels). This simulation stays for what those
containers cannot show: on-every-node over OpenSSH's sshd, and mpirun from this machine
(tests/e2e/test_e2e_openssh.py). The layouts, the result records and the torch checks
below are shared by both.

Backend.AI ignores the image's ENTRYPOINT. Each container runs its entrypoint script, which
SOURCES the image's hook /opt/container/bootstrap.sh (derive-env's exports land in that
shell), then execs the kernel runner; the runner serves SSH on port 2200 to the session's
other containers with its own environment, and only in ``main1`` runs the batch command,
which starts the job on the other containers over SSH (reference.md, "Backend.AI specifics").

Here every container of a :class:`simcluster.SimulatedCluster` (network namespace, own
hostname, /etc/hosts naming every container) runs, as root:

    backendai/container.sh      plays Docker: bind mounts, inside the container's own mount
                                namespace, of its folders onto /opt/container (holding the
                                repository's docker/bootstrap.sh, executable), /home/config,
                                /home/work and /root/.ssh;
    backendai/entrypoint.sh     stand-in of /opt/kernel/entrypoint.sh (POSIX sh);
    backendai/kernel_runner.py  stand-in of the kernel runner: records its environment,
                                applies /home/config/environ.txt, writes the SSH client
                                config, runs /usr/sbin/sshd -D -p 2200, runs the batch command
                                in main1.

``on-every-node`` (docker/on-every-node.sh) is on every container's PATH, as an image
installs it. Nothing changes on the machine outside a temporary folder, except the mount
points that do not exist yet (/opt/container, /home/config, /home/work, /root/.ssh and the
sshd privilege separation folder /run/sshd): they are made empty and removed afterwards, by
the last of the sessions running at the same time (a registry in the temporary folder).
Every process, namespace and folder is removed on exit, also on failure.

    with BackendAISession(DEFAULT, "on-every-node hostname", labels) as session:
        result = session.run(timeout=120)
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import random
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path
from typing import Any

from simcluster import SimulatedCluster, backendai_env, canonical_order

__all__ = [
    "DEFAULT",
    "LAYOUTS",
    "TEMPLATE",
    "BackendAISession",
    "ContainerRecord",
    "Layout",
    "SessionResult",
    "missing_tools",
    "torch_labels",
    "worker_lines",
]

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
STANDIN = HERE / "backendai"
BOOTSTRAP = REPO / "docker" / "bootstrap.sh"
ON_EVERY_NODE = REPO / "docker" / "on-every-node.sh"
#: Mount points inside every container; made on the machine (empty) only when missing.
MOUNT_POINTS = (Path("/opt/container"), Path("/home/config"), Path("/home/work"),
                Path("/root/.ssh"), Path("/run/sshd"))
#: Variables the shells on the way set themselves: not exports of the hook.
_SHELL_NOISE = frozenset({"PWD", "OLDPWD", "SHLVL", "_"})
#: Processes per container (the nproc-per-node label of the example image).
NPROC_PER_NODE = 2
#: Seconds the other containers get to stop after main1's runner has ended.
STOP_GRACE_S = 5.0


@dataclasses.dataclass(frozen=True)
class Layout:
    """A session's containers as Backend.AI names and orders them.

    :ivar name: for messages.
    :ivar hosts: the containers in canonical order (main first, then REPLICAS order).
    :ivar replicas: BACKENDAI_CLUSTER_REPLICAS (sorted by role name, as Backend.AI does).
    :ivar hosts_order: BACKENDAI_CLUSTER_HOSTS: ordered by index within a role only.
    :ivar group_order: roles in the order the session's request listed them (LOCAL_RANK).
    """

    name: str
    hosts: tuple[str, ...]
    replicas: str
    hosts_order: tuple[str, ...]
    group_order: tuple[str, ...]

    def env(self, host: str) -> dict[str, str]:
        """The BACKENDAI_* variables of container ``host``."""
        return backendai_env(list(self.hosts_order), host, self.replicas,
                             group_order=list(self.group_order))


#: The default session: one main and two sub; main1 and sub1 tie on index 1 in HOSTS.
DEFAULT = Layout("default", ("main1", "sub1", "sub2"), "main:1,sub:2",
                 ("sub1", "main1", "sub2"), ("main", "sub"))
#: A cluster template listing the workers first: LOCAL_RANK worker1=0, worker2=1, main1=2.
TEMPLATE = Layout("template", ("main1", "worker1", "worker2"), "main:1,worker:2",
                  ("worker1", "main1", "worker2"), ("worker", "main"))
LAYOUTS = (DEFAULT, TEMPLATE)


def torch_labels(port: int, nproc_per_node: int = NPROC_PER_NODE) -> dict[str, str]:
    """Image labels of the PyTorch example: torchrun mode, ``nproc_per_node`` processes per
    container, master ``port`` (TCP), the socket interface chosen by derive-env."""
    return {
        "ai.backend.distributed.frameworks": "pytorch",
        "ai.backend.distributed.nproc-per-node": str(nproc_per_node),
        "ai.backend.distributed.master-port": str(port),
        "ai.backend.distributed.socket-ifname": "auto",
    }


def missing_tools() -> list[str]:
    """The programs this simulation needs that the machine lacks (empty: none)."""
    need = ["/usr/sbin/sshd", "/usr/bin/ssh", "/usr/bin/ssh-keygen", "/bin/mount"]
    return [p for p in need if not os.access(p, os.X_OK)]


@dataclasses.dataclass
class ContainerRecord:
    """One container after the session.

    :ivar given: the environment "Docker" gave it (before the hook).
    :ivar runner_env: the environment its kernel runner started with (after the hook);
        None when the runner never started (the hook stopped the container).
    :ivar returncode: its entrypoint's exit status (negative: killed by that signal).
    :ivar stdout: / :ivar stderr: its output (the batch command's, on main1).
    :ivar log: the container's own log where it differs from stdout/stderr (main1 of a
        real session: the entrypoint's and the runner's lines), else empty.
    """

    host: str
    given: dict[str, str]
    runner_env: dict[str, str] | None
    returncode: int | None
    stdout: str
    stderr: str
    log: str = ""

    @property
    def exports(self) -> dict[str, str]:
        """What the hook added or changed: runner environment minus the given one."""
        env = self.runner_env or {}
        return {k: v for k, v in env.items()
                if self.given.get(k) != v and k not in _SHELL_NOISE}


@dataclasses.dataclass
class SessionResult:
    """Outcome of :meth:`BackendAISession.run`.

    :ivar batch_rc: the batch command's exit status (None: it did not end in time or the
        runner never got to run it). :ivar timed_out: main1 did not end within the timeout.
    """

    layout: Layout
    containers: dict[str, ContainerRecord]
    batch_rc: int | None
    timed_out: bool

    @property
    def main(self) -> ContainerRecord:
        """The main1 container (where the batch command ran)."""
        return self.containers["main1"]

    def describe(self, tail: int = 4000) -> str:
        """Every container's status and output tail, for assertion messages."""
        out = [f"layout {self.layout.name}: batch rc={self.batch_rc}, "
               f"timed out={self.timed_out}"]
        for c in self.containers.values():
            out.append(f"--- {c.host}: rc={c.returncode}\nexports: {c.exports}\n"
                       f"stdout:\n{c.stdout[-tail:]}\nstderr:\n{c.stderr[-tail:]}"
                       + (f"\ncontainer log:\n{c.log[-tail:]}" if c.log else ""))
        return "\n".join(out)


def worker_lines(text: str) -> list[dict[str, Any]]:
    """Every JSON object found in ``text`` (the workers' report lines), in order; tolerates
    two reports run together on one line."""
    decoder = json.JSONDecoder()
    found = []
    for line in text.splitlines():
        position = line.find("{")
        while position != -1:
            try:
                value, end = decoder.raw_decode(line, position)
            except ValueError:
                position = line.find("{", position + 1)
                continue
            if isinstance(value, dict):
                found.append(value)
            position = line.find("{", end)
    return found


class BackendAISession:
    """Context manager: the containers of one simulated Backend.AI session (module doc).

    :param layout: the session's containers (:data:`DEFAULT`, :data:`TEMPLATE`).
    :param batch: main1's batch command (a ``/bin/sh -c`` string), run in /home/work.
    :param labels: the image labels (a labels file named by DERIVE_ENV_LABELS_FILE, as an
        image's ENV would).
    :param user_env: session variables the user set: in every container's environment and in
        /home/config/environ.txt, as Backend.AI puts them.
    :param bin_dir: the folder of derive-env, python and torchrun (default: this venv's bin).
    :param host_labels: host -> the labels of that container instead of ``labels`` (a
        container started from another image, or with another labels file).
    :param without_sshd: containers whose runner starts no sshd (an SSH server that died or
        never came up); they run until the session ends.
    :raises simcluster.SimulationError: namespaces could not be made (after undoing them).
    """

    def __init__(self, layout: Layout, batch: str, labels: Mapping[str, str], *,
                 user_env: Mapping[str, str] | None = None,
                 bin_dir: Path | None = None,
                 host_labels: Mapping[str, Mapping[str, str]] | None = None,
                 without_sshd: Collection[str] = ()) -> None:
        self.layout = layout
        self.batch = batch
        self.labels = dict(labels)
        self.host_labels = {h: dict(v) for h, v in (host_labels or {}).items()}
        self.without_sshd = frozenset(without_sshd)
        self.user_env = dict(user_env or {})
        self.bin_dir = bin_dir or Path(sys.executable).parent
        self.prefix = f"bai{os.getpid() % 100000}x{random.randrange(1000)}"
        self._stack = contextlib.ExitStack()
        self._made_dirs: list[Path] = []  # mount points (and parents) absent on the machine
        self._registered = False
        self._procs: dict[str, tuple[subprocess.Popen[Any], Any, Any]] = {}
        self.tmp = Path()
        self.cluster: SimulatedCluster | None = None

    # -- folders -------------------------------------------------------------------------

    def container_dir(self, host: str) -> Path:
        """The machine-side folder of ``host``: ``work`` is its /home/work, ``state`` the
        runner's files (runner-env.json, sshd_config, sshd.log, batch-rc)."""
        return self.tmp / host

    def _make_mount_points(self) -> None:
        """Create the missing mount points (and missing parents), registered (see
        :func:`_mount_point_registry`) so that sessions running at the same time, in this or
        another process, share them and the last one to end removes them."""
        with _mount_point_registry() as registry:
            for point in MOUNT_POINTS:
                missing = []
                p = point
                while not p.exists():
                    missing.append(p)
                    p = p.parent
                for d in reversed(missing):
                    d.mkdir(mode=0o755)
                    registry["made"].append(str(d))
            self._made_dirs = [Path(d) for d in registry["made"]]
            registry["users"].append([os.getpid(), self.prefix])
            self._registered = True

    def _remove_mount_points(self) -> list[str]:
        """Unregister; the last session to end removes the mount points made (in reverse)."""
        if not self._registered:
            return []
        problems = []
        with _mount_point_registry() as registry:
            registry["users"].remove([os.getpid(), self.prefix])
            self._registered = False
            if not registry["users"]:
                for d in reversed(registry["made"]):
                    try:
                        Path(d).rmdir()
                    except OSError as exc:
                        problems.append(f"could not remove {d}: {exc}")
                registry["made"].clear()
        return problems

    def _prepare(self) -> None:
        """The temporary folder: labels, session SSH key, one folder per container."""
        self.tmp = Path(self._stack.enter_context(
            tempfile.TemporaryDirectory(prefix="derive-env-bai-")))
        (self.tmp / "labels.json").write_text(json.dumps(self.labels))
        for host, labels in self.host_labels.items():
            (self.tmp / f"labels.{host}.json").write_text(json.dumps(labels))
        bin_dir = self.tmp / "bin"
        bin_dir.mkdir()
        (bin_dir / "on-every-node").symlink_to(ON_EVERY_NODE)
        key = self.tmp / "id_cluster"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "cluster",
                        "-f", str(key)], check=True, timeout=30)
        for host in self.layout.hosts:
            d = self.container_dir(host)
            for sub in ("opt-container", "config/ssh", "work", "dot-ssh", "state"):
                (d / sub).mkdir(parents=True)
            (d / "dot-ssh").chmod(0o700)
            (d / "opt-container" / "bootstrap.sh").touch()
            for name in ("id_cluster", "id_cluster.pub"):
                (d / "config" / "ssh" / name).write_bytes((self.tmp / name).read_bytes())
            (d / "config" / "ssh" / "id_cluster").chmod(0o600)
            agent_env = {**self.layout.env(host), **self.user_env}
            # environ.txt: unquoted KEY=VALUE lines of the agent's and the user's variables.
            (d / "config" / "environ.txt").write_text(
                "".join(f"{k}={v}\n" for k, v in agent_env.items()))
            if host == "main1":
                (d / "state" / "batch-command").write_text(self.batch)
            if host in self.without_sshd:
                (d / "state" / "no-sshd").touch()

    def given_env(self, host: str) -> dict[str, str]:
        """The environment the container ``host`` is created with (image ENV + agent's)."""
        path = [str(self.tmp / "bin"), str(self.bin_dir), "/usr/local/sbin", "/usr/local/bin",
                "/usr/sbin", "/usr/bin", "/sbin", "/bin"]
        return {
            "PATH": ":".join(path),
            "HOME": "/root",
            "HOSTNAME": host,
            "LANG": "C.UTF-8",
            "PYTHONUNBUFFERED": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
            "DERIVE_ENV_LABELS_FILE": str(self.tmp / (
                f"labels.{host}.json" if host in self.host_labels else "labels.json")),
            **self.layout.env(host),
            **self.user_env,
        }

    # -- lifecycle -----------------------------------------------------------------------

    def __enter__(self) -> BackendAISession:
        try:
            self._prepare()
            self._make_mount_points()
            self.cluster = self._stack.enter_context(
                SimulatedCluster(list(self.layout.hosts), prefix=self.prefix))
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        problems = self.close()
        if problems and exc[0] is None:
            raise RuntimeError("simulated Backend.AI session not fully removed: "
                               + "; ".join(problems))

    def close(self) -> list[str]:
        """Stop every container (the cluster kills every process in its namespaces), remove
        the namespaces, the temporary folder and the mount points made. Idempotent; returns
        what could not be removed."""
        problems: list[str] = []
        try:
            self._stack.close()  # cluster first (LIFO), then the temporary folder
        except Exception as exc:  # report it, keep cleaning up
            problems.append(str(exc))
        for _proc, out, err in self._procs.values():
            out.close()
            err.close()
        problems += self._remove_mount_points()
        self.cluster = None
        return problems

    def leftovers(self) -> list[str]:
        """After the ``with`` block: everything of this session still on the machine (empty
        when all is gone): processes whose command line or environment names the temporary
        folder (sshd, runners, anything the batch command left running), mounts, network
        namespaces and /etc/netns folders of the prefix, the folders made."""
        found = []
        tmp = os.fsencode(str(self.tmp))
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit() or int(proc.name) == os.getpid():
                continue
            with contextlib.suppress(OSError):
                if tmp in (proc / "cmdline").read_bytes() or tmp in (proc / "environ").read_bytes():
                    found.append(f"process {proc.name}: {(proc / 'cmdline').read_bytes()!r}")
        if tmp in Path("/proc/self/mountinfo").read_bytes():
            found.append(f"a mount under {self.tmp}")
        found += [f"namespace {p}" for p in Path("/run/netns").glob(f"{self.prefix}-*")]
        found += [f"folder {p}" for p in Path("/etc/netns").glob(f"{self.prefix}-*")]
        found += [f"folder {self.tmp}"] if self.tmp.exists() else []
        with _mount_point_registry() as registry:
            if not registry["users"]:  # else another session still uses them
                found += [f"folder {p}" for p in self._made_dirs if p.exists()]
        return found

    def start(self) -> None:
        """Start every container at once, with no barrier between them (as Backend.AI)."""
        assert self.cluster is not None, "use inside `with`"
        runner = [str(self.bin_dir / "python"), str(STANDIN / "kernel_runner.py")]
        for host in canonical_order(list(self.layout.hosts), self.layout.replicas):
            d = self.container_dir(host)
            argv = [str(STANDIN / "container.sh"), str(d), str(BOOTSTRAP),
                    str(STANDIN / "entrypoint.sh"), *runner, str(d / "state")]
            out = tempfile.TemporaryFile()  # noqa: SIM115 - closed by close()
            err = tempfile.TemporaryFile()  # noqa: SIM115
            proc = self.cluster.popen(host, argv, self.given_env(host), inherit=False,
                                      stdout=out, stderr=err)
            self._procs[host] = (proc, out, err)

    def wait(self, timeout: float) -> SessionResult:
        """Wait (at most ``timeout`` s) for main1's runner to end, then stop the others
        (SIGTERM, then after STOP_GRACE_S the cluster's SIGKILL) and collect the result."""
        deadline = time.monotonic() + timeout
        main = self._procs["main1"][0]
        while main.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        timed_out = main.poll() is None
        for proc, _out, _err in self._procs.values():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        grace = time.monotonic() + STOP_GRACE_S
        while time.monotonic() < grace and any(p.poll() is None for p, *_ in
                                               self._procs.values()):
            time.sleep(0.1)
        containers = {}
        for host, (proc, out, err) in self._procs.items():
            state = self.container_dir(host) / "state"
            runner_env = None
            if (state / "runner-env.json").exists():
                runner_env = json.loads((state / "runner-env.json").read_text())
            containers[host] = ContainerRecord(
                host=host, given=self.given_env(host), runner_env=runner_env,
                returncode=proc.poll(), stdout=_read(out), stderr=_read(err))
        rc_file = self.container_dir("main1") / "state" / "batch-rc"
        batch_rc = int(rc_file.read_text()) if rc_file.exists() else None
        return SessionResult(self.layout, containers, batch_rc, timed_out)

    def run(self, timeout: float) -> SessionResult:
        """:meth:`start`, then :meth:`wait` ``timeout`` seconds."""
        self.start()
        return self.wait(timeout)


#: Which mount points the sessions made and which sessions use them (pid, prefix), guarded by
#: an flock on its ".lock" file beside it (both in the temporary folder).
_REGISTRY = Path(tempfile.gettempdir()) / "derive-env-bai-mount-points.json"


@contextlib.contextmanager
def _mount_point_registry() -> Iterator[dict[str, list[Any]]]:
    """The registry, locked, with sessions of dead processes dropped; written back on exit
    (removed when no session uses it). Why: tests of several engineers or runs may simulate
    sessions at the same time; removing a mount point another session uses would break it."""
    with open(_REGISTRY.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        registry = {"made": [], "users": []}
        if _REGISTRY.exists():
            registry = json.loads(_REGISTRY.read_text())
        registry["users"] = [u for u in registry["users"] if _pid_alive(u[0])]
        yield registry
        if registry["users"] or registry["made"]:
            _REGISTRY.write_text(json.dumps(registry))
        else:
            _REGISTRY.unlink(missing_ok=True)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _read(f: Any) -> str:
    f.seek(0)
    return f.read().decode("utf-8", errors="replace")


# -- the main job: torchrun on every node -------------------------------------------------

#: The variables derive-env's PyTorch rules give each container (contract section 6).
TORCH_VARIABLES = ("MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "PET_NNODES", "PET_NODE_RANK",
                   "PET_MASTER_ADDR", "PET_MASTER_PORT", "PET_NPROC_PER_NODE")
TORCH_SCRIPT = HERE.parents[1] / "examples" / "training" / "torch_allreduce.py"
#: main1's batch command, as docs/backendai.md tells users: torchrun with no flags, everywhere.
TORCH_BATCH = f"on-every-node torchrun {shlex.quote(str(TORCH_SCRIPT))}"
#: Session variable: seconds for the workers' process group and all-reduce.
TORCH_USER_ENV = {"E2E_PG_TIMEOUT_S": "90"}


def expected_torch_exports(layout: Layout, host: str, port: int,
                           nproc_per_node: int = NPROC_PER_NODE) -> dict[str, str]:
    """The PyTorch variables the hook must export in ``host`` (master port ``port``)."""
    rank = str(layout.hosts.index(host))
    return {
        "MASTER_ADDR": "main1", "MASTER_PORT": str(port), "NODE_RANK": rank,
        "PET_NNODES": str(len(layout.hosts)), "PET_NODE_RANK": rank,
        "PET_MASTER_ADDR": "main1", "PET_MASTER_PORT": str(port),
        "PET_NPROC_PER_NODE": str(nproc_per_node),
    }


def assert_torch_session(result: SessionResult, port: int) -> None:
    """The torch session of ``result`` (master port ``port``) as it must be: no
    :func:`torch_problems` (the hook's exports, the batch status, every rank's report), node
    ranks in canonical order, ``GLOO_SOCKET_IFNAME=eth0`` in every container."""
    problems = torch_problems(result, port)
    assert problems == [], torch_summary(result, port, problems) + "\n" + result.describe()
    hosts = result.layout.hosts
    assert {h: c.exports["NODE_RANK"] for h, c in result.containers.items()} == {
        h: str(i) for i, h in enumerate(hosts)}, result.describe()
    assert {h: c.exports.get("GLOO_SOCKET_IFNAME") for h, c in result.containers.items()} == (
        dict.fromkeys(hosts, "eth0")), result.describe()


#: on-every-node's lines after sub1's command failed while main1's and sub2's ran: main1's
#: command got SIGTERM (143); sub2's ssh client too (ssh's own status 255).
STOPPED_AFTER_SUB1 = [
    "on-every-node: sub1: exit status 1; stopping the command on every other node "
    "(SIGTERM, SIGKILL after 10s)",
    "on-every-node: main1: exit status 143 (stopped)",
    "on-every-node: sub2: exit status 255 (stopped)",
]


def torch_problems(result: SessionResult, port: int,
                   nproc_per_node: int = NPROC_PER_NODE) -> list[str]:
    """Every way the torch session of ``result`` differs from the expected one (empty: all
    ranks agree): the hook's exports per container, the batch status, each worker's rank,
    node rank, host, master and all-reduce sum."""
    layout = result.layout
    problems = []
    for host in layout.hosts:
        record = result.containers[host]
        if record.runner_env is None:
            problems.append(f"{host}: the hook stopped the container (exit {record.returncode})")
            continue
        got = record.exports
        for name, value in expected_torch_exports(layout, host, port, nproc_per_node).items():
            if got.get(name) != value:
                problems.append(f"{host}: the hook exported {name}={got.get(name)!r}, "
                                f"expected {value!r}")
    if result.batch_rc != 0:
        problems.append(f"main1: the batch command ended with {result.batch_rc}")
    world = len(layout.hosts) * nproc_per_node
    workers = worker_lines(result.main.stdout)
    placed = sorted((int(w["rank"]), str(w["hostname"])) for w in workers
                    if w.get("rank") is not None)
    want = [(r, layout.hosts[r // nproc_per_node]) for r in range(world)]
    if placed != want:
        problems.append(f"workers (rank, host) {placed}, expected {want}")
    for w in workers:
        host = str(w.get("hostname"))
        if w.get("result") != world * (world + 1) / 2:
            problems.append(f"{host} rank {w.get('rank')}: all-reduce gave {w.get('result')}, "
                            f"expected {world * (world + 1) / 2:g} ({w.get('error', '')})")
        if host in layout.hosts and w.get("group_rank") != layout.hosts.index(host):
            problems.append(f"{host} rank {w.get('rank')}: node rank {w.get('group_rank')}, "
                            f"expected {layout.hosts.index(host)}")
        if w.get("master_addr") != "main1":
            problems.append(f"{host} rank {w.get('rank')}: master {w.get('master_addr')}")
    return problems


def _shown_first(name: str) -> tuple[int, str]:
    """Sort key: the PyTorch variables in contract order, then the others by name."""
    order = TORCH_VARIABLES
    return (order.index(name), "") if name in order else (len(order), name)


def torch_summary(result: SessionResult, port: int, problems: list[str]) -> str:
    """For a person: per container what the hook exported, its node rank and master, the
    worker ranks it ran; then the all-reduce and the verdict."""
    layout = result.layout
    lines = [f"== layout {layout.name}: BACKENDAI_CLUSTER_REPLICAS={layout.replicas} "
             f"BACKENDAI_CLUSTER_HOSTS={','.join(layout.hosts_order)}", ""]
    workers = worker_lines(result.main.stdout)
    for host in layout.hosts:
        record = result.containers[host]
        exports = record.exports
        ranks = sorted(int(w["rank"]) for w in workers
                       if w.get("hostname") == host and w.get("rank") is not None)
        lines.append(f"{host} (LOCAL_RANK={record.given['BACKENDAI_CLUSTER_LOCAL_RANK']}): "
                     f"node rank {exports.get('NODE_RANK', '?')}, master "
                     f"{exports.get('MASTER_ADDR', '?')}, worker ranks "
                     f"{','.join(map(str, ranks)) or '-'}")
        shown = {k: exports[k] for k in sorted(exports, key=_shown_first)
                 if k in ("MASTER_ADDR", "MASTER_PORT", "NODE_RANK") or k.startswith("PET_")}
        lines.append("    hook exported: " + (" ".join(f"{k}={v}" for k, v in shown.items())
                                              or "nothing (see its stderr below)"))
        if record.runner_env is None:
            lines.append("    container stopped by the hook:\n      "
                         + record.stderr.strip().replace("\n", "\n      "))
    world = len(layout.hosts) * NPROC_PER_NODE
    agree = sum(1 for w in workers if w.get("result") == world * (world + 1) / 2)
    lines += ["", f"master port {port}: the demo's label master-port, random per run (a "
              "session without the label gets 29500)",
              f"all-reduce of rank+1 over {world} ranks: {agree}/{world} got "
              f"{world * (world + 1) / 2:g}",
              "RESULT: OK" if not problems else "RESULT: FAILED"]
    lines += [f"  - {p}" for p in problems]
    return "\n".join(lines)
