"""Run a real Slurm cluster (Slurm 22.05 from Debian's ``slurm-wlm``) on one Linux machine.

Built on :class:`simcluster.SimulatedCluster` (one network namespace per node, module doc
there). On top of it:

- a login node (namespace ``login``, not a Slurm node) where the daemons below and every
  client run;
- one ``munged`` (foreground, on the login node) whose socket and key live in a
  temporary folder; every Slurm daemon and client finds it through ``AuthInfo=socket=`` in
  slurm.conf (the socket is a file, so every namespace reaches it over the shared
  filesystem);
- one ``slurmctld -D`` on the login node;
- one ``slurmd -D -N <name>`` per node namespace, ``NodeAddr`` = that namespace's address;
- slurm.conf with node names that need the full hostlist grammar (zero padding and dashes,
  ``gpu-a100-[09-11]``), ``ProctrackType=proctrack/linuxproc``, ``TaskPlugin=task/none``, a
  cgroup.conf that constrains nothing, ``SelectType=select/cons_tres`` with ``CPUs=4`` per
  node (so 2+ tasks fit per node on a 2-core machine; ``SlurmdParameters=config_overrides``
  makes slurmd accept more CPUs than the machine has), every state/spool/log path in the
  temporary folder, ``SlurmUser=root``, random ``SlurmctldPort``/``SlurmdPort``.

Every wait is bounded (nodes idle within ``ready_timeout`` s). On exit, also on an exception,
Ctrl-C or SIGTERM, every daemon and step is killed (SimulatedCluster kills every process in
its namespaces), the namespaces and /etc/netns folders are removed, and so is the temporary
folder. Standard library only::

    with SlurmCluster() as slurm:
        res = slurm.run(["srun", "-N3", "--ntasks-per-node=2", "hostname"], timeout=30)

Run ``python slurmcluster.py --hold [PREFIX]`` to start a cluster, print ``READY <prefix> <tmpdir>``
and wait for Ctrl-C (used by the cleanup test; handy to try commands by hand with
``ip netns exec <prefix>-login env SLURM_CONF=<tmpdir>/slurm.conf srun ...``).
"""

from __future__ import annotations

import os
import random
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # typing.Self is 3.11+; tests/properties/test_recorded_envs.py: 3.10
    from typing import Self


from simcluster import NETNS_ETC, NETNS_RUN, HostResult, SimulatedCluster, can_simulate

__all__ = [
    "DAEMONS",
    "LOGIN",
    "NODELIST",
    "NODES",
    "SlurmCluster",
    "SlurmError",
    "can_run_slurm",
    "find_program",
    "leftovers",
]

#: The simulated nodes, in Slurm's (sorted) order; hostlist form in NODELIST.
NODES = ["gpu-a100-09", "gpu-a100-10", "gpu-a100-11"]
#: The login node: a namespace that is NOT a Slurm node; munged, slurmctld and every client
#: run there (as on a real cluster: salloc's shell and its mpirun run outside the allocation).
LOGIN = "login"
#: What SLURM_JOB_NODELIST says for a job on all of NODES (zero padding kept, dashes in names).
NODELIST = "gpu-a100-[09-11]"
#: Programs a cluster needs (daemons and clients).
DAEMONS = ("munged", "slurmctld", "slurmd", "srun", "sbatch", "salloc", "sinfo", "scontrol")
#: Seconds allowed for munged's socket, slurmctld's answer and every node to be idle.
READY_TIMEOUT_S = 30.0
#: CPUs per node as slurm.conf declares them (more than this machine has: overcommitted).
CPUS_PER_NODE = 4


class SlurmError(RuntimeError):
    """A daemon did not start or become ready in time; the message says which, with its log."""


def can_run_slurm() -> tuple[bool, str]:
    """(True, "") when this machine can run a :class:`SlurmCluster`, else (False, reason):
    namespaces must work (simcluster.can_simulate) and every program in DAEMONS be on PATH
    (or in /usr/sbin). Never raises."""
    ok, why = can_simulate()
    if not ok:
        return ok, why
    for prog in DAEMONS:
        if find_program(prog) is None:
            return False, f"`{prog}` not found (install slurm-wlm and munge: `make venv`)"
    return True, ""


