"""Sources: one module per cluster manager, each turning its variables into a topology.

:data:`SOURCES` is the lookup table, in priority order; each module has
``detect(environ) -> bool`` (cheap, no validation) and ``topology(environ) ->
ClusterTopology``. Adding a cluster manager is one module plus one line here.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import import_module

from derive_env.topology import ClusterTopology, single_node_topology

#: (name, module) in priority order: the first whose ``detect`` is true is used.
SOURCES: tuple[tuple[str, str], ...] = (
    ("backendai", "derive_env.sources.backendai"),
)


def topology_from(environ: Mapping[str, str]) -> ClusterTopology:
    """The topology of the first source that detects its variables in ``environ``.

    With none detected, a single-container topology (contract section 5: no cluster
    variables at all is a single-container session).

    :raises TopologyError: the detected source's variables are bad.
    """
    for _name, module_name in SOURCES:
        module = import_module(module_name)
        if module.detect(environ):
            return module.topology(environ)
    return single_node_topology()
