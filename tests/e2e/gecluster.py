"""Run a real Grid Engine cluster (Son of Grid Engine 8.1.9, Debian's ``gridengine-*``) on
one Linux machine.

Built on :class:`simcluster.SimulatedCluster` (one network namespace per node, with its own
hostname and /etc/hosts, module doc there). On top of it:

- a master node (namespace ``sgemaster``, not an execution host) where ``sge_qmaster`` and
  every client (``qconf``, ``qsub``, ``qstat``) run;
- one ``sge_execd`` per node namespace;
- an ``SGE_ROOT`` of our own in the temporary folder: ``bin``, ``lib``, ``utilbin`` and
  ``util`` link to Debian's /var/lib/gridengine, cell ``default`` with a bootstrap file
  (``admin_user none``: every daemon runs as root; classic spooling in the folder), the
  global configuration with ``min_uid 0`` (Debian's default 1000 refuses root's jobs) and
  ``execd_spool_dir`` in the folder (one sub-folder per host on the shared filesystem);
  ports from ``SGE_QMASTER_PORT``/``SGE_EXECD_PORT`` (each namespace has its own ports);
- the hosts (``qconf -ah/-as/-Ae``), the queue ``all.q`` with 2 slots per host, the queue
  ``extra.q`` (``seq_no`` 1, so filled after all.q) with 1 slot per host, and two
  parallel environments, every one from a file (``qconf -Aq/-Ap``): ``rr`` (allocation_rule
  ``$round_robin``) and ``one`` (allocation_rule ``1``: one slot per host), both
  ``control_slaves TRUE`` (so ``qrsh -inherit`` starts tasks on the job's hosts) and
  ``job_is_first_task FALSE``.

Every wait is bounded. On exit, also on an exception, every daemon and job is killed (the
SimulatedCluster kills every process in its namespaces, sge_qmaster and sge_execd
daemonize but stay in them), the namespaces and /etc/netns folders are removed, and so is
the temporary folder. Standard library only::

    with GridEngineCluster() as ge:
        res = ge.run(["qsub", "-sync", "y", "-pe", "rr", "6", "job.sh"], timeout=60)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Self


from simcluster import NETNS_ETC, NETNS_RUN, HostResult, SimulatedCluster, can_simulate

#: The simulated execution hosts (not in sorted order: Grid Engine's order is its own).
NODES = ["sge-c3", "sge-a1", "sge-b2"]
#: The master node: sge_qmaster and every client run there; not an execution host.
MASTER = "sgemaster"
#: Debian's SGE_ROOT (bin/, lib/, utilbin/, util/ are linked from ours).
DEBIAN_ROOT = Path("/var/lib/gridengine")
#: Programs a cluster needs.
PROGRAMS = ("sge_qmaster", "sge_execd", "qconf", "qsub", "qstat", "qrsh")
#: Seconds allowed for the qmaster to answer and for every execd to report its load.
READY_TIMEOUT_S = 60.0
#: Slots per host in all.q.
SLOTS = 2
QMASTER_PORT, EXECD_PORT = 6444, 6445


class GridEngineError(RuntimeError):
    """A daemon did not start or become ready in time; the message says which, with logs."""


def find_program(prog: str) -> str | None:
    """Full path of ``prog`` on PATH, in /usr/sbin or Debian's gridengine folder."""
    return shutil.which(prog) or shutil.which(prog, path="/usr/sbin:/sbin:/usr/lib/gridengine")


def can_run_gridengine() -> tuple[bool, str]:
    """(True, "") when a :class:`GridEngineCluster` can run here, else (False, reason)."""
    ok, why = can_simulate()
    if not ok:
        return ok, why
    for prog in PROGRAMS:
        if find_program(prog) is None:
            return False, (f"`{prog}` not found (install gridengine-master gridengine-exec "
                           "gridengine-client: `make managers`)")
    if not (DEBIAN_ROOT / "utilbin").exists():
        return False, f"{DEBIAN_ROOT}/utilbin missing (gridengine-common)"
    return True, ""


def leftovers(prefix: str, tmp: Path) -> list[str]:
    """Everything of a cluster still present (empty after a clean exit): namespaces, their
    /etc/netns folders, the temporary folder, processes whose environment names it (every
    daemon and job has SGE_ROOT in it)."""
    found = [str(p) for p in NETNS_RUN.glob(f"{prefix}-*")]
    found += [str(p) for p in NETNS_ETC.glob(f"{prefix}-*")]
    if tmp != Path() and tmp.exists():
        found.append(str(tmp))
    if tmp == Path():
        return found
    needle = str(tmp).encode()
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if needle in environ.read_bytes():
                found.append(f"pid {environ.parent.name}")
        except OSError:
            continue
    return found