def find_program(prog: str) -> str | None:
    """Full path of ``prog`` on PATH or in /usr/sbin (daemons live there), else None."""
    return shutil.which(prog) or shutil.which(prog, path="/usr/sbin:/sbin")


def leftovers(prefix: str, tmp: Path) -> list[str]:
    """Everything of a cluster still present (empty after a clean exit): its namespaces
    (``<prefix>-*``), /etc/netns folders, its temporary folder ``tmp``, and processes whose
    command line names that folder (the daemons and the steps)."""
    found = [str(p) for p in NETNS_RUN.glob(f"{prefix}-*")]
    found += [str(p) for p in NETNS_ETC.glob(f"{prefix}-*")]
    if tmp.exists():
        found.append(str(tmp))
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(tmp) in text:
            found.append(f"pid {cmdline.parent.name}: {text[:120]}")
    return found


def _free_port_pair() -> tuple[int, int]:
    """Two distinct random TCP ports in 20000-29999 that nothing on this machine's own
    namespace listens on. (Inside our fresh namespaces every port is free; the check keeps
    the numbers clear of the host's listeners, so logs are never ambiguous.)"""
    ports: list[int] = []
    while len(ports) < 2:
        port = random.randint(20000, 29999)
        if port in ports:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        ports.append(port)
    return ports[0], ports[1]


