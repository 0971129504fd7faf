"""The port policy: one window on every node, and the ports of one job clear of each other.

Rules (docs/behaviour.md section 10; docs/sources/README.md; docs/ports.md is the user's
page):

1. Ports the manager reserved for the step come first: Slurm's ``SLURM_STEP_RESV_PORTS``
   (srun ``--resv-ports``; ``src/common/env.c`` ``env_array_for_step``) names ports no other
   step on the node holds (``src/common/port_mgr.c``). Framework ``i`` of :func:`port_order`
   gets the ``i``-th reserved port.
2. The other frameworks get ports derived, without any communication, from data every node
   of the job has (the manager's name, the job id, the step id), into one fixed window,
   :data:`WINDOW` = 61000-65535 (4536 ports), the same on every node whatever its sysctls::

       seed   = zlib.crc32(f"{manager}/{job_id}/{step_id}".encode("utf-8"))   # CRC-32/IEEE
       port_k = 61000 + (seed + k) % 4536,  k = 0, 1, 2, ...

   taking, in order of ``k``, the ports not already given (rule 1), for PyTorch,
   TensorFlow, JAX in :func:`port_order`. Consecutive ports are deliberate: two jobs'
   blocks of three overlap for 5 of the 4536 seeds, independent draws would for 9.
3. Why that window: it lies above Linux's default ephemeral range 32768-60999, from which
   the kernel picks the source port of every outgoing connection; a listening port inside
   it can be taken by any connection first (EADDRINUSE: NVIDIA/enroot#243,
   EleutherAI/gpt-neox#768). It no longer follows each node's ``ip_local_port_range``:
   nodes whose sysctls differ would derive different ports and wait for each other
   forever. A node whose range overlaps the window gets a warning instead
   (:func:`overlap_warning`): a connection of its own may hold the port, and the bind then
   fails with a clear error (address already in use) rather than a hang.
4. The ports of one job never collide (:func:`place`): the master port (PyTorch's
   rendezvous or a launcher's store), TensorFlow's block (one port per process of a node)
   and the JAX coordinator all listen on rank 0's host. Ports someone chose (a label, a
   user-set ``MASTER_PORT``, the manager's port) stay; two of them on one port is an error
   naming both. A derived port (reserved, hashed or a default) on a chosen or earlier one
   moves up to the next free port (within the window for a hashed one, wrapping at 65535):
   the same move on every node, as it depends only on values every node shares.

Image labels and user-set variables (``MASTER_PORT``, the port labels) still win over rules
1 and 2: the caller applies them only where neither is set.

The pure functions are :func:`job_ports`, :func:`place` and :func:`overlap_warning`; the
command line reads ``/proc/sys/net/ipv4/ip_local_port_range`` only when a port was hashed
(:func:`derive_env.cli.gather_facts`) and :func:`parse_port_range` parses it.
"""

from __future__ import annotations

import zlib
from collections import namedtuple

from derive_env.frameworks import FRAMEWORKS

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing
if TYPE_CHECKING:
    from collections.abc import Iterator

    from derive_env.topology import ClusterTopology

#: The window of derived ports, the same on every node (docs/behaviour.md section 10).
WINDOW = (61000, 65535)
_SIZE = WINDOW[1] - WINDOW[0] + 1


Claim = namedtuple("Claim", "framework port source kind serves width", defaults=(1,))
Claim.__doc__ = """One framework's port(s) on the job's hosts, before :func:`place` clears clashes.

:ivar framework: ``pytorch`` (the master port), ``tensorflow``, ``jax``.
:ivar port: the first TCP port; ``width`` ports from it (TensorFlow: one per process of a
    node), else 1.
:ivar source: its provenance, for messages and ``--explain``.
:ivar kind: ``label`` (a label chose it), ``set`` (a user-set variable or the manager's
    port), ``reserved`` (rule 1), ``hashed`` (rule 2) or ``default``; the first two stay,
    the others move.
:ivar serves: what listens there (the FRAMEWORKS line's ``serves``).
"""


