"""Simulate a multi-container Backend.AI session on one Linux machine with network namespaces.

A "container" is a process in its own network namespace (plus its own UTS namespace, so it has
its own hostname). All host namespaces hang off one Linux bridge that lives in a namespace of
its own, so nothing is added to the machine's own (root) network namespace:

    <prefix>-br    : bridge "br0", one veth end "v<i>" per host attached to it
    <prefix>-<host>: "lo" up, "eth0" = 198.18.0.(10+i)/24, /etc/hosts from /etc/netns/<ns>/hosts

Options: ``interface="baimulti0"`` names the session interface as Backend.AI's overlay does
on Docker 28+; ``gwbridge=True`` adds a docker_gwbridge look-alike ``eth1`` (the same address
on every host, the default route); ``blackhole_dns=True`` points resolv.conf at a DNS server
that never answers; ``command(..., pid1=True)`` runs a command as PID 1 of a PID namespace.

Why namespaces instead of loopback: on a shared loopback every 127.x address reaches every
listener, so a wrong master address still "works" and an end-to-end test proves nothing. Here
a server listens only inside its own container and a wrong address fails as in production.

Needs root, iproute2 (``ip netns``) and util-linux (``unshare``). Standard library only, so it
can be used by pytest tests and by demo scripts alike::

    with SimulatedCluster(["main1", "sub1", "sub2"]) as cluster:
        results = cluster.run_all(
            {h: (["hostname"], backendai_env(["sub2", "main1", "sub1"], h)) for h in cluster.hosts},
            timeout=30,
        )

Every wait is bounded; every namespace and /etc/netns/<ns> folder made is removed on exit, also
when setup fails half way, on an exception, on KeyboardInterrupt, and on SIGTERM (turned into
KeyboardInterrupt while a cluster is active in the main thread).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # typing.Self is 3.11+; tests outside e2e/ import this on 3.10 too
    from typing import Self

__all__ = [
    "HostResult",
    "SimulatedCluster",
    "SimulationError",
    "backendai_env",
    "can_simulate",
    "canonical_order",
    "local_rank_of",
    "scrambled_order",
]

#: First three octets of every address handed out (198.18.0.0/15 is reserved for benchmarking
#: and testing, RFC 2544; we only use 198.18.0.0/24).
SUBNET_PREFIX = "198.18.0"
SUBNET_BITS = 24
#: Host i (0-based position in ``hosts``) gets 198.18.0.(FIRST_HOST_OCTET + i).
FIRST_HOST_OCTET = 10
MAX_HOSTS = 240  # keeps the last octet <= 249
#: The docker_gwbridge look-alike (``gwbridge=True``): the same address on every host, as
#: each agent's docker_gwbridge hands out its own 172.18.0.x.
GWBRIDGE_ADDRESS = "198.18.1.2"
GWBRIDGE_GATEWAY = "198.18.1.1"
#: ``blackhole_dns=True``: the resolver asks <net>.2, behind a dead-end interface in <net>.0/24.
BLACKHOLE_DNS_NET = "198.18.200"

#: Root of the per-namespace config files that ``ip netns exec`` bind-mounts over /etc.
NETNS_ETC = Path("/etc/netns")
#: Where ``ip netns add`` puts its namespace handles.
NETNS_RUN = Path("/run/netns")

#: Seconds allowed for one ``ip``/``unshare`` setup command.
CMD_TIMEOUT_S = 10.0
#: Seconds to wait for every eth0 to report carrier after setup.
LINK_UP_TIMEOUT_S = 10.0
#: Seconds between SIGTERM and SIGKILL when stopping processes.
KILL_GRACE_S = 2.0

_HOST_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
_PREFIX_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$")

#: Variables that a Backend.AI container would not inherit from the machine running the
#: tests, or that the shim derives; scrubbed from the inherited environment so the runner's own
#: environment cannot leak into (and silently fix or break) a simulated container.
_SCRUB_PREFIXES = ("BACKENDAI_", "PET_", "TORCHELASTIC_", "GLOO_", "NCCL_", "DERIVE_ENV")
_SCRUB_NAMES = frozenset(
    {
        "MASTER_ADDR",
        "MASTER_PORT",
        "NODE_RANK",
        "GROUP_RANK",
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "TF_CONFIG",
        "GPU_COUNT",
        "N_GPUS",
        "HOSTNAME",
        "CUDA_VISIBLE_DEVICES",
    }
)


class SimulationError(RuntimeError):
    """A namespace/link setup command failed or timed out; the message names the command."""


@dataclasses.dataclass
class HostResult:
    """Outcome of one process started by :meth:`SimulatedCluster.run_all`.

    ``returncode`` is the exit status (negative = killed by that signal, as in subprocess);
    ``stdout``/``stderr`` are decoded as UTF-8 (invalid bytes replaced); ``timed_out`` is True
    when the overall deadline passed before the process ended and it was killed;
    ``seconds`` is the wall time from start to exit (or to the kill).
    """

    host: str
    args: list[str]
    returncode: int
    stdout: str
    stderr: str
    timed_out: bool
    seconds: float

    @property
    def ok(self) -> bool:
        """True when the process exited 0 on its own."""
        return self.returncode == 0 and not self.timed_out

    def describe(self, tail: int = 2000) -> str:
        """Readable block for assertion messages: host, status, last ``tail`` chars of output."""
        status = "TIMED OUT" if self.timed_out else f"rc={self.returncode}"
        return (
            f"--- {self.host}: {status} after {self.seconds:.1f}s\n"
            f"args: {self.args}\n"
            f"stdout (tail):\n{self.stdout[-tail:]}\n"
            f"stderr (tail):\n{self.stderr[-tail:]}"
        )


def _run(argv: list[str], timeout: float = CMD_TIMEOUT_S) -> str:
    """Run a setup command; return its stdout.

    Raises SimulationError (naming the command and its stderr) on non-zero exit, on timeout, or
    when the program is missing.
    """
    try:
        proc = subprocess.run(
            argv,
            check=False,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as exc:
        raise SimulationError(f"timed out after {timeout}s: {' '.join(argv)}") from exc
    except OSError as exc:
        raise SimulationError(f"cannot run {' '.join(argv)}: {exc}") from exc
    if proc.returncode != 0:
        raise SimulationError(
            f"failed (rc={proc.returncode}): {' '.join(argv)}: {proc.stderr.strip()}"
        )
    return proc.stdout


def _ip(ns: str, *args: str) -> str:
    """Run ``ip -n <ns> args...`` (bounded); stdout, or SimulationError."""
    return _run(["ip", "-n", ns, *args])


def _netns_exists(name: str) -> bool:
    """True when a named network namespace handle exists (``ip netns list`` shows it)."""
    return (NETNS_RUN / name).exists()


def _netns_pids(name: str) -> list[int]:
    """PIDs of every process in the named network namespace; [] if it is gone or on error."""
    try:
        out = _run(["ip", "netns", "pids", name], timeout=CMD_TIMEOUT_S)
    except SimulationError:
        return []
    return [int(tok) for tok in out.split() if tok.isdigit()]


def _kill_netns_processes(name: str, timeout: float = 5.0) -> list[int]:
    """SIGKILL every process in namespace ``name``; wait up to ``timeout`` s for them to go.

    Returns the PIDs still present after the wait (normally []). Why: a process that put
    itself into a new session (torchrun workers can) escapes a process-group kill, but it cannot
    leave the network namespace, so this catches everything we started in there.
    """
    deadline = time.monotonic() + timeout
    own = os.getpid()
    pids = [p for p in _netns_pids(name) if p != own]
    while pids:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        if time.monotonic() >= deadline:
            break
        time.sleep(0.05)
        pids = [p for p in _netns_pids(name) if p != own]
    return pids


def _signal_group(proc: subprocess.Popen[Any], sig: int) -> None:
    """Send ``sig`` to the process group led by ``proc`` (started with a new session)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def can_simulate() -> tuple[bool, str]:
    """Check that this machine can run a :class:`SimulatedCluster`.

    Returns (True, "") when running as root and a throw-away namespace with a bridge and a veth
    pair can be made and removed, else (False, reason). Never raises; takes < 1 s normally.
    """
    if os.name != "posix" or not Path("/proc/self/ns/net").exists():
        return False, "not Linux (no /proc/self/ns/net)"
    if os.geteuid() != 0:
        return False, f"needs root (euid={os.geteuid()})"
    for tool in ("ip", "unshare", "sh", "hostname"):
        if shutil.which(tool) is None:
            return False, f"`{tool}` not found on PATH"
    probe = f"de{os.getpid() % 100000}-probe{threading.get_ident() % 1000}"
    made = False
    try:
        _run(["ip", "netns", "add", probe])
        made = True
        _run(["ip", "-n", probe, "link", "add", "br0", "type", "bridge"])
        _run(["ip", "-n", probe, "link", "add", "v0", "type", "veth", "peer", "name", "v1"])
        _run(["ip", "netns", "exec", probe, "unshare", "-u", "hostname", "probe"])
    except SimulationError as exc:
        return False, f"`ip netns` does not work here: {exc}"
    finally:
        if made:
            with contextlib.suppress(SimulationError):
                _run(["ip", "netns", "del", probe])
    return True, ""