BOOTSTRAP = """\
# Version: 8.1.9
admin_user              none
default_domain          none
ignore_fqdn             true
spooling_method         classic
spooling_lib            libspoolc
spooling_params         {root}/default/common;{root}/default/spool/qmaster
binary_path             /usr/sbin
qmaster_spool_dir       {root}/default/spool/qmaster
security_mode           none
listener_threads        2
worker_threads          2
scheduler_threads       1
"""

QUEUE = """\
qname                 all.q
hostlist              {hosts}
seq_no                0
load_thresholds       NONE
suspend_thresholds    NONE
nsuspend              1
suspend_interval      00:05:00
priority              0
min_cpu_interval      00:05:00
processors            UNDEFINED
qtype                 BATCH INTERACTIVE
ckpt_list             NONE
pe_list               rr one
rerun                 FALSE
slots                 {slots}
tmpdir                {tmpdir}
shell                 /bin/sh
prolog                NONE
epilog                NONE
shell_start_mode      unix_behavior
starter_method        NONE
suspend_method        NONE
resume_method         NONE
terminate_method      NONE
notify                00:00:60
owner_list            NONE
user_lists            NONE
xuser_lists           NONE
subordinate_list      NONE
complex_values        NONE
projects              NONE
xprojects             NONE
calendar              NONE
initial_state         default
s_rt                  INFINITY
h_rt                  INFINITY
s_cpu                 INFINITY
h_cpu                 INFINITY
s_fsize               INFINITY
h_fsize               INFINITY
s_data                INFINITY
h_data                INFINITY
s_stack               INFINITY
h_stack               INFINITY
s_core                INFINITY
h_core                INFINITY
s_rss                 INFINITY
h_rss                 INFINITY
s_vmem                INFINITY
h_vmem                INFINITY
"""

PE = """\
pe_name            {name}
slots              999
user_lists         NONE
xuser_lists        NONE
start_proc_args    NONE
stop_proc_args     NONE
allocation_rule    {rule}
control_slaves     TRUE
job_is_first_task  FALSE
urgency_slots      min
accounting_summary FALSE
qsort_args         NONE
"""

SCHED = """\
algorithm                         default
schedule_interval                 0:0:1
maxujobs                          0
queue_sort_method                 seqno
job_load_adjustments              NONE
load_adjustment_decay_time        0:0:0
load_formula                      slots
schedd_job_info                   true
flush_submit_sec                  1
flush_finish_sec                  1
params                            none
reprioritize_interval             0:0:0
halftime                          168
usage_weight_list                 cpu=1.000000,mem=0.000000,io=0.000000
compensation_factor               5.000000
weight_user                       0.250000
weight_project                    0.250000
weight_department                 0.250000
weight_job                        0.250000
weight_tickets_functional         0
weight_tickets_share              0
share_override_tickets            TRUE
share_functional_shares           TRUE
max_functional_jobs_to_schedule   200
report_pjob_tickets               TRUE
max_pending_tasks_per_job         50
halflife_decay_list               none
policy_hierarchy                  OFS
weight_ticket                     0.010000
weight_waiting_time               0.000000
weight_deadline                   3600000.000000
weight_urgency                    0.100000
weight_priority                   1.000000
max_reservation                   0
default_duration                  INFINITY
"""