def port_seed(manager: str, job_id: str, step_id: str) -> int:
    """The seed of rule 2: CRC-32 (IEEE, ``zlib.crc32``) of ``manager/job_id/step_id``.

    Inputs: the manager's name (e.g. ``"slurm"``), its job id and step id as the manager
    writes them (``SLURM_JOB_ID``, ``SLURM_STEP_ID``). Output: an integer 0 to 2**32 - 1,
    the same in every process (unlike ``hash()``, salted per process).
    """
    # surrogateescape: an id of undecodable bytes (os.environ's escapes) seeds by its bytes
    return zlib.crc32(f"{manager}/{job_id}/{step_id}".encode("utf-8", "surrogateescape"))


def port_order() -> tuple[str, ...]:
    """The frameworks that have a port, in :data:`derive_env.frameworks.FRAMEWORKS` order
    (``pytorch``, ``tensorflow``, ``jax``): the order :func:`job_ports` returns their ports."""
    return tuple(line.name for line in FRAMEWORKS if line.port_label is not None)


def job_ports(manager: str, job_id: str, step_id: str,
              granted: tuple[int, ...] = ()) -> tuple[int, ...]:
    """The TCP ports of PyTorch, TensorFlow and JAX (:func:`port_order`) for one step.

    Inputs: ``manager``, ``job_id``, ``step_id`` as in :func:`port_seed`; ``granted``, ports
    the manager reserved for the step, in order (``parse_resv_ports(SLURM_STEP_RESV_PORTS)``).
    Output: one distinct port 1-65535 per framework: the granted ones first (rule 1), then
    ports of :data:`WINDOW` (rule 2). No sysctl of the node plays a part.
    """
    wanted = len(port_order())
    ports = list(dict.fromkeys(granted))[:wanted]
    seed = port_seed(manager, job_id, step_id)
    k = 0
    while len(ports) < wanted:  # at most 3 + 3 turns: the window holds 4536 ports
        port = WINDOW[0] + (seed + k) % _SIZE
        k += 1
        if port not in ports:
            ports.append(port)
    return tuple(ports)


def job_ports_of(topology: ClusterTopology) -> dict[str, tuple[int, str, str]] | None:
    """The manager's ports per framework: reserved ones first, then derived.

    Follows :func:`job_ports` (docs/behaviour.md section 10, docs/sources/README.md,
    3.13.5): the step's reserved ports in :data:`~derive_env.frameworks.FRAMEWORKS` order
    (PyTorch, TensorFlow, JAX), the others a deterministic hash of ``(manager, job id,
    step id)`` into 61000-65535, the same on every node. Labels and user-set values win
    over both.

    :returns: framework -> (TCP port, provenance, kind ``reserved`` or ``hashed``);
        ``None`` without reserved ports or job.
    """
    if not topology.reserved_ports and topology.job is None:
        return None
    granted = topology.reserved_ports
    manager, job_id, step_id = topology.job or ("", "", "")
    values = job_ports(manager, job_id, step_id, granted)
    held = " + ".join(topology.inputs.get("ports", ())) or "reserved ports"
    out: dict[str, tuple[int, str, str]] = {}
    for k, (framework, port) in enumerate(zip(port_order(), values, strict=True)):
        if k < len(dict.fromkeys(granted)):
            out[framework] = (port, f"{held}: port {k + 1} reserved for the step", "reserved")
        else:
            out[framework] = (port, (
                f"derived from {job_words(manager, job_id, step_id)} (hash into 61000-65535: "
                "docs/ports.md)"), "hashed")
    return out


