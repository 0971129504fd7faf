"""The port policy for managers that give no port: deterministic per (manager, job, step).

Rules (sources.md 3.1 "Port" and 3.13.5):

1. Ports the manager reserved for the step come first: Slurm's ``SLURM_STEP_RESV_PORTS``
   (srun ``--resv-ports``; ``src/common/env.c`` ``env_array_for_step``) names ports no other
   step on the node holds (``src/common/port_mgr.c``). Framework ``i`` of :func:`port_order`
   gets the ``i``-th reserved port.
2. The other frameworks get ports derived, without any communication, from data every node
   of the job has (the manager's name, the job id, the step id), so every task computes the
   same ports, and two steps of one job running at once get different ones::

       seed   = zlib.crc32(f"{manager}/{job_id}/{step_id}".encode("utf-8"))   # CRC-32/IEEE
       low    = ephemeral_high + 1             # first port above the ephemeral range
       size   = 65535 - low + 1                # the window low..65535
       port_k = low + (seed + k) % size,  k = 0, 1, 2, ...

   taking, in order of ``k``, the ports that are neither in ``net.ipv4.ip_local_reserved_ports``
   nor already given (rule 1), for PyTorch, TensorFlow, JAX in :func:`port_order`.
   With the Linux default range 32768-60999 the window is 61000-65535 (4536 ports).
   Consecutive ports are deliberate: two jobs' blocks of three overlap for 5 of the
   ``size`` seeds, independent draws would for 9.
3. Why above the ephemeral range: the kernel picks the source port of every outgoing
   connection from ``net.ipv4.ip_local_port_range``; a listening port inside it can be taken
   by any connection first (EADDRINUSE: NVIDIA/enroot#243, EleutherAI/gpt-neox#768).
4. A node whose ephemeral range leaves fewer than :data:`MIN_WINDOW` ports above it is an
   error, not a fallback below the range (ports below it belong to services, and choosing a
   different window than the other nodes would split the job silently). The fix is for the
   operator: reserve ports (``--resv-ports``), set the ports by label or variable, or lower
   the range's upper bound.

Image labels and user-set variables (``MASTER_PORT``, the port labels) still win over both
rules: the caller applies this only where neither is set. The range is per network
namespace and node: every node of a job must have the same ``ip_local_port_range`` and
``ip_local_reserved_ports`` (the default in a fresh container namespace), else the nodes
derive different ports.

Wired in by :func:`derive_env.frameworks.context.job_ports_of` for every source that reports a job
(Slurm, Open MPI, torchrun, Kubeflow) or reserved ports; docs/ports.md is the user's page.

The pure function is :func:`job_ports`; the command line reads the two ``/proc/sys`` files
(:func:`derive_env.cli.gather_facts`), :func:`parse_port_range` and
:func:`parse_reserved_ports` parse them.
"""

from __future__ import annotations

import zlib

from derive_env.frameworks import FRAMEWORKS

#: Linux's default ``net.ipv4.ip_local_port_range`` (Documentation/networking/ip-sysctl.rst).
DEFAULT_EPHEMERAL_RANGE = (32768, 60999)
#: Fewest ports the window above the ephemeral range must hold.
MIN_WINDOW = 256
_HIGHEST_PORT = 65535


def port_seed(manager: str, job_id: str, step_id: str) -> int:
    """The seed of rule 2: CRC-32 (IEEE, ``zlib.crc32``) of ``manager/job_id/step_id``.

    Inputs: the manager's name (e.g. ``"slurm"``), its job id and step id as the manager
    writes them (``SLURM_JOB_ID``, ``SLURM_STEP_ID``). Output: an integer 0 to 2**32 - 1,
    the same in every process (unlike ``hash()``, salted per process).
    """
    return zlib.crc32(f"{manager}/{job_id}/{step_id}".encode())