def canonical_order(hosts: list[str], replicas: str | None = None) -> list[str]:
    """Hosts in contract order: role ``main`` first, then other roles in REPLICAS order, each
    by NUMERIC index (sub2 before sub10). Roles missing from ``replicas`` go last, by name.

    ``hosts`` are names ``{role}{idx}``; ``replicas`` like ``"main:1,sub:2"`` (None = roles
    sorted by name). With ``replicas``, a host's role and index are the ones whose
    ``f"{role}{idx}"`` it is (a role may end in digits: ``a100:2`` gives ``a1001``, ``a1002``).
    Raises ValueError on a host without a trailing index (or not from ``replicas``).
    """
    role_pos: dict[str, int] = {"main": -1}
    pairs = _replica_pairs(replicas) if replicas else []
    for i, (role, _) in enumerate(pairs):
        role_pos.setdefault(role, i)

    def key(host: str) -> tuple[int, str, int]:
        role, idx = _role_index(host, pairs)
        return (role_pos.get(role, 1 << 20), role, idx)

    return sorted(hosts, key=key)


def _replica_pairs(replicas: str) -> list[tuple[str, int]]:
    """``"main:1,a100:2"`` -> [("main", 1), ("a100", 2)] (split as Backend.AI does, rsplit)."""
    pairs = []
    for pair in replicas.split(","):
        role, _, count = pair.strip().rpartition(":")
        pairs.append((role, int(count)))
    return pairs