#: torchrun's run id when none is given (torch/distributed/run.py, ``--rdzv-id``'s default):
#: it names no job.
_TORCHRUN_NO_RUN_ID = "none"
#: How each platform names what its port is hashed from, in its own words: ``{job}`` and
#: ``{step}`` are the parts of the source's ``job`` (sources/managers/<its module>.py).
#: A manager not here: ``NAME job JOB step STEP`` (Slurm's words).
_WORDS = {
    "sagemaker": "SageMaker training job {job}",
    "kubeflow-trainjob": "the TrainJob of master {job}:{step}",
    "kubeflow-jax": "the TrainJob (JAX) of coordinator {job}, {step} nodes",
    "kubeflow-jaxjob": "the JAXJob of coordinator {job}:{step}",
    "kubeflow-xgboost": "the TrainJob (XGBoost) of tracker {job}:{step}",
    "jobset": "the JobSet of {step} pods, first pod {job}",
    "kubernetes-indexed-job": "the Indexed Job of {step} pods, first pod {job}",
    "lws": "the LeaderWorkerSet group of {step} pods, leader {job}",
    "volcano": "the Volcano Job of {step} pods, first pod {job}",
    "gke-tpu": "the TPU job of {step} (slices x hosts), first host {job}",
    "tf-config": "the TF_CONFIG of {step} tasks, first {job}",
    "vertex": "the Vertex AI custom job of {step} tasks, first {job}",
    "mpi-operator": "the MPIJob of {step} workers, first {job}",
}


def job_words(manager: str, job_id: str, step_id: str) -> str:
    """What a hashed port is derived from, in the platform's words: ``SageMaker training job
    bert-1``, ``the PyTorchJob of master port 23456, 3 nodes``, ``slurm job 10 step 0``,
    ``torchrun step 29500`` (torchrun's default run id ``none`` left out).

    :param manager: / :param job_id: / :param step_id: the topology's ``job``.
    """
    if manager == "kubeflow-pytorchjob":  # kubeflow.py: (port, nodes), elastic (endpoint, nodes)
        where = f"rendezvous {job_id}" if ":" in job_id else f"master port {job_id}"
        return f"the PyTorchJob of {where}, {step_id} nodes"
    if manager == "sagemaker" and not job_id:  # sagemaker.py: SM_* only, or an MPI rank
        return f"the SageMaker job of first host {step_id}"
    words = _WORDS.get(manager)
    if words is not None:
        return words.format(job=job_id, step=step_id)
    if manager == "torchrun" and job_id == _TORCHRUN_NO_RUN_ID:
        job_id = ""  # torchrun's default run id names no job: left out, as --explain's header
    return f"{manager}{f' job {job_id}' if job_id else ''}" + (
        f" step {step_id}" if step_id else "")


def place(claims: list[Claim]) -> dict[str, tuple[int, str]]:
    """The claims' ports clear of each other (rule 4): framework -> (first port, provenance).

    Chosen ports (kind ``label``, ``set``) first, in the order given; then the derived
    ones, single ports before blocks, each moved up to the first port where its block
    holds no port already placed (a hashed port within :data:`WINDOW`, wrapping at 65535).
    A moved port's provenance says so.

    :raises ValueError: two chosen ports hold one port; the text is the whole message and
        ``args[1]`` is ``True`` when both come from labels (a label error, else a topology
        one). Also when a derived block fits nowhere (``args[1]`` ``False``).
    """
    placed: list[Claim] = []
    out: dict[str, tuple[int, str]] = {}
    chosen = [c for c in claims if c.kind in ("label", "set")]
    derived = sorted((c for c in claims if c.kind not in ("label", "set")),
                     key=lambda c: c.width > 1)
    for claim in chosen:
        other = _held(claim.port, claim.width, placed)
        if other is not None:
            raise ValueError(_clash(claim, other), claim.kind == other.kind == "label")
        placed.append(claim)
        out[claim.framework] = (claim.port, claim.source)
    for claim in derived:
        port = next((p for p in _candidates(claim) if _held(p, claim.width, placed) is None),
                    None)
        if port is None:
            raise ValueError(f"{_what(claim)} ({claim.source}): no {claim.width} free "
                             "port(s) clear of the job's other ports; set its label", False)
        source = claim.source
        if port != claim.port:
            taken = ", ".join(_span(c.port, c.width) for c in placed)
            source += (f"; moved from {claim.port} to {port}, clear of the job's other ports "
                       f"({taken})")
        placed.append(claim._replace(port=port))
        out[claim.framework] = (port, source)
    return {c.framework: out[c.framework] for c in claims}