class GridEngineCluster:
    """Context manager: a real Grid Engine cluster in network namespaces (module doc).

    After ``__enter__``: ``tmp`` (the temporary folder), ``root`` (its SGE_ROOT), ``sim``
    (the SimulatedCluster: the nodes, then MASTER). Node i has address 198.18.0.(10+i).
    Raises GridEngineError (with the daemons' messages) when a daemon is not ready in time,
    SimulationError when namespaces cannot be made; in both cases after cleaning up.
    """

    def __init__(self, nodes: list[str] | None = None, prefix: str | None = None,
                 ready_timeout: float = READY_TIMEOUT_S) -> None:
        self.nodes = list(nodes or NODES)
        self.prefix = prefix if prefix is not None else f"ge{os.getpid() % 100000}"
        self.ready_timeout = ready_timeout
        self.master = MASTER
        self.sim = SimulatedCluster([*self.nodes, MASTER], prefix=self.prefix)
        self.tmp = Path()
        self.root = Path()
        self._entered = False

    def __enter__(self) -> Self:
        self.sim.__enter__()
        self._entered = True
        try:
            self.tmp = Path(tempfile.mkdtemp(prefix=f"{self.prefix}-sge-"))
            os.chmod(self.tmp, 0o755)
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self.close(exc_type)

    def close(self, exc_type: object = None) -> None:
        """Kill every daemon and job (by namespace), remove namespaces and the folder."""
        if not self._entered:
            return
        self._entered = False
        try:
            self.sim.__exit__(exc_type, None, None)
        finally:
            if self.tmp != Path() and self.tmp.exists():
                shutil.rmtree(self.tmp, ignore_errors=True)

    # -- setup ---------------------------------------------------------------------------

    def _layout(self) -> None:
        """Our SGE_ROOT: links to Debian's binaries, cell ``default``, its configuration."""
        self.root = self.tmp / "sgeroot"
        common = self.root / "default" / "common"
        for d in (common, self.root / "default" / "spool" / "qmaster" / "job_scripts",
                  self.tmp / "execd", self.tmp / "shared", self.tmp / "conf"):
            d.mkdir(parents=True, mode=0o755)
        for name in ("bin", "lib", "utilbin", "util"):
            (self.root / name).symlink_to(DEBIAN_ROOT / name)
        (common / "bootstrap").write_text(BOOTSTRAP.format(root=self.root))
        (common / "act_qmaster").write_text(f"{self.master}\n")
        (common / "cluster_name").write_text("derive\n")
        conf = Path("/usr/share/gridengine/default-configuration").read_text()
        conf = (conf.replace("/var/spool/gridengine/execd", str(self.tmp / "execd"))
                .replace("min_uid                1000", "min_uid                0")
                .replace("min_gid                1000", "min_gid                0")
                .replace("load_report_time       00:00:40", "load_report_time       00:00:02")
                .replace("reporting=false", "reporting=false").replace(
                    "loglevel               log_warning", "loglevel               log_info"))
        (self.tmp / "conf" / "global").write_text(conf)
        (self.tmp / "conf" / "sched").write_text(SCHED)
        (self.tmp / "conf" / "hosts").mkdir()
        (self.tmp / "conf" / "hosts" / self.master).write_text(f"hostname {self.master}\n")
        for argv in (
            ["spooldefaults", "configuration", str(self.tmp / "conf" / "global")],
            ["spooldefaults", "complexes", "/usr/share/gridengine/util/resources/centry"],
            ["spooldefaults", "usersets", "/usr/share/gridengine/util/resources/usersets"],
            ["spooldefaults", "managers", "root"],
            ["spooldefaults", "operators", "root"],
            ["spooldefaults", "adminhosts", str(self.tmp / "conf" / "hosts")],
            ["spooldefaults", "submithosts", str(self.tmp / "conf" / "hosts")],
        ):
            res = subprocess.run([str(DEBIAN_ROOT / "utilbin" / "lx-amd64" / argv[0]), *argv[1:]],
                                 env=self.client_env(), capture_output=True, text=True,
                                 timeout=30)
            if res.returncode != 0:
                raise GridEngineError(f"{' '.join(argv)}: rc={res.returncode}\n"
                                      f"{res.stdout}{res.stderr}")

    def _start(self) -> None:
        self._layout()
        self._daemon("qmaster", self.master, [find_program("sge_qmaster") or "sge_qmaster"])
        self._wait("sge_qmaster", lambda: self.run(["qconf", "-sq"], timeout=10).returncode
                   in (0, 1) and self.run(["qconf", "-sh"], timeout=10).ok)
        hosts = " ".join(self.nodes)
        self._ok(["qconf", "-Msconf", str(self.tmp / "conf" / "sched")])
        for argv in (["qconf", "-ah", ",".join(self.nodes)],
                     ["qconf", "-as", ",".join(self.nodes)]):
            self._ok(argv)
        for node in self.nodes:
            path = self.tmp / "conf" / f"exec.{node}"
            path.write_text(f"hostname {node}\nload_scaling NONE\ncomplex_values NONE\n"
                            "user_lists NONE\nxuser_lists NONE\nprojects NONE\n"
                            "xprojects NONE\nusage_scaling NONE\nreport_variables NONE\n")
            self._ok(["qconf", "-Ae", str(path)])
        for name, rule in (("rr", "$round_robin"), ("one", "1")):
            path = self.tmp / "conf" / f"pe.{name}"
            path.write_text(PE.format(name=name, rule=rule))
            self._ok(["qconf", "-Ap", str(path)])
        for qname, seq_no, slots in (("all.q", 0, SLOTS), ("extra.q", 1, 1)):
            path = self.tmp / "conf" / qname
            text = QUEUE.format(hosts=hosts, slots=slots, tmpdir=self.tmp / "nodetmp")
            path.write_text(text.replace("qname                 all.q", f"qname {qname}")
                            .replace("seq_no                0", f"seq_no {seq_no}"))
            self._ok(["qconf", "-Aq", str(path)])
        (self.tmp / "nodetmp").mkdir(mode=0o755)
        for node in self.nodes:
            # Each host's job folders (the queue's tmpdir) are its own, as on separate
            # machines: the execd runs in a mount namespace where nodetmp.<node> is mounted
            # over nodetmp. Shared, the first host whose task ends removes the job's folder
            # under the others' feet (qrsh_starter: cannot open qrsh_exit_code).
            private = self.tmp / f"nodetmp.{node}"
            private.mkdir(mode=0o755)
            argv = ["unshare", "-m", "--propagation", "private", "sh", "-c",
                    'mount --bind "$1" "$2" && shift 2 && exec "$@"', "sh",
                    str(private), str(self.tmp / "nodetmp"),
                    find_program("sge_execd") or "sge_execd"]
            self._daemon(f"execd.{node}", node, argv)
        self._wait("every execd", self._all_up)

    def _daemon(self, name: str, node: str, argv: list[str]) -> None:
        """Start ``argv`` in ``node``'s namespace, its output to tmp/<name>.out (sge_qmaster
        and sge_execd then daemonize in that namespace: close() kills them there)."""
        with open(self.tmp / f"{name}.out", "wb") as out:
            self.sim.popen(node, argv, self.client_env(), inherit=False, stdout=out,
                           stderr=subprocess.STDOUT)

    def _ok(self, argv: list[str]) -> None:
        res = self.run(argv, timeout=20)
        if not res.ok:
            raise GridEngineError(f"{' '.join(argv)}: {res.describe()}\n{self.logs()}")

    def _all_up(self) -> bool:
        """Every execd reported its load: ``qstat -f`` lists each queue instance of all.q
        with a load average (``-NA-`` before) and without state ``u`` (unknown)."""
        res = self.run(["qstat", "-f", "-q", "all.q"], timeout=10)
        rows = [ln.split() for ln in res.stdout.splitlines() if ln.startswith("all.q@")]
        up = [r for r in rows if r[3] != "-NA-" and "u" not in (r[5] if len(r) > 5 else "")]
        return res.ok and len(up) == len(self.nodes)

    def _wait(self, what: str, ready: Callable[[], bool]) -> None:
        deadline = time.monotonic() + self.ready_timeout
        while True:
            if ready():
                return
            if time.monotonic() >= deadline:
                raise GridEngineError(f"{what}: not ready after {self.ready_timeout:.0f}s\n"
                                      f"{self.logs()}")
            time.sleep(0.3)

    def logs(self, chars: int = 2000) -> str:
        """The tail of every daemon's output and messages file (for errors)."""
        parts = []
        files = [*self.tmp.glob("*.out"), *self.root.glob("default/spool/qmaster/messages"),
                 *self.tmp.glob("execd/*/messages")]
        for f in sorted(files):
            parts.append(f"--- {f}:\n{f.read_text(errors='replace')[-chars:]}")
        return "\n".join(parts)

    def client_env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The whole environment of a client or daemon (nothing inherited)."""
        env = {
            "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin:/usr/sbin:"
                    "/sbin",
            "HOME": str(self.tmp / "shared"),
            "LANG": "C.UTF-8",
            "SGE_ROOT": str(self.root if self.root != Path() else self.tmp / "sgeroot"),
            "SGE_CELL": "default",
            "SGE_QMASTER_PORT": str(QMASTER_PORT),
            "SGE_EXECD_PORT": str(EXECD_PORT),
        }
        env.update(extra or {})
        return env

    def run(self, argv: list[str], timeout: float = 30.0, env: Mapping[str, str] | None = None,
            node: str | None = None) -> HostResult:
        """Run a client on ``node`` (default: the master), bounded by ``timeout`` s, in
        tmp/shared."""
        host = node or self.master
        full = self.client_env({"HOSTNAME": host, **(env or {})})
        cwd = ["env", "-C", str(self.tmp / "shared")]
        return self.sim.run_all({host: ([*cwd, *argv], full)}, timeout=timeout)[host]


if __name__ == "__main__":
    with GridEngineCluster() as ge:
        print("READY", ge.tmp, flush=True)
        print(ge.run(["qstat", "-f"]).stdout)
        if sys.argv[1:2] == ["--hold"]:
            try:
                while True:
                    time.sleep(0.5)
            except KeyboardInterrupt:
                pass