def _role_index(host: str, pairs: list[tuple[str, int]]) -> tuple[str, int]:
    """(role, idx) of ``host``: from REPLICAS ``pairs`` when given, else split off the name."""
    for role, count in pairs:
        rest = host[len(role):]
        if host.lower().startswith(role.lower()) and rest.isdigit() and 1 <= int(rest) <= count \
                and str(int(rest)) == rest:
            return role, int(rest)
    return _split_host(host)


def local_rank_of(host: str, replicas: str, group_order: list[str]) -> int:
    """BACKENDAI_CLUSTER_LOCAL_RANK as Backend.AI computes it: the position over the role groups
    in the order the session's request listed them (``group_order``), then by index
    (expand_kernel_groups_rule.py). Inputs: a host, REPLICAS, the roles in request order."""
    pairs = _replica_pairs(replicas)
    counts = dict(pairs)
    role, idx = _role_index(host, pairs)
    return sum(counts[r] for r in group_order[:group_order.index(role)]) + idx - 1


def scrambled_order(hosts: list[str]) -> list[str]:
    """A deterministic order of ``hosts`` that does NOT start with the canonical first host
    (for BACKENDAI_CLUSTER_HOSTS, whose order is not guaranteed): the canonical order reversed.
    With one host, that host. Input/output: lists of host names.
    """
    return list(reversed(canonical_order(hosts)))