class SlurmCluster:
    """Context manager: a real Slurm cluster in network namespaces (module doc).

    ``nodes``: node names (default NODES; lowercase DNS labels); ``prefix``: namespace prefix
    (default ``ds<pid % 100000>``); ``ready_timeout``: seconds for the daemons to be ready.
    After ``__enter__``: ``tmp`` (the temporary folder), ``conf`` (slurm.conf path),
    ``sim`` (the SimulatedCluster: the nodes, then LOGIN), ``login`` (LOGIN, where clients
    run). Node i has address 198.18.0.(10+i), the login node the next one. ``ssh=True``
    also starts one sshd per node on SSH_PORT (root, key only) and sets ``ssh_wrapper``.
    ``resv_ports`` (e.g. ``"12000-12999"``): the ports Slurm may reserve for a step
    (``MpiParams=ports=``, for ``srun --resv-ports``); none by default.

    Raises SlurmError (with the daemon's log tail) when a daemon fails or is not ready in
    time, SimulationError when namespaces cannot be made; in both cases after cleaning up.
    """

    def __init__(
        self,
        nodes: list[str] | None = None,
        prefix: str | None = None,
        ready_timeout: float = READY_TIMEOUT_S,
        ssh: bool = False,
        resv_ports: str | None = None,
    ) -> None:
        self.nodes = list(nodes or NODES)
        self.prefix = prefix if prefix is not None else f"ds{os.getpid() % 100000}"
        self.ready_timeout = ready_timeout
        self.ssh = ssh
        self.resv_ports = resv_ports
        if LOGIN in self.nodes:
            raise ValueError(f"{LOGIN!r} is the login node's name; not usable as a node")
        self.login = LOGIN
        self.sim = SimulatedCluster([*self.nodes, LOGIN], prefix=self.prefix)
        self.tmp = Path()
        self.conf = Path()
        self.ctld_port, self.slurmd_port = _free_port_pair()
        self._entered = False
        self._daemons: list[subprocess.Popen[bytes]] = []
        self.ssh_wrapper: Path | None = None  # set when ssh=True, after __enter__

    # -- setup / teardown ----------------------------------------------------------------

    def __enter__(self) -> Self:
        self.sim.__enter__()
        self._entered = True
        try:
            self.tmp = Path(tempfile.mkdtemp(prefix=f"{self.prefix}-slurm-"))
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self.close(exc_type)

    def close(self, exc_type: object = None) -> None:
        """Kill every daemon and step (by namespace), remove namespaces and the temporary
        folder. Idempotent. Raises SimulationError (via SimulatedCluster) only when something
        could not be removed and no exception is already on its way out."""
        if not self._entered:
            return
        self._entered = False
        try:
            self.sim.__exit__(exc_type, None, None)
        finally:
            if self.tmp != Path() and self.tmp.exists():
                shutil.rmtree(self.tmp, ignore_errors=True)

    def _start(self) -> None:
        """munged, then slurmctld, then every slurmd; each waited for (bounded)."""
        for d in ("state", "spool", "log", "run", "shared", "nodetmp"):
            (self.tmp / d).mkdir(mode=0o755)
        # munged refuses a group/world-writable path to its socket and key.
        os.chmod(self.tmp, 0o755)
        key = self.tmp / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        self.munge_socket = self.tmp / "run" / "munge.socket"
        self._daemon(
            "munged",
            [
                find_program("munged") or "munged", "-F", "--force",
                f"--socket={self.munge_socket}", f"--key-file={key}",
                f"--pid-file={self.tmp / 'run' / 'munged.pid'}",
                f"--log-file={self.tmp / 'log' / 'munged.log'}",
                f"--seed-file={self.tmp / 'state' / 'munged.seed'}",
            ],
            self.login,
        )
        self._wait("munged socket", lambda: self.munge_socket.exists(), "munged.log")
        self.conf = self.tmp / "slurm.conf"
        self.conf.write_text(self.slurm_conf())
        (self.tmp / "cgroup.conf").write_text(CGROUP_CONF)
        self._daemon(
            "slurmctld",
            [find_program("slurmctld") or "slurmctld", "-D", "-i", "-f", str(self.conf)],
            self.login,
        )
        self._wait("slurmctld", self._ctld_answers, "slurmctld.log")
        for node in self.nodes:
            # Each node's TmpFS is its own (as on separate machines): slurmd runs in a mount
            # namespace where tmp/nodetmp.<node> is mounted over tmp/nodetmp. Why: Slurm's
            # PMIx plugin makes <TmpFS>/spmix_appdir_<uid>_<job>.<step> on every node and
            # fails with EEXIST when the nodes share one folder.
            private = self.tmp / f"nodetmp.{node}"
            private.mkdir(mode=0o755)
            self._daemon(
                f"slurmd {node}",
                [
                    "unshare", "-m", "--propagation", "private", "sh", "-c",
                    'mount --bind "$1" "$2" && shift 2 && exec "$@"', "sh",
                    str(private), str(self.tmp / "nodetmp"),
                    find_program("slurmd") or "slurmd", "-D", "-N", node, "-f", str(self.conf),
                ],
                node,
            )
        self._wait("every node idle", self._all_idle, "slurmctld.log")
        if self.ssh:
            self._start_sshd()

    def _start_sshd(self) -> None:
        """One ``sshd -D`` per node on SSH_PORT (Backend.AI's port), root by key only, every
        key and file in tmp/ssh; ``ssh_wrapper`` runs ssh with our client config (for
        ``mpirun --mca plm_rsh_agent`` and ``mpiexec -launcher-exec``). Waits (bounded)
        until ``ssh <node> true`` works from the login node for every node."""
        d = self.tmp / "ssh"
        d.mkdir(mode=0o700)
        keygen = find_program("ssh-keygen") or "ssh-keygen"
        for key in ("host_ed25519", "id_ed25519"):
            subprocess.run([keygen, "-q", "-t", "ed25519", "-N", "", "-f", str(d / key)],
                           check=True, timeout=30, capture_output=True)
        (d / "authorized_keys").write_text((d / "id_ed25519.pub").read_text())
        # sshd refuses to start without its privilege separation folder (Debian's tmpfiles
        # create it at boot; a container may not have it). Empty, root-owned: left in place.
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        for node in self.nodes:
            cfg = d / f"sshd_config.{node}"
            cfg.write_text(SSHD_CONFIG.format(
                port=SSH_PORT, addr=self.sim.addresses[node], dir=d, node=node))
            sshd = find_program("sshd") or "sshd"
            self._daemon(f"sshd {node}", [sshd, "-D", "-e", "-f", str(cfg)], node)
        (d / "ssh_config").write_text(SSH_CONFIG.format(port=SSH_PORT, dir=d))
        self.ssh_wrapper = d / "ssh"
        config = shlex.quote(str(d / "ssh_config"))
        self.ssh_wrapper.write_text(f'#!/bin/sh\nexec ssh -F {config} "$@"\n')
        self.ssh_wrapper.chmod(0o755)
        self._wait("sshd on every node", self._all_ssh, f"sshd.{self.nodes[0]}.out")

    def _all_ssh(self) -> bool:
        assert self.ssh_wrapper is not None
        return all(
            self.run([str(self.ssh_wrapper), n, "true"], timeout=10).ok for n in self.nodes
        )

    def _daemon(self, name: str, argv: list[str], node: str) -> None:
        """Start a foreground daemon in ``node``'s namespace; output to log/<name>.out."""
        out = open(self.tmp / "log" / f"{name.replace(' ', '.')}.out", "wb")  # noqa: SIM115
        with out:
            self._daemons.append(self.sim.popen(
                node, argv, self.client_env(), inherit=False, stdout=out,
                stderr=subprocess.STDOUT))

    def _wait(self, what: str, ready: Callable[[], bool], log: str) -> None:
        """Poll ``ready()`` until true; SlurmError with the tail of ``log`` after the timeout
        or when a daemon we started has exited."""
        deadline = time.monotonic() + self.ready_timeout
        while True:
            if ready():
                return
            dead = [p for p in self._daemons if p.poll() is not None]
            if dead or time.monotonic() >= deadline:
                why = f"exited (rc={dead[0].returncode}): {dead[0].args}" if dead else (
                    f"not ready after {self.ready_timeout:.0f}s")
                raise SlurmError(f"{what}: {why}\n{self.log_tail(log)}")
            time.sleep(0.2)

    def log_tail(self, name: str, chars: int = 3000) -> str:
        """Last ``chars`` characters of log/<name> and of every daemon's stdout (for errors)."""
        parts = []
        for f in sorted((self.tmp / "log").glob("*")):
            if f.name == name or f.suffix == ".out":
                text = f.read_text(errors="replace")[-chars:]
                parts.append(f"--- {f.name}:\n{text}")
        return "\n".join(parts)

    def _ctld_answers(self) -> bool:
        res = self.run(["scontrol", "ping"], timeout=10)
        return res.ok and "UP" in res.stdout

    def _all_idle(self) -> bool:
        res = self.run(["sinfo", "-h", "-N", "-o", "%N %t"], timeout=10)
        states = dict(line.split() for line in res.stdout.splitlines() if line.strip())
        return res.ok and all(states.get(n) == "idle" for n in self.nodes)

    # -- configuration -------------------------------------------------------------------

    def slurm_conf(self) -> str:
        """slurm.conf text for this cluster (module doc says why each setting)."""
        t = self.tmp
        node_lines = "\n".join(
            f"NodeName={n} NodeAddr={self.sim.addresses[n]} CPUs={CPUS_PER_NODE} "
            "RealMemory=1000 State=UNKNOWN"
            for n in self.nodes
        )
        return f"""\
ClusterName=derive
SlurmctldHost={self.login}({self.sim.addresses[self.login]})
SlurmctldPort={self.ctld_port}
SlurmdPort={self.slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={self.munge_socket}
StateSaveLocation={t}/state
SlurmdSpoolDir={t}/spool/%n
TmpFS={t}/nodetmp
SlurmctldPidFile={t}/run/slurmctld.pid
SlurmdPidFile={t}/run/slurmd.%n.pid
SlurmctldLogFile={t}/log/slurmctld.log
SlurmdLogFile={t}/log/slurmd.%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=2
MinJobAge=300
{f"MpiParams=ports={self.resv_ports}" if self.resv_ports else ""}
{node_lines}
PartitionName=debug Nodes={",".join(self.nodes)} Default=YES MaxTime=INFINITE State=UP
"""

    def client_env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The whole environment of a client or daemon (nothing inherited, so no SLURM_* of
        the test runner leaks in): PATH (this Python's bin first, then the system's), HOME,
        LANG, SLURM_CONF; then ``extra`` on top."""
        env = {
            "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
            "HOME": str(self.tmp / "shared"),
            "LANG": "C.UTF-8",
            "SLURM_CONF": str(self.conf),
        }
        env.update(extra or {})
        return env

    # -- running clients -----------------------------------------------------------------

    def run(
        self,
        argv: list[str],
        timeout: float = 30.0,
        env: Mapping[str, str] | None = None,
        node: str | None = None,
    ) -> HostResult:
        """Run a client (``srun``, ``sbatch``, ``salloc``, ``mpirun``...) on ``node`` (default:
        the login node) with :meth:`client_env` plus ``env``; wait at most
        ``timeout`` s (then it is killed, timed_out=True). HOSTNAME is the node's name, as
        a login shell would export it. The working folder is ``tmp``/shared (so
        SLURM_SUBMIT_DIR does not depend on where the tests run)."""
        host = node or self.login
        full = self.client_env({"HOSTNAME": host, **(env or {})})
        cwd = ["env", "-C", str(self.tmp / "shared")]
        return self.sim.run_all({host: ([*cwd, *argv], full)}, timeout=timeout)[host]

    def wait_jobs_done(self, timeout: float = 30.0) -> None:
        """Wait until ``squeue`` lists no job (bounded; SlurmError after ``timeout`` s)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            res = self.run(["squeue", "-h", "-o", "%i %T"], timeout=10)
            if res.ok and not res.stdout.strip():
                return
            time.sleep(0.3)
        raise SlurmError(f"jobs still queued after {timeout}s: {res.stdout.strip()}")


