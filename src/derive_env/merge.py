"""Merge: derived variables against the environment they will be added to.

Rules (docs/behaviour.md section 6). A cluster manager copies a session's user-defined variables
unchanged into EVERY container (Backend.AI's launcher spreads the session environment into
each container's), so a value already in the environment is the same on every node. Each
variable states its scope where its framework builds it
(:func:`derive_env.frameworks.context.variable`), and a user-set value is judged by it:

* :data:`~derive_env.frameworks.context.SHARED` (the same on every node: the master address
  and port, ``PET_NPROC_PER_NODE``, the JAX coordinator, the socket interface): a non-empty
  user-set value wins and is reported as kept. The frameworks already fed it to what
  derives from it (:func:`derive_env.frameworks.context.master_of`).
* :data:`~derive_env.frameworks.context.FOLLOWS` (``PET_MASTER_*``): must agree with its
  leader's value.
* :data:`~derive_env.frameworks.context.JOB` (sizes the job) and
  :data:`~derive_env.frameworks.context.NODE` (identifies the node or process): kept when
  equal to the derived value, compared as data by the variable's comparison (``01`` is 1,
  ``3:3`` nodes is 3, ``TF_CONFIG`` as JSON); a different value is an error naming the
  variable, both values and why.
* A variable naming the host of rank 0 (comparison ``HOST`` or ``ADDRESS``): in a session of
  more than one node, a loopback address is an error, a master that is another node than
  node rank 0 too (node rank 0 serves the rendezvous), and a host name that is not a node of
  the session a warning.

An empty value counts as unset, as torch's ``env://`` rendezvous treats it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from derive_env.errors import ON_ERROR_WARN, TopologyError, describe, printable, shorten
from derive_env.frameworks.context import (
    ADDRESS,
    COUNT_RANGE,
    EXACT,
    FOLLOWS,
    HOST,
    INTEGER,
    JOB,
    JSON,
    NODE,
    SHARED,
    Context,
    Contribution,
    DerivedVariable,
    variable,
)
from derive_env.hosts import host_key, host_problem, is_ip, is_ipv6, is_loopback
from derive_env.topology import ClusterTopology
from derive_env.validation import count_of, parse_port, static_count

#: Where a value every node shares comes from: no manager assumed (issue 15, item 6).
_WHERE = ("the image's ENV, a variable the cluster manager copies into every node, a "
          "Kubernetes pod spec, a container hook such as enroot's, an env file")


def _kept(var: DerivedVariable, user: str) -> DerivedVariable:
    # The one place a variable is copied (a named tuple: _replace).
    return var._replace(kept=True, value=user, derived=var.value)


def merge(
    environ: Mapping[str, str],
    derived: Sequence[DerivedVariable],
    checks: Sequence[DerivedVariable] = (),
) -> list[DerivedVariable]:
    """Mark each derived variable ``kept`` when ``environ`` already has it (non-empty).

    :param checks: values derive-env does not set but a user-set value must match (the
        per-process variables in PyTorch's ``torchrun`` mode); included, as kept, only when
        the environment has them.
    :returns: the variables in the same order, then the user-set checks; a kept one carries
        the user's value as ``value`` and the shim's as ``derived``. Nothing is validated
        here: :func:`check_user_values` does that.
    """
    merged = []
    for var in derived:
        user = environ.get(var.name, "")
        merged.append(_kept(var, user) if user else var)
    merged += [_kept(var._replace(checked_only=True), environ[var.name])
               for var in checks if environ.get(var.name)]
    return merged


def changes(variables: Sequence[DerivedVariable]) -> dict[str, str]:
    """The variables the exec adds or changes: the derived ones that were not kept."""
    return {v.name: v.value for v in variables if not v.kept}


def _json(value: str) -> object:
    try:
        return json.loads(value)
    except (ValueError, RecursionError):
        return ValueError  # a sentinel no parsed document equals


def _same_tf_config(user: object, derived: object) -> bool:
    """Two parsed JSON documents state the same ``TF_CONFIG``, both read with its model."""
    from derive_env.tf_config import TFConfig  # only when a user set TF_CONFIG

    mine = TFConfig.read(user)
    return mine is not None and mine == TFConfig.read(derived)


def same_value(compare: str, user: str, derived: str) -> bool:
    """Whether a user-set value states the same as derive-env's ``derived``.

    :param compare: the variable's comparison (:class:`DerivedVariable`): integers
        numerically (``01`` = ``1``, blanks around ignored, as ``int()`` in torch and user
        code does), else as text; ``COUNT_RANGE`` as torchrun reads it (``3:3`` = ``3``);
        ``JSON`` as a parsed ``TF_CONFIG`` (key order and blanks do not matter, the index
        is a JSON integer: :mod:`derive_env.tf_config`); ``HOST`` without regard to case,
        ``ADDRESS`` too, its port as an integer; ``EXACT`` exactly.
    """
    if user == derived:
        return True
    if compare == EXACT:
        return False
    if compare == JSON:
        return _same_tf_config(_json(user), _json(derived))
    if compare == COUNT_RANGE:
        return static_count(user) is not None and static_count(user) == static_count(derived)
    if compare == HOST:
        return user.strip().lower() == derived.lower()
    if compare == ADDRESS:
        return (_host_of(compare, user).lower() == _host_of(compare, derived).lower()
                and same_value(INTEGER, user.rpartition(":")[2], derived.rpartition(":")[2]))
    number = count_of(user)
    return number is not None and number == count_of(derived)


def _tf_difference(user: str, derived: str) -> str:
    """Which part of a user-set TF_CONFIG differs, for the message: each part is read with
    the other taken from the derived document."""
    document = _json(user)
    if not isinstance(document, dict):
        return "it is not a JSON object"
    expected = json.loads(derived)
    parts = [key for key in ("cluster", "task") if key not in document
             or not _same_tf_config({**expected, key: document[key]}, expected)]
    extra = sorted(set(document) - {"cluster", "task"})
    if extra:
        parts.append("extra keys " + ", ".join(shorten(k, 40) for k in extra[:3]))
    if not parts:
        return "it differs"
    return "its " + " and ".join(parts) + (" differ" if len(parts) > 1 else " differs")


def _identity_error(var: DerivedVariable, topology: ClusterTopology) -> TopologyError:
    derived = var.derived or ""
    if var.scope == NODE:
        why = (
            "a value set once for the whole job reaches every node alike, so it is right on "
            "at most one node" + ("" if var.compare == JSON else " (two nodes would claim "
                                  "the same rank)")
        )
    else:
        why = (
            f"the job has {topology.num_nodes or 'several'} node(s), so this value sizes it "
            "wrongly on every node (each would train alone or wait for processes that never "
            "come)"
        )
    if var.compare == JSON:
        detail = f" ({_tf_difference(var.value, derived)})"
    else:
        detail = f" ({shorten(var.provenance, 160)})"
    setter = ("derive-env does not set it: the launcher sets it per process"
              if var.checked_only else "derive-env derives it on every node")
    return TopologyError(
        describe(var.name, var.value, f"{shorten(derived)!r}, {var.what}{detail}")
        + f": {why}. Remove {var.name} where it is set ({_WHERE}; {setter}), {ON_ERROR_WARN}"
    )


def _follower_error(var: DerivedVariable) -> TopologyError:
    leader = var.leader
    return TopologyError(describe(
        var.name, var.value,
        f"{var.derived or ''!r}, the same as {leader} ({shorten(var.provenance, 160)}): "
        f"torchrun would meet at {shorten(var.value, 80)} while init_process_group and "
        f"Lightning use {leader}. Set {leader} instead (derive-env derives "
        f"{var.name} from it), or both to the same value",
    ))


def _host_of(compare: str, value: str) -> str:
    """The host part of an address variable (``host:port`` for ADDRESS, IPv6 bracketed)."""
    value = value.strip()
    if compare != ADDRESS:
        return value
    if value.startswith("["):
        return value[1:].partition("]")[0]
    return value.rpartition(":")[0] if value.count(":") == 1 else value


def _check_address(var: DerivedVariable) -> None:
    """A user-set ``host:port`` (``JAX_COORDINATOR_ADDRESS``) read as JAX reads it: the port
    is the text after the last ``:`` (jax/_src/distributed.py binds ``[::]:`` + it), the
    host a host name or IP literal, IPv6 in brackets.

    :raises TopologyError: no port, a port outside 1-65535, or a host that is none.
    """
    value = var.value.strip()
    host, colon, port = value.rpartition(":")
    expected = ("host:port, the port 1-65535, IPv6 in brackets ([fd00::1]:8476), as JAX "
                "reads it (jax/_src/distributed.py: the port is the text after the last ':')")
    try:
        parse_port(port)
    except ValueError:
        raise TopologyError(describe(var.name, var.value, expected)) from None
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    problem = host_problem(bare) if colon else "a host"
    if problem or (is_ipv6(bare) and bare == host):
        raise TopologyError(describe(var.name, var.value, expected))


def _address_problem(
    var: DerivedVariable, topology: ClusterTopology
) -> tuple[TopologyError | None, str | None]:
    """A user-set master address in a session of more than one node: (error, warning)."""
    host = _host_of(var.compare, var.value)
    hosts = [node.host for node in topology.nodes]
    master = hosts[0] if hosts else "the host of rank 0"
    shown = ", ".join(hosts[:8]) + (", ..." if len(hosts) > 8 else "")
    if is_loopback(host):
        return TopologyError(describe(
            var.name, var.value,
            f"the host of node rank 0 ({master}) or another address every node reaches. A "
            f"loopback address in a job of {topology.num_nodes or 'several'} nodes makes "
            f"every node connect to itself, so the nodes never meet. Remove {var.name} where "
            f"it is set ({_WHERE}; derive-env derives it), {ON_ERROR_WARN}",
        )), None
    if not hosts:  # no host list (an MPI launcher over SSH): nothing to compare with
        return None, None
    # DNS compares names without regard to case, and "main1." is "main1" fully qualified.
    lowered = [host_key(h) for h in hosts]
    key = host_key(host)
    if key in lowered[1:]:
        rank = lowered.index(key)
        return TopologyError(describe(
            var.name, var.value,
            f"the host of node rank 0 ({master}), not node rank {rank} ({host}). Node rank 0 "
            "serves the rendezvous (torchrun's static rendezvous, init_process_group's store, "
            f"JAX's coordinator) on its own host, so every node would wait at {host}. Remove "
            f"{var.name} where it is set ({_WHERE}; derive-env derives it), {ON_ERROR_WARN}",
        )), None
    if key in lowered or is_ip(host):
        return None, None  # an IP literal cannot be matched to a node without resolving it
    return None, (
        f"{var.name}={shorten(var.value)!r} is not a node of this job ({shown}): kept, so "
        f"every node connects to {shorten(host, 80)}. Node rank 0 ({master}) serves the "
        f"rendezvous on its own host, so this works only if {shorten(host, 80)} is another "
        f"name of {master}"
    )


def _check_value(var: DerivedVariable, topology: ClusterTopology) -> None:
    """A kept variable against its derived value, by its scope.

    :raises TopologyError: a :data:`JOB` or :data:`NODE` variable different from its derived
        value, a :data:`FOLLOWS` one different from its leader's.
    :raises ValueError: an unknown scope (a programming error).
    """
    if var.scope == SHARED:  # the user's value wins
        return
    if var.scope not in (JOB, NODE, FOLLOWS):
        raise ValueError(f"{var.name}: unknown scope {var.scope!r}")
    # Equal: kept silently. Not warned about: a shell in a Backend.AI container, after the
    # hook, has every derived value set, and runs derive-env again.
    if not same_value(var.compare, var.value, var.derived or ""):
        raise _follower_error(var) if var.scope == FOLLOWS else _identity_error(var, topology)


def check_user_values(
    variables: Sequence[DerivedVariable], topology: ClusterTopology
) -> list[str]:
    """Check the kept (user-set) variables of :func:`merge` against the topology, each by
    its scope (module docstring).

    :returns: warnings (a master host name that is not a node of the job).
    :raises TopologyError: (exit 3) a job-sizing or node-identifying variable different
        from its derived value; a ``PET_MASTER_*`` that contradicts the master address or
        port; in a session of more than one node, a loopback master address, or one naming
        a node other than node rank 0. The first found: first the checks whose verdict is
        the same on every node (sizes, addresses), then the per-node ones (node rank...),
        so that, wherever possible, every node of a session stops naming the same variable.
    """
    warnings: list[str] = []
    multi = topology.multi_node
    checked: set[str] = set()  # hosts already checked (MASTER_ADDR and PET_MASTER_ADDR)
    for var in sorted(variables, key=lambda v: v.scope == NODE):
        if not var.kept or var.name in topology.preset:  # the launcher's own: its authority
            continue
        if var.compare == ADDRESS:
            _check_address(var)
        _check_value(var, topology)
        host = _host_of(var.compare, var.value).lower()
        if multi and var.compare in (HOST, ADDRESS) and host not in checked:
            checked.add(host)
            error, warning = _address_problem(var, topology)
            if error is not None:
                raise error
            if warning is not None:
                warnings.append(warning)
    return warnings


# ----------------------------------------------------------------------------- the run id
#
# DERIVE_ENV_RUN_ID is derive-env's own variable, no framework's: one id every process of a
# run shares (docs/variables.md). It is built here, beside the merge that keeps a user-set
# value of it, and not in a module of its own: every opted-in start loads this one already.

#: The variable; :data:`RUN_ID_HEX` lowercase hex digits when derived.
RUN_ID = "DERIVE_ENV_RUN_ID"
RUN_ID_HEX = 16
#: The longest run id accepted when set (a UUID is 36 characters).
RUN_ID_MAX = 64
_RUN_ID_EXPECTED = (f"a run id of 1 to {RUN_ID_MAX} characters: letters, digits, '.', '_' or "
                    "'-', the first a letter or digit (safe in file names, shells and URLs). "
                    "Set it to such a value for the whole job, or unset it and derive-env "
                    "derives one")


def run_id_problem(value: str) -> str | None:
    """What a set ``DERIVE_ENV_RUN_ID`` should be (the message's end), ``None`` when fine."""
    ok = (0 < len(value) <= RUN_ID_MAX and value.isascii() and value[0].isalnum()
          and all(c.isalnum() or c in "._-" for c in value))
    return None if ok else _RUN_ID_EXPECTED


def run_id(ctx: Context) -> Contribution:
    """``DERIVE_ENV_RUN_ID`` for every process of this run, scope ``SHARED`` (a set value
    is kept, and the job digest covers it), compared as ``EXACT``.

    In order: a set value, kept; the manager's job identity (``topology.job``: manager, job
    id, step id; ``topology.session_id``) hashed; else, for one
    container and one process, the start's fresh id (``ctx.fresh_run_id``, drawn at the
    edge); else, for a job of more nodes or processes whose manager names no job (MPICH's
    ``mpiexec``), the job's shape hashed, which every process shares. A hash is the first
    :data:`RUN_ID_HEX` hex digits of BLAKE2b (personalised ``derive-env.run``) of the facts
    joined by NUL.

    :returns: the variable, or only a note when nothing identifies the start and no fresh
        id was given (``--env-file``, the pure API).
    :raises TopologyError: a set ``DERIVE_ENV_RUN_ID`` that :func:`run_id_problem` refuses.
    """
    user = ctx.environ.get(RUN_ID, "")
    if user and run_id_problem(user):
        raise TopologyError(describe(RUN_ID, user, _RUN_ID_EXPECTED))
    topo = ctx.topology
    if topo.job is not None or topo.session_id is not None:
        manager, job, step = topo.job or ("", "", "")
        session = topo.session_id or ""
        # Not the master's host: a Kubeflow master pod is given localhost, its workers the
        # master's name; every process must hash the same facts.
        value = _hashed(("job", manager, job, step, session))
        said = " ".join(x for x in (manager, job, step) if x) + (
            f", id {session}" if session and session != job else "")
        source = (f"hash of the job identity {topo.source} states "
                  f"({printable(shorten(said.lstrip(', '), 200))}): the same in every "
                  "process of the job")
    elif not topo.multi_node and (topo.processes is None or topo.processes.world_size == 1):
        if ctx.fresh_run_id is None and not user:
            return Contribution(notes=[
                f"{RUN_ID} not set: no manager states a job here, and a fresh id is drawn only "
                "when derive-env starts in the container itself (not for --env-file)"])
        value = ctx.fresh_run_id or user
        source = ("a fresh random id of this start (no manager states a job): every process "
                  "the command starts inherits it")
    else:
        value, source = _shape_id(ctx)
    return Contribution([variable("derive-env")(RUN_ID, value, source, scope=SHARED,
                                                compare=EXACT)])


def _shape_id(ctx: Context) -> tuple[str, str]:
    """The run id of a job whose manager names no job: the hash of what every process of
    it shares (hosts, master, ports, sizes; a set ``MASTER_ADDR``/``MASTER_PORT``), and its
    provenance."""
    topo, environ = ctx.topology, ctx.environ
    layout = topo.processes
    facts = ("shape", topo.source, ",".join(n.host.lower() for n in topo.nodes),
             str(topo.num_nodes), str(topo.master_addr), str(topo.master_port),
             ",".join(map(str, topo.reserved_ports)),
             str(layout.world_size if layout else ""),
             ",".join(map(str, layout.tasks_per_node or () if layout else ())),
             environ.get("MASTER_ADDR", ""), environ.get("MASTER_PORT", ""))
    return _hashed(facts), (
        f"hash of the job's shape (the hosts, master, ports and sizes {topo.source} states): "
        f"{topo.source} names no job, so two runs of this shape get the same id; set {RUN_ID} "
        "for the whole job to tell them apart")


def _hashed(facts: tuple[str, ...]) -> str:
    """:data:`RUN_ID_HEX` hex digits of BLAKE2b over ``facts`` joined by NUL (UTF-8, the
    undecodable bytes of an id as they were)."""
    try:  # the C module alone: hashlib would load OpenSSL on every start (docs/performance.md)
        from _blake2 import blake2b
    except ImportError:  # an interpreter built without it
        from hashlib import blake2b
    data = "\0".join(facts).encode("utf-8", "surrogateescape")
    return blake2b(data, digest_size=RUN_ID_HEX // 2, person=b"derive-env.run").hexdigest()