def _split_host(host: str) -> tuple[str, int]:
    """Split ``sub12`` into ("sub", 12); ValueError if there is no trailing number."""
    m = re.fullmatch(r"([A-Za-z][A-Za-z0-9-]*?)(\d+)", host)
    if not m:
        raise ValueError(f"host {host!r} is not of the form {{role}}{{idx}}")
    return m.group(1), int(m.group(2))


def backendai_env(
    hosts_order: list[str],
    host: str,
    replicas: str | None = None,
    session_id: str = "e2e-simulated-session",
    gpu_count: int | None = None,
    group_order: list[str] | None = None,
) -> dict[str, str]:
    """The cluster variables Backend.AI would give container ``host`` of a session.

    Inputs: ``hosts_order`` = all hosts in the order BACKENDAI_CLUSTER_HOSTS lists them (the
    caller should make it NOT start with main1, since the real order is not guaranteed);
    ``host`` = this container; ``replicas`` = ``role:count`` pairs (default: counted from the
    hosts, sorted by role name, e.g. ``main:1,sub:2``); ``session_id``; ``gpu_count`` = adds
    GPU_COUNT and N_GPUS when given; ``group_order`` = the roles in the order the session's
    request listed the groups (LOCAL_RANK follows it; default: canonical, main first).

    Output: BACKENDAI_CLUSTER_SIZE, _HOSTS, _HOST, _ROLE, _IDX (1-based within the role),
    _LOCAL_RANK (0-based, by default the canonical index: main1=0, sub1=1, ...), _REPLICAS, and
    BACKENDAI_SESSION_ID, all strings. Raises ValueError if ``host`` is not in ``hosts_order``
    or a name is not ``{role}{idx}``.
    """
    if host not in hosts_order:
        raise ValueError(f"host {host!r} not in {hosts_order!r}")
    if replicas is None:
        counts: dict[str, int] = {}
        for h in hosts_order:
            role_of_h = _split_host(h)[0]
            counts[role_of_h] = counts.get(role_of_h, 0) + 1
        replicas = ",".join(f"{r}:{n}" for r, n in sorted(counts.items()))
    role, idx = _role_index(host, _replica_pairs(replicas))
    if group_order is None:  # Backend.AI's default session lists main first
        group_order = sorted((r for r, _ in _replica_pairs(replicas)), key=lambda r: r != "main")
    env = {
        "BACKENDAI_CLUSTER_SIZE": str(len(hosts_order)),
        "BACKENDAI_CLUSTER_HOSTS": ",".join(hosts_order),
        "BACKENDAI_CLUSTER_HOST": host,
        "BACKENDAI_CLUSTER_ROLE": role,
        "BACKENDAI_CLUSTER_IDX": str(idx),
        "BACKENDAI_CLUSTER_LOCAL_RANK": str(local_rank_of(host, replicas, group_order)),
        "BACKENDAI_CLUSTER_REPLICAS": replicas,
        "BACKENDAI_SESSION_ID": session_id,
    }
    if gpu_count is not None:
        env["GPU_COUNT"] = env["N_GPUS"] = str(gpu_count)
    return env