def _held(port: int, width: int, placed: list[Claim]) -> Claim | None:
    """The placed claim whose ports meet ``port .. port + width - 1``, if any."""
    return next((c for c in placed if port < c.port + c.width and c.port < port + width), None)


def _candidates(claim: Claim) -> Iterator[int]:
    """Where a derived claim may go, in order: from its port up (a hashed one within the
    window, wrapping at its end), keeping the block below 65536."""
    if claim.kind == "hashed":
        for k in range(_SIZE):
            port = WINDOW[0] + (claim.port - WINDOW[0] + k) % _SIZE
            if port + claim.width - 1 <= WINDOW[1]:
                yield port
    else:
        yield from range(claim.port, WINDOW[1] - claim.width + 2)


def _span(port: int, width: int) -> str:
    return str(port) if width == 1 else f"{port}-{port + width - 1}"


def _what(claim: Claim) -> str:
    """``the master port 29500``, ``TensorFlow's ports 3000-3001``, ``the JAX coordinator's
    port 1234``."""
    noun = "" if claim.serves.endswith(" port") else " ports" if claim.width > 1 else " port"
    return f"{claim.serves}{noun} {_span(claim.port, claim.width)}"


def _clash(claim: Claim, other: Claim) -> str:
    """Two chosen ports on one port of rank 0's host: both named, and which to change."""
    common = max(claim.port, other.port)
    labels = " or ".join(c.source for c in (claim, other) if c.kind == "label")
    return (f"{_what(claim)} ({claim.source}) and {_what(other)} ({other.source}) both hold "
            f"port {common} on rank 0's host, where only one server can listen: set "
            f"{labels} to another port")


def overlap_warning(text: str | None, hashed: list[int]) -> str | None:
    """The warning of rule 3 for this node, or ``None``.

    :param text: the content of ``/proc/sys/net/ipv4/ip_local_port_range``
        (``"32768\t60999\n"``), ``None`` when unread (then nothing is said).
    :param hashed: the job's ports derived by hash (rule 2), as used.
    :returns: a warning when the node's ephemeral range overlaps :data:`WINDOW` (naming the
        job's hashed ports inside it), or when the file holds no range.
    """
    if text is None or not hashed:
        return None
    try:
        low, high = parse_port_range(text)
    except ValueError as exc:
        return (f"net.ipv4.ip_local_port_range={text.strip()!r}: expected {exc}; cannot tell "
                f"whether this node's ephemeral ports overlap the derived ports "
                f"{WINDOW[0]}-{WINDOW[1]}")
    if high < WINDOW[0] or low > WINDOW[1]:
        return None
    inside = [str(p) for p in sorted(hashed) if max(low, WINDOW[0]) <= p <= min(high, WINDOW[1])]
    held = f", and holds this job's port(s) {', '.join(inside)}" if inside else ""
    return (f"this node's ephemeral port range {low}-{high} (net.ipv4.ip_local_port_range) "
            f"overlaps the window of derived ports {WINDOW[0]}-{WINDOW[1]}{held}: a "
            "connection of this node's own may hold a derived port; the bind then fails "
            "with a clear error (address already in use) rather than a hang. Lower the "
            f"range's upper bound below {WINDOW[0]} on every node, reserve ports for the "
            "step (srun --resv-ports), or set the ports by label or variable")


def parse_port_range(text: str) -> tuple[int, int]:
    """Parse ``ip_local_port_range`` content (``"32768\t60999\n"``) -> ``(32768, 60999)``.

    Raises ValueError, whose text completes "expected ...", unless it is two integers
    ``low <= high`` within 1-65535.
    """
    fields = text.split()
    if len(fields) != 2 or not all(field.isascii() and field.isdigit() for field in fields):
        raise ValueError(f"two port numbers 'low high', not {text.strip()!r}")
    low, high = int(fields[0]), int(fields[1])
    if not 1 <= low <= high <= 65535:
        raise ValueError(f"a range 'low high' with 1 <= low <= high <= 65535, not {low}-{high}")
    return low, high