#: TCP port of every node's sshd (the one Backend.AI uses between containers).
SSH_PORT = 2200

SSHD_CONFIG = """\
Port {port}
ListenAddress {addr}
HostKey {dir}/host_ed25519
PidFile {dir}/sshd.{node}.pid
AuthorizedKeysFile {dir}/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PrintMotd no
"""

SSH_CONFIG = """\
Host *
  Port {port}
  User root
  IdentityFile {dir}/id_ed25519
  IdentitiesOnly yes
  BatchMode yes
  StrictHostKeyChecking no
  UserKnownHostsFile /dev/null
  GlobalKnownHostsFile /dev/null
  LogLevel ERROR
"""

#: Nothing constrained: Slurm runs without touching cgroups (task/none, proctrack/linuxproc).
CGROUP_CONF = """\
CgroupPlugin=cgroup/v1
CgroupAutomount=no
ConstrainCores=no
ConstrainRAMSpace=no
ConstrainSwapSpace=no
ConstrainDevices=no
"""


def _hold(prefix: str | None) -> int:
    """``--hold [PREFIX]``: start a cluster, print ``READY <prefix> <tmpdir>``, wait for
    Ctrl-C/SIGTERM, clean up, exit 0."""
    stop = threading.Event()
    with SlurmCluster(prefix=prefix) as slurm:
        # The handlers go in BEFORE the READY line: whoever reacts to READY with a signal
        # then only sets ``stop`` (a KeyboardInterrupt raised inside print() would escape
        # the wait below and end the hold with a traceback, not 0).
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: stop.set())
        print(f"READY {slurm.prefix} {slurm.tmp}", flush=True)
        while not stop.wait(0.2):
            pass
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--hold"] and len(sys.argv) <= 3:
        sys.exit(_hold(sys.argv[2] if len(sys.argv) == 3 else None))
    print(__doc__)
    sys.exit(2)
