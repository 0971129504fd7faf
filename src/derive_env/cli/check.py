"""``derive-env check [--timeout SECONDS]``: the preflight, the edge (docs/behaviour.md section 8).

Loaded only when ``check`` is the first word of the command line (:mod:`derive_env.__main__`);
``derive-env -- check`` still runs a command named ``check``. Reads this node's facts,
derives as a start would (an image that did not opt in is checked as ``frameworks=pytorch``),
resolves the job's names, then either listens on the port the job's rendezvous opens
(:func:`rendezvous_of`; the master: it greets every connection, collects every row and
prints the whole table) or connects to it (the others: they send their row and print it
with the master's verdict). Every wait is bounded by one deadline, ``--timeout`` seconds
after the start. What is checked and every message are in :mod:`derive_env.preflight`.
Traffic goes only to the master's port, at the addresses the job's own master name resolves to.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any, NamedTuple

from derive_env.cli import gather_facts, load_labels, read_environment, read_files, say
from derive_env.cli.checknet import connect_once, listen, read_line
from derive_env.hosts import host_port

#: Seconds of the whole run when --timeout is not given (docs/behaviour.md section 8).
DEFAULT_TIMEOUT = 15.0
#: Seconds left for the output and the exit after the last wait.
EXIT_SLACK = 0.3


class Bound(NamedTuple):
    """The check's time: ``timeout`` (``--timeout``, seconds) and the ``deadline``
    (``time.monotonic()``) every wait ends by."""

    timeout: float
    deadline: float


class Mine(NamedTuple):
    """This row's parts: the plan (:func:`derive_env.preflight.plan_of`), the cells of the
    checks made here, the names resolved, this node's own addresses and what listens on
    the plan's port (:func:`rendezvous_of`; ``""``: PyTorch's master port, the only one)."""

    plan: object  # preflight.Plan, imported only when the check runs
    cells: dict
    resolved: dict
    own: tuple[str, ...]
    serves: str = ""

    def head(self, timeout: float) -> str:
        """The first line of the output (:func:`derive_env.preflight.title`)."""
        from derive_env.preflight import title

        plan = self.plan
        where = host_port(plan.master, plan.port) + (f" ({self.serves})" if self.serves else "")
        return title(len(plan.expected), plan.what, where, timeout)


def main(args: Sequence[str]) -> None:
    """``derive-env check ARGS``: parse (click), run, exit with 0 (all pass), 1 (a check
    failed), 2 (usage), 3 or 4 (the derivation's errors), 130/143 (interrupted)."""
    command(time.monotonic()).main(list(args), prog_name="derive-env check")


def command(start: float, completions: dict | None = None):  # -> click.Command
    """The click command of ``derive-env check``; ``start``: ``time.monotonic()`` at the
    start (the deadline counts from it); ``completions``: option keyword -> its
    ``shell_complete`` (given by :mod:`derive_env.cli.command`, which completes
    ``derive-env check ...``)."""
    import click

    from derive_env.cli.options import OPTIONS

    helps, more = {o.keyword: o.help for o in OPTIONS}, completions or {}

    def finite(_ctx: object, _param: object, value: float) -> float:
        if value != value:  # NaN passes FloatRange's comparisons
            raise click.BadParameter("nan is not in the range 0<x<=3600.")
        return value

    @click.command(context_settings={"help_option_names": ["-h", "--help"],
                                     "max_content_width": 100})
    @click.option("--timeout", type=click.FloatRange(0, 3600, min_open=True),
                  default=DEFAULT_TIMEOUT, show_default=True, metavar="SECONDS",
                  callback=finite, help="Bound on the whole check, in seconds.")
    @click.option("--label", "label_items", multiple=True, metavar="KEY=VALUE",
                  help=helps["label_items"])
    @click.option("--labels-file", "labels_files", multiple=True, metavar="PATH",
                  help=helps["labels_files"], shell_complete=more.get("labels_files"))
    @click.option("--frameworks", metavar="LIST", help=helps["frameworks"],
                  shell_complete=more.get("frameworks"))
    @click.option("--source", metavar="NAME", help="As for derive-env --source.",
                  shell_complete=more.get("source"))
    def check(**values: Any) -> None:
        """Check what a rendezvous needs, on every node at once (on-every-node derive-env
        check, srun/mpirun derive-env check, or a Kubernetes init container in every pod;
        no SSH between nodes): names resolve, the job's rendezvous port (PyTorch's master
        port, else the JAX coordinator's, else TensorFlow's chief's) is free on the master
        and reachable from every node, gloo's and NCCL's interfaces reach the
        peers. The master prints the table node x check.

        \b
        Exit codes: 0 every check passes, 1 a check failed, 2 usage, 3 bad cluster
        variables, 4 bad image label, 130 interrupted (SIGINT), 143 SIGTERM while
        resolving host names."""
        timeout, source, label_items = values["timeout"], values["source"], values["label_items"]
        if source is not None:
            from derive_env.errors import UsageError
            from derive_env.sources import choice_of

            try:
                choice_of({}, source)
            except UsageError as exc:
                raise click.UsageError(str(exc)) from None
        if values["frameworks"] is not None:  # as derive-env --frameworks: the label, winning
            label_items = (*label_items,
                           f"ai.backend.distributed.frameworks={values['frameworks']}")
        try:
            status = run_check(Bound(timeout, start + timeout - EXIT_SLACK),
                               values["labels_files"], label_items, source)
        except KeyboardInterrupt:
            say("error", "interrupted (SIGINT): the check did not finish")
            status = 130
        _exit_now(status)

    return check


def run_check(bound: Bound, labels_files: Sequence[str], label_items: Sequence[str],
              source: str | None) -> int:
    """The check of this node (or task); returns the exit status."""
    from derive_env.cli.hostfacts import Resolver
    from derive_env.errors import DeriveEnvError
    from derive_env.frameworks.network import VARIABLES, session_subnets
    from derive_env.labels import PREFIX
    from derive_env.preflight import check_iface, check_name, check_peers, own_addresses, plan_of
    from derive_env.render.fixes import FILE, opt_in_of, with_opt_in
    from derive_env.topology import Inputs

    timeout, opted = bound.timeout, (FILE, "")
    try:
        environ = read_environment(None)
        labels = load_labels(environ, labels_files, label_items)
        opted = opt_in_of(labels, label_items)  # before pytorch is added below: for the fixes
        wanted = labels.get(PREFIX + "frameworks", "")
        if not wanted:
            labels[PREFIX + "frameworks"] = "pytorch"
            say("note", f"not opted in (label {PREFIX}frameworks: --frameworks, "
                        "DERIVE_ENV_FRAMEWORKS or the image's label): checked as if "
                        "frameworks=pytorch")
        facts = gather_facts(True)._replace(resolve=Resolver(names_seconds(timeout)))
        derivation, job, endpoint = _derived(Inputs(environ, labels, read_files, facts,
                                                    source), wanted)
    except DeriveEnvError as exc:
        say("error", with_opt_in(str(exc), *opted))
        return exc.exit_code
    what, master, port = endpoint
    plan = plan_of(derivation.topology, {"MASTER_ADDR": master, "MASTER_PORT": str(port)},
                   facts.hostname)
    used = [f for f, _ in RENDEZVOUS if f in derivation.policy.frameworks]
    serves = "" if used == ["pytorch"] else what  # several, or not PyTorch's: say which
    resolved = dict(facts.resolve(plan.names))
    own = list(own_addresses(facts))
    addresses = {n: ((n,) if n not in resolved else tuple(resolved[n]))
                 for n in (plan.host, plan.master, *plan.peers)}
    single = len(plan.expected) == 1
    name = check_name(plan.host, addresses[plan.host], own, single)
    if (facts.hostname and facts.hostname.lower() != plan.host.lower() and name.ok
            and not single):  # one node: gloo's fallback to loopback is right
        name = check_name(facts.hostname, resolved.get(facts.hostname, ()), own, single, plan.host)
    settings = {v: job[v] for v in VARIABLES if job.get(v)}
    peers = [(p, addresses[p][0]) for p in plan.peers if addresses[p]]
    subnets = session_subnets(facts) if derivation.topology.source == "backendai" else None
    cells = {"name": name, "peers": check_peers(plan.host, plan.peers, addresses, subnets),
             "iface": check_iface(settings, facts, (plan.host, addresses[plan.host]), peers)}
    mine = Mine(plan, cells, resolved, tuple(own), serves)
    if plan.is_master(own, addresses[plan.master]):
        return _Master(mine, bound).run()
    return _client(mine, addresses[plan.master], bound)


#: What listens for each framework, in the order one is chosen when the job has several:
#: PyTorch's master port (its TCPStore), the JAX coordinator, TensorFlow's chief.
RENDEZVOUS = (("pytorch", "PyTorch master port"), ("jax", "JAX coordinator"),
              ("tensorflow", "TensorFlow chief"))


def rendezvous_of(job: dict[str, str], frameworks: Sequence[str]
                  ) -> tuple[str, str, int] | None:
    """The port the job's rendezvous listens on, from ``job`` (the environment the job
    gets, derived variables included) and its ``frameworks``: ``(what, host, port)`` of
    the first of :data:`RENDEZVOUS` the job has (``MASTER_ADDR``/``MASTER_PORT``,
    ``JAX_COORDINATOR_ADDRESS``, ``TF_CONFIG``'s chief, else its worker 0 as TensorFlow
    takes it); ``None`` when none listens (TensorFlow in one container: no TF_CONFIG)."""
    for name, what in (r for r in RENDEZVOUS if r[0] in frameworks):
        if name == "pytorch" and job.get("MASTER_ADDR") and job.get("MASTER_PORT"):
            return what, job["MASTER_ADDR"], int(job["MASTER_PORT"])
        target = job.get("JAX_COORDINATOR_ADDRESS", "") if name == "jax" else _chief(job)
        host, _, port = target.rpartition(":")
        if host and port.isdigit():
            return what, host.removeprefix("[").removesuffix("]"), int(port)
    return None


def _chief(job: dict[str, str]) -> str:
    """TF_CONFIG's chief (or worker 0) ``host:port``; ``""`` when there is none."""
    try:
        cluster = json.loads(job.get("TF_CONFIG", "")).get("cluster", {})
        return str((cluster.get("chief") or cluster.get("worker"))[0])
    except (ValueError, AttributeError, TypeError, IndexError):
        return ""


def _derived(inputs, wanted: str):  # -> (Derivation, job, rendezvous_of's endpoint)
    """Derive as the job's start does, with its own frameworks (the ports it opens); when
    none of them opens a port (TensorFlow in one container), with pytorch added, said in a
    note. :raises DeriveEnvError: as :func:`derive_env.pipeline.derive_from`."""
    from derive_env.labels import PREFIX
    from derive_env.pipeline import derive_from

    derivation = derive_from(inputs)
    assert derivation is not None  # opted in by the caller
    job = {**inputs.environ, **derivation.changes()}
    endpoint = rendezvous_of(job, derivation.policy.frameworks)
    if endpoint is None:
        say("note", f"frameworks={wanted} opens no port in this job (one container): "
                    f"checked as if frameworks={wanted},pytorch")
        labels = {**inputs.labels, PREFIX + "frameworks": f"{wanted},pytorch"}
        derivation = derive_from(inputs._replace(labels=labels))
        job = {**inputs.environ, **derivation.changes()}  # type: ignore[union-attr]
        endpoint = rendezvous_of(job, ("pytorch",))  # pytorch always sets MASTER_*
    return derivation, job, endpoint


def names_seconds(timeout: float) -> float:
    """Seconds the job's names may take to resolve: 30% of the bound. Pods start apart and a
    pod's name appears in the cluster's DNS only once the pod has an address, so an init
    container's check with ``--timeout 300`` waits up to 90 s for its peers' names; the
    default bound (15 s) gives them 4.5 s, as a start's 5 s (a name still unknown then is
    a failed check, named in the table)."""
    return timeout * 0.3


def _margin(timeout: float) -> float:
    """Seconds before the deadline at which the master stops collecting and the others stop
    connecting, so the verdict reaches every node before its own deadline."""
    return min(2.0, timeout * 0.1)


def _write(text: str) -> None:
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except (OSError, ValueError, AttributeError):
        pass


def _exit_now(status: int) -> None:
    """Exit at once: a resolver or connection thread still waiting must not delay it."""
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(status)


def _row(mine: Mine, port_cell):  # -> preflight.Row
    from derive_env.preflight import Row

    plan = mine.plan
    return Row(plan.label, plan.host, {**mine.cells, "port": port_cell}, mine.resolved,
               mine.own)


# --------------------------------------------------------------------------- the master


class _Master:
    """Listen on the master port, greet, collect every row, send the verdict, print."""

    def __init__(self, mine: Mine, bound: Bound) -> None:
        self.mine, self.plan, self.resolved = mine, mine.plan, mine.resolved
        self.timeout, self.deadline = bound
        self.rows: dict[str, object] = {}
        self.conns: list[tuple[socket.socket, str]] = []
        self.extra: list[str] = []
        self.done = threading.Condition()

    def run(self) -> int:
        from derive_env import preflight

        plan = self.plan
        head = self.mine.head(self.timeout)
        listener = listen(plan.port)
        if isinstance(listener, str):
            problem = (f"{host_port(plan.master, plan.port)} is already in use{listener}"
                       if listener.startswith(" (") or not listener else listener)
            row = _row(self.mine, preflight.failed(problem))
            ok, line = preflight.verdict([row], plan.what)
            others = (f"the other {plan.what} cannot report to the master: they say why\n"
                      if len(plan.expected) > 1 else "")  # a job of one node has no others
            _write(head + preflight.table([row], _title(plan)) + line + "\n" + others)
            return 1
        with listener:
            listener.settimeout(0.2)
            threading.Thread(target=self._accept, args=(listener,), daemon=True).start()
            port_cell = self._self_connect()
            self._collect()
            rows = [_row(self.mine, port_cell), *self.rows.values()]
            judged = preflight.judge(rows, plan.expected)
            ok, line = preflight.verdict(judged, plan.what)
            self._answer(ok, line, judged)
        _write(head + preflight.table(judged, _title(plan)) + "".join(
            f"{x}\n" for x in self.extra) + line + "\n")
        return 0 if ok else 1

    def _self_connect(self):
        """The master reaches its own port at the master address, as its own workers do."""
        from derive_env.preflight import failed, passed

        plan = self.plan
        addresses = self.resolved.get(plan.master, (plan.master,))
        sock, problem = connect_once((plan.master, plan.port), addresses, plan.key,
                                     self.deadline)
        if sock is None:
            return failed(f"{plan.host} listens on port {plan.port}, but {plan.master}:"
                          f"{plan.port} does not reach it from {plan.host}: {problem}")
        sock.close()
        return passed("listening")

    def _accept(self, listener: socket.socket) -> None:
        while time.monotonic() < self.deadline:
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        from derive_env.preflight import PROTOCOL, row_from_wire

        try:
            conn.settimeout(max(0.1, self.deadline - time.monotonic()))
            greeting = {"protocol": PROTOCOL, "key": self.plan.key, "host": self.plan.host}
            conn.sendall(json.dumps(greeting).encode() + b"\n")
            message = json.loads(read_line(conn, self.deadline) or "null")
        except (OSError, ValueError):
            conn.close()
            return
        row = row_from_wire(message.get("row")) if isinstance(message, dict) else None
        if row is None or message.get("key") != self.plan.key:
            conn.close()
            return
        with self.done:
            if row.label in self.rows or row.label == self.plan.label:
                self.extra.append(f"two checks report as {self.plan.what[:-1]} {row.label} "
                                  f"({row.host}): is the check running twice?")
            else:
                self.rows[row.label] = row
            self.conns.append((conn, row.host))
            self.done.notify_all()

    def _collect(self) -> None:
        end = self.deadline - _margin(self.timeout)
        with self.done:
            while len(self.rows) < len(self.plan.expected) - 1:
                remaining = end - time.monotonic()
                if remaining <= 0:
                    break
                self.done.wait(remaining)

    def _answer(self, ok: bool, line: str, judged) -> None:
        """Send every node the verdict, with the problems the master found in its row."""
        with self.done:
            conns, self.conns = self.conns, []
        problems = {r.host: [f"{r.host} {c}: {r.cells[c].problem}" for c in r.failures]
                    for r in judged}
        for conn, host in conns:
            answer = {"ok": ok, "verdict": line, "problems": problems.get(host, [])}
            try:
                conn.settimeout(0.5)
                conn.sendall(json.dumps(answer).encode() + b"\n")
            except OSError:
                pass
            conn.close()


# ---------------------------------------------------------------------------- the others


def _client(mine: Mine, master_addresses: Sequence[str], bound: Bound) -> int:
    """Connect to the master (retrying until the margin), send the row, print it with the
    master's verdict."""
    from derive_env import preflight

    plan, (timeout, deadline) = mine.plan, bound
    head = mine.head(timeout)
    sock = _connect(plan, master_addresses, timeout, deadline - _margin(timeout))
    if isinstance(sock, str):
        row = _row(mine, preflight.failed(sock))
        _write(head + preflight.table([row], _title(plan)) + preflight.verdict(
            [row], plan.what)[1] + "\n")
        return 1
    row = _row(mine, preflight.passed("connected"))
    with sock:
        answer = None
        try:
            sock.sendall(json.dumps({"key": plan.key, "row": preflight.row_to_wire(row)}
                                    ).encode() + b"\n")
            answer = json.loads(read_line(sock, deadline) or "null")
        except (OSError, ValueError):
            pass
    ok, said = False, f"no verdict from the master {plan.master} within {timeout:g} s"
    if isinstance(answer, dict) and isinstance(answer.get("verdict"), str):
        ok = not row.failures and answer.get("ok") is True
        said = f"master {plan.master}: {answer['verdict']}"
        found = answer.get("problems")
        if isinstance(found, list) and not row.failures and all(isinstance(p, str) for p in found):
            said = "".join(f"{p}\n" for p in found) + said
    _write(head + preflight.table([row], _title(plan)) + said + "\n")
    return 0 if ok else 1


def _connect(plan, addresses: Sequence[str], timeout: float, end: float):
    """A connection to the master greeted by this job's check, retried every 0.2 s until
    ``end``; else why not (a foreign listener at once, without retrying)."""
    where = host_port(plan.master, plan.port)
    if not addresses:
        return f"{plan.master} does not resolve on {plan.host}: cannot connect to {where}"
    while True:
        sock, problem = connect_once((plan.master, plan.port), addresses, plan.key, end)
        if sock is not None:
            return sock
        if problem.startswith(f"{where} is already in use"):
            return problem
        if time.monotonic() + 0.2 >= end:
            return f"cannot connect to {where} from {plan.host} within {timeout:g} s: {problem}"
        time.sleep(0.2)


def _title(plan) -> str:
    return "rank" if plan.per_task else "node"
