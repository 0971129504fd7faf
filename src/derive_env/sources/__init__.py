"""Sources: one module per cluster manager, each turning its variables into a topology.

:data:`SOURCES` is the lookup table, in priority order; each module has
``detect(environ) -> bool`` (cheap, no validation) and ``topology(environ) ->
ClusterTopology``. Adding a cluster manager is one module plus one line here.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import import_module

from derive_env.errors import TopologyError, describe
from derive_env.topology import ClusterTopology, single_node_topology

#: Variables through which another launcher (torchrun, Kubeflow, MPI wrappers...) states a
#: multi-node or multi-process topology, with the value a single container has.
_SINGLE_VALUES = {"WORLD_SIZE": 1, "RANK": 0, "NODE_RANK": 0, "PET_NNODES": 1,
                  "PET_NODE_RANK": 0, "GROUP_RANK": 0}


def _single(value: str, single: int) -> bool:
    """Whether ``value`` states the single-container value (``01``, torchrun's ``1:1`` too)."""
    parts = value.split(":")
    return len(parts) <= 2 and all(p.strip().isascii() and p.strip().isdigit()
                                   and int(p) == single for p in parts)


def check_single_container(environ: Mapping[str, str]) -> None:
    """Refuse a single-container topology that another launcher's variables contradict.

    Used when no cluster manager stated the nodes (no ``BACKENDAI_CLUSTER_*``): then
    ``WORLD_SIZE=4`` or ``RANK=2`` come from a launcher derive-env has no source for, and
    describing one container would contradict it. Nothing is guessed.

    :raises TopologyError: naming the first contradicting variable.
    """
    for name, single in _SINGLE_VALUES.items():
        value = environ.get(name, "")
        if value and not _single(value, single):
            raise TopologyError(describe(
                name, value,
                f"{single} or unset: no cluster manager stated the nodes of this session "
                "(no BACKENDAI_CLUSTER_* variables), so it is a single-container session, but "
                "another launcher set a larger topology. Run the command without derive-env "
                "for that launcher, or give the container its cluster manager's variables",
            ))


#: (name, module) in priority order: the first whose ``detect`` is true is used.
SOURCES: tuple[tuple[str, str], ...] = (
    ("backendai", "derive_env.sources.backendai"),
)


def topology_from(environ: Mapping[str, str]) -> ClusterTopology:
    """The topology of the first source that detects its variables in ``environ``.

    With none detected, a single-container topology (contract section 5: no cluster
    variables at all is a single-container session).

    :raises TopologyError: the detected source's variables are bad; or no source was
        detected while the environment states another topology (``WORLD_SIZE=4``,
        ``RANK=2`` ... from a launcher derive-env has no source for): describing a single
        container would contradict it, and nothing is guessed.
    """
    topology = single_node_topology()
    for _name, module_name in SOURCES:
        module = import_module(module_name)
        if module.detect(environ):
            topology = module.topology(environ)
            break
    if "nodes" not in topology.inputs:  # no source stated the nodes
        check_single_container(environ)
    return topology