def port_order() -> tuple[str, ...]:
    """The frameworks that have a port, in :data:`derive_env.frameworks.FRAMEWORKS` order
    (``pytorch``, ``tensorflow``, ``jax``): the order :func:`job_ports` returns their ports."""
    return tuple(line.name for line in FRAMEWORKS if line.port_label is not None)


def job_ports(
    manager: str,
    job_id: str,
    step_id: str,
    ephemeral: tuple[int, int] = DEFAULT_EPHEMERAL_RANGE,
    reserved: frozenset[int] = frozenset(),
    granted: tuple[int, ...] = (),
) -> tuple[int, ...]:
    """The TCP ports of PyTorch, TensorFlow and JAX (:func:`port_order`) for one step.

    Inputs: ``manager``, ``job_id``, ``step_id`` as in :func:`port_seed`; ``ephemeral``, this
    node's ``(low, high)`` ephemeral port range (:func:`parse_port_range`); ``reserved``,
    its ``ip_local_reserved_ports`` (:func:`parse_reserved_ports`); ``granted``, ports the
    manager reserved for the step, in order (``parse_resv_ports(SLURM_STEP_RESV_PORTS)``).
    Output: one distinct port 1-65535 per framework, by the rules of this module's docstring.

    Raises ValueError, whose text completes "expected ...", when the ephemeral range is not
    ``low <= high`` within 1-65535 or leaves fewer than :data:`MIN_WINDOW` ports above it
    (only when a port must be derived).
    """
    wanted = len(port_order())
    ports = list(dict.fromkeys(granted))[:wanted]
    if len(ports) < wanted:
        low, high = ephemeral
        if not 1 <= low <= high <= _HIGHEST_PORT:
            raise ValueError(
                f"an ephemeral port range 'low high' with 1 <= low <= high <= 65535, "
                f"not {low}-{high}"
            )
        start = high + 1
        size = _HIGHEST_PORT - start + 1
        if size < MIN_WINDOW:
            raise ValueError(
                f"at least {MIN_WINDOW} ports above this node's ephemeral port range "
                f"{low}-{high} (net.ipv4.ip_local_port_range), not {max(size, 0)}: lower "
                "its upper bound, reserve ports for the step (srun --resv-ports), or set "
                "the ports by label or variable"
            )
        seed = port_seed(manager, job_id, step_id)
        for k in range(size):
            port = start + (seed + k) % size
            if port not in reserved and port not in ports:
                ports.append(port)
                if len(ports) == wanted:
                    break
        else:
            raise ValueError(
                f"{wanted} ports in {start}-65535 outside "
                "net.ipv4.ip_local_reserved_ports, not all of them reserved"
            )
    return tuple(ports)


def parse_port_range(text: str) -> tuple[int, int]:
    """Parse ``ip_local_port_range`` content (``"32768\\t60999\\n"``) -> ``(32768, 60999)``.

    Raises ValueError, whose text completes "expected ...", unless it is two integers.
    """
    fields = text.split()
    if len(fields) != 2 or not all(field.isascii() and field.isdigit() for field in fields):
        raise ValueError(f"two port numbers 'low high', not {text!r}")
    return int(fields[0]), int(fields[1])


def parse_reserved_ports(text: str) -> frozenset[int]:
    """Parse ``ip_local_reserved_ports`` content (``"8080,9000-9002\\n"``, may be empty).

    Output: the set of ports. Raises ValueError, whose text completes "expected ...", for
    anything but comma-separated ports and ``lo-hi`` ranges (the kernel's
    ``proc_do_large_bitmap`` format).
    """
    ports: set[int] = set()
    for item in text.strip().split(","):
        if not item:
            continue
        lo, dash, hi = item.partition("-")
        if not dash:
            hi = lo
        if not (lo.isascii() and lo.isdigit() and hi.isascii() and hi.isdigit()):
            raise ValueError(f"ports and port ranges separated by commas, not {item!r}")
        ports.update(range(int(lo), int(hi) + 1))
    return frozenset(ports)