class SimulatedCluster:
    """Context manager: one network namespace per host plus a bridge namespace (module doc).

    ``hosts``: container host names, e.g. ["main1", "sub1", "sub2"] (lowercase DNS labels,
    unique, at most 240). Host i gets address 198.18.0.(10+i). ``prefix``: namespace name
    prefix, default ``de<pid % 100000>`` so parallel runs do not collide.

    Raises ValueError on bad names, SimulationError when setup fails (after undoing it) or when
    a namespace of that name already exists (never touches a namespace it did not make).
    """

    def __init__(
        self,
        hosts: list[str],
        *,
        prefix: str | None = None,
        interface: str = "eth0",
        gwbridge: bool = False,
        blackhole_dns: bool = False,
    ) -> None:
        if not hosts:
            raise ValueError("need at least one host")
        if len(hosts) > MAX_HOSTS:
            raise ValueError(f"at most {MAX_HOSTS} hosts, got {len(hosts)}")
        if len(set(hosts)) != len(hosts):
            raise ValueError(f"duplicate host names in {hosts!r}")
        for h in hosts:
            if not _HOST_RE.match(h):
                raise ValueError(f"host name {h!r} is not a lowercase DNS label")
        self.prefix = prefix if prefix is not None else f"de{os.getpid() % 100000}"
        #: the container's interface on the session network (``baimulti0``: Docker 28+ overlay).
        self.interface = interface
        #: add ``eth1``, a docker_gwbridge look-alike: GWBRIDGE_ADDRESS on every host (it
        #: reaches only the local host) and the default route through it.
        self.gwbridge = gwbridge
        #: a DNS server that never answers (behind a dead-end interface), so a name
        #: outside /etc/hosts waits for the resolver's timeout instead of failing at once.
        self.blackhole_dns = blackhole_dns
        if not _PREFIX_RE.match(self.prefix):
            raise ValueError(f"prefix {self.prefix!r} must match {_PREFIX_RE.pattern}")
        self.hosts: list[str] = list(hosts)
        self.bridge_namespace = f"{self.prefix}-br"
        self.addresses: dict[str, str] = {
            h: f"{SUBNET_PREFIX}.{FIRST_HOST_OCTET + i}" for i, h in enumerate(hosts)
        }
        self._made_netns: list[str] = []  # namespaces this object created, in order
        self._made_etc: list[Path] = []  # /etc/netns/<ns> folders this object created
        self._made_etc_root = False
        self._procs: list[subprocess.Popen[Any]] = []
        self._old_sigterm: Any = None

    # -- names ---------------------------------------------------------------------------

    def namespace(self, host: str) -> str:
        """Network namespace name of ``host`` (``<prefix>-<host>``); KeyError if unknown."""
        if host not in self.addresses:
            raise KeyError(f"unknown host {host!r}; hosts are {self.hosts}")
        return f"{self.prefix}-{host}"

    def namespaces(self) -> list[str]:
        """All namespace names this cluster uses: the bridge namespace first, then the hosts."""
        return [self.bridge_namespace] + [self.namespace(h) for h in self.hosts]

    def hosts_file(self) -> str:
        """Content of every host's /etc/hosts: localhost lines, then ``<ip> <host>`` each."""
        lines = ["127.0.0.1 localhost", "::1 localhost"]
        lines += [f"{ip} {h}" for h, ip in self.addresses.items()]
        return "\n".join(lines) + "\n"

    # -- setup / teardown ----------------------------------------------------------------

    def __enter__(self) -> Self:
        self._install_sigterm()
        try:
            self._setup()
        except BaseException:
            # Half-made setup (including Ctrl-C during it) is undone before re-raising.
            self.close()
            raise
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        problems = self.close()
        if problems:
            msg = "simulated cluster not fully removed: " + "; ".join(problems)
            if exc_type is None:
                raise SimulationError(msg)
            # Do not mask the exception already on its way out; still say what is left.
            warnings.warn(msg, RuntimeWarning, stacklevel=2)

    def _install_sigterm(self) -> None:
        """Turn SIGTERM into KeyboardInterrupt so `with` blocks unwind and clean up.

        Only in the main thread and only if nobody else handles SIGTERM (we do not override a
        handler installed by the test runner). Restored by close().
        """
        if threading.current_thread() is not threading.main_thread():
            return
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            return

        def _raise(signum: int, frame: object) -> None:
            raise KeyboardInterrupt(f"signal {signum}")

        self._old_sigterm = signal.signal(signal.SIGTERM, _raise)

    def _add_netns(self, name: str) -> None:
        """Create namespace ``name``; refuses (SimulationError) if it already exists."""
        if _netns_exists(name):
            raise SimulationError(
                f"network namespace {name!r} already exists (stale run? remove it with "
                f"`ip netns del {name}`); pick another prefix"
            )
        _run(["ip", "netns", "add", name])
        self._made_netns.append(name)

    def _setup(self) -> None:
        """Create bridge namespace, host namespaces, links, addresses and hosts files."""
        br = self.bridge_namespace
        self._add_netns(br)
        _ip(br, "link", "set", "lo", "up")
        _ip(br, "link", "add", "br0", "type", "bridge")
        _ip(br, "link", "set", "br0", "up")
        hosts_text = self.hosts_file()
        for i, host in enumerate(self.hosts):
            ns = self.namespace(host)
            self._add_netns(ns)
            peer = f"v{i}"  # bridge-side name; interface names must be <= 15 chars
            # Create the pair in the bridge namespace with the container end born directly in the
            # host namespace as "eth0" (no name clash: each end lives in its own namespace).
            link = self.interface
            _ip(br, "link", "add", peer, "type", "veth", "peer", "name", link, "netns", ns)
            _ip(br, "link", "set", peer, "master", "br0", "up")
            _ip(ns, "link", "set", "lo", "up")
            _ip(ns, "addr", "add", f"{self.addresses[host]}/{SUBNET_BITS}", "dev", link)
            _ip(ns, "link", "set", link, "up")
            if self.gwbridge:
                self._add_dead_end(ns, "eth1", f"{GWBRIDGE_ADDRESS}/24")
                _ip(ns, "route", "add", "default", "via", GWBRIDGE_GATEWAY, "dev", "eth1")
            if self.blackhole_dns:
                self._add_dead_end(ns, "dns0", f"{BLACKHOLE_DNS_NET}.1/24")
            self._write_etc(ns, hosts_text)
        self._wait_links_up()

    @staticmethod
    def _add_dead_end(ns: str, name: str, address: str) -> None:
        """Interface ``name`` with ``address`` in namespace ``ns`` that nothing answers on.

        A veth pair whose other end (``<name>p``, no address) stays in the same namespace:
        packets to a neighbour go unanswered (no ARP reply) instead of failing at once, as
        they would with an unreachable route. Kernels without the dummy driver have veth.
        """
        peer = f"{name}p"
        _ip(ns, "link", "add", name, "type", "veth", "peer", "name", peer)
        _ip(ns, "addr", "add", address, "dev", name)
        _ip(ns, "link", "set", peer, "up")
        _ip(ns, "link", "set", name, "up")

    def _write_etc(self, ns: str, hosts_text: str) -> None:
        """Write /etc/netns/<ns>/hosts (and an empty-ish resolv.conf) for ``ip netns exec``."""
        if not NETNS_ETC.exists():
            with contextlib.suppress(FileExistsError):
                NETNS_ETC.mkdir(mode=0o755)
                self._made_etc_root = True
        d = NETNS_ETC / ns
        if d.exists():
            raise SimulationError(f"{d} already exists (stale run?); remove it or change prefix")
        d.mkdir(mode=0o755)
        self._made_etc.append(d)
        (d / "hosts").write_text(hosts_text)
        # Why: lookups of names not in the hosts file (and reverse lookups, which torch's c10d
        # does for peers) must fail at once and the same way on every machine, whatever DNS
        # server the machine's resolv.conf names. With no "nameserver" line glibc asks
        # 127.0.0.1:53, which refuses at once inside the namespace.
        if self.blackhole_dns:
            (d / "resolv.conf").write_text(
                f"nameserver {BLACKHOLE_DNS_NET}.2\noptions timeout:5 attempts:2\n")
        elif Path("/etc/resolv.conf").exists():
            (d / "resolv.conf").write_text("options timeout:1 attempts:1\n")

    def _wait_links_up(self) -> None:
        """Wait (bounded by LINK_UP_TIMEOUT_S) until every eth0 has carrier (LOWER_UP)."""
        deadline = time.monotonic() + LINK_UP_TIMEOUT_S
        pending = {h: self.namespace(h) for h in self.hosts}
        while pending:
            for host, ns in list(pending.items()):
                info = json.loads(_ip(ns, "-j", "link", "show", self.interface) or "[]")
                if info and "LOWER_UP" in info[0].get("flags", []):
                    del pending[host]
            if not pending:
                return
            if time.monotonic() >= deadline:
                raise SimulationError(
                    f"eth0 not up after {LINK_UP_TIMEOUT_S}s in {sorted(pending)}"
                )
            time.sleep(0.05)

    def close(self) -> list[str]:
        """Kill every process started here or living in our namespaces, delete our namespaces
        and /etc/netns/<ns> folders. Idempotent; cleanup failures do not raise here.

        Returns a list of problems (empty when everything was removed). SIGINT/SIGTERM arriving
        meanwhile are held back until cleanup is done, then raised as KeyboardInterrupt.
        """
        problems: list[str] = []
        deferred: list[int] = []
        saved: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                old = signal.getsignal(sig)
                if old is not None and old is not signal.SIG_IGN:  # None: set outside Python
                    saved[sig] = signal.signal(sig, lambda signum, _f: deferred.append(signum))
        try:
            for proc in self._procs:
                if proc.poll() is None:
                    _signal_group(proc, signal.SIGKILL)
            for ns in reversed(self._made_netns):
                left = _kill_netns_processes(ns)
                if left:
                    problems.append(f"processes {left} still in {ns}")
            for proc in self._procs:
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    problems.append(f"pid {proc.pid} did not exit")
            self._procs.clear()
            for ns in reversed(self._made_netns):
                try:
                    _run(["ip", "netns", "del", ns])
                except SimulationError as exc:
                    if _netns_exists(ns):
                        problems.append(str(exc))
            self._made_netns.clear()
            for d in reversed(self._made_etc):
                shutil.rmtree(d, ignore_errors=True)
                if d.exists():
                    problems.append(f"could not remove {d}")
            self._made_etc.clear()
            if self._made_etc_root:
                # Only if we made it and it is empty (another run may be using it).
                with contextlib.suppress(OSError):
                    NETNS_ETC.rmdir()
                self._made_etc_root = False
        finally:
            for sig, old in saved.items():
                signal.signal(sig, old)
            if self._old_sigterm is not None:
                signal.signal(signal.SIGTERM, self._old_sigterm)
                self._old_sigterm = None
        if deferred:
            raise KeyboardInterrupt(f"signal {deferred[0]} during cleanup")
        return problems

    # -- running things ------------------------------------------------------------------

    def command(self, host: str, argv: list[str], *, pid1: bool = False) -> list[str]:
        """argv that runs ``argv`` in ``host``'s network namespace, in a new UTS namespace whose
        hostname is ``host``. ``ip netns exec`` also bind-mounts /etc/netns/<ns>/hosts over
        /etc/hosts. ``pid1``: also in a new PID namespace (with its own /proc), where ``argv``
        is PID 1 as a container's ENTRYPOINT without an init is (no signal has a default
        action there). Raises ValueError on an empty argv, KeyError on an unknown host.
        """
        if not argv:
            raise ValueError("empty argv")
        ns = self.namespace(host)
        # "$0" is the hostname, "$@" the command: no shell quoting of user arguments needed.
        enter = ["ip", "netns", "exec", ns, "unshare", "-u"]
        if pid1:
            enter += ["--pid", "--fork", "--mount-proc"]
        return [*enter, "sh", "-c", 'hostname "$0" && exec "$@"', host, *argv]

    def container_env(
        self, host: str, env: Mapping[str, str], *, inherit: bool = True
    ) -> dict[str, str]:
        """Environment for a process of ``host``: if ``inherit``, this process's environment
        minus cluster/launcher variables (BACKENDAI_*, MASTER_*, RANK, PET_*, GLOO_*, ...), with
        HOSTNAME=host as Docker sets it; then ``env`` on top. Output: a new dict.
        """
        base: dict[str, str] = {}
        if inherit:
            base = {
                k: v
                for k, v in os.environ.items()
                if k not in _SCRUB_NAMES and not k.startswith(_SCRUB_PREFIXES)
            }
            base["HOSTNAME"] = host
        base.update(env)
        return base

    def popen(
        self,
        host: str,
        argv: list[str],
        env: Mapping[str, str],
        *,
        inherit: bool = True,
        **kw: Any,
    ) -> subprocess.Popen[Any]:
        """Start ``argv`` in ``host``'s container; returns the Popen.

        ``env``: variables on top of the scrubbed inherited environment (see container_env;
        ``inherit=False`` makes ``env`` the whole environment). Extra keyword arguments go to
        subprocess.Popen; defaults: stdin=DEVNULL, start_new_session=True (so the whole tree
        can be killed as a process group). The process is killed by close() if still running.
        """
        kw.setdefault("stdin", subprocess.DEVNULL)
        kw.setdefault("start_new_session", True)
        proc = subprocess.Popen(
            self.command(host, argv), env=self.container_env(host, env, inherit=inherit), **kw
        )
        self._procs.append(proc)
        return proc

    def run(
        self,
        host: str,
        argv: list[str],
        env: Mapping[str, str] | None = None,
        timeout: float = 30.0,
    ) -> HostResult:
        """Run one command in ``host``'s container and wait at most ``timeout`` seconds."""
        return self.run_all({host: (argv, dict(env or {}))}, timeout=timeout)[host]

    def run_all(
        self,
        per_host: Mapping[str, tuple[list[str], Mapping[str, str]]],
        timeout: float,
    ) -> dict[str, HostResult]:
        """Start one process per host concurrently and wait for all, ``timeout`` s overall.

        ``per_host``: host -> (argv, env) as for popen. On the deadline every process still
        running gets SIGTERM to its group, then after KILL_GRACE_S SIGKILL to its group and to
        every process in its namespace; those results have timed_out=True. Output goes to
        temporary files (not pipes), so a stray child holding a pipe cannot block the wait.
        Returns host -> HostResult, in the order of ``per_host``.
        """
        started: dict[str, tuple[subprocess.Popen[Any], Any, Any, float]] = {}
        ended: dict[str, float] = {}
        timed_out: set[str] = set()
        with contextlib.ExitStack() as stack:
            # On an exception/KeyboardInterrupt below, kill whatever is still running (the
            # children hold their own copies of the output descriptors, so order is irrelevant).
            stack.callback(self._kill_started, started)
            for host, (argv, env) in per_host.items():
                out = stack.enter_context(tempfile.TemporaryFile())
                err = stack.enter_context(tempfile.TemporaryFile())
                proc = self.popen(host, argv, env, stdout=out, stderr=err)
                started[host] = (proc, out, err, time.monotonic())
            deadline = time.monotonic() + timeout
            while len(ended) < len(started) and time.monotonic() < deadline:
                for host, (proc, *_rest) in started.items():
                    if host not in ended and proc.poll() is not None:
                        ended[host] = time.monotonic()
                time.sleep(0.05)
            running = [h for h in started if h not in ended and started[h][0].poll() is None]
            for host in started:
                if host not in ended and host not in running:
                    ended[host] = time.monotonic()
            if running:
                timed_out.update(running)
                for host in running:
                    _signal_group(started[host][0], signal.SIGTERM)
                grace_end = time.monotonic() + KILL_GRACE_S
                while time.monotonic() < grace_end and any(
                    started[h][0].poll() is None for h in running
                ):
                    time.sleep(0.05)
                for host in running:
                    _signal_group(started[host][0], signal.SIGKILL)
                    _kill_netns_processes(self.namespace(host))
                    ended[host] = time.monotonic()
            results: dict[str, HostResult] = {}
            for host, (proc, out, err, t0) in started.items():
                try:
                    rc = proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    rc = -signal.SIGKILL  # unkillable (D state); report as killed
                results[host] = HostResult(
                    host=host,
                    args=list(proc.args),  # type: ignore[arg-type]
                    returncode=rc,
                    stdout=_read_all(out),
                    stderr=_read_all(err),
                    timed_out=host in timed_out,
                    seconds=ended.get(host, time.monotonic()) - t0,
                )
            return results

    @staticmethod
    def _kill_started(started: Mapping[str, tuple[subprocess.Popen[Any], Any, Any, float]]) -> None:
        """SIGKILL the process group of every still-running process in ``started``."""
        for proc, *_rest in started.values():
            if proc.poll() is None:
                _signal_group(proc, signal.SIGKILL)


def _read_all(f: Any) -> str:
    """Whole content of a binary temporary file, decoded as UTF-8 with replacement."""
    f.seek(0)
    return f.read().decode("utf-8", errors="replace")
