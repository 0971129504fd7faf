"""derive-env: derive distributed-training variables from a cluster manager's, then exec.

Public API (imported lazily, so that ``import derive_env`` stays cheap on the container
start path): :func:`derive`, :class:`ClusterTopology`, :class:`DerivedVariable`,
:class:`ImagePolicy`, :class:`Derivation`, the errors, ``__version__``.
"""

from __future__ import annotations

# Not from typing: importing typing costs ~0.3x of a bare interpreter start, and this
# package is imported on the not-opted-in ENTRYPOINT path (docs/performance.md).
TYPE_CHECKING = False

__version__ = "0.2.1"

_LAZY = {
    "derive": "derive_env.pipeline",
    "Derivation": "derive_env.pipeline",
    "ClusterTopology": "derive_env.topology",
    "Node": "derive_env.topology",
    "DerivedVariable": "derive_env.frameworks.context",
    "ImagePolicy": "derive_env.policy",
    "DeriveEnvError": "derive_env.errors",
    "TopologyError": "derive_env.errors",
    "LabelError": "derive_env.errors",
}

__all__ = [
    "ClusterTopology",
    "Derivation",
    "DeriveEnvError",
    "DerivedVariable",
    "ImagePolicy",
    "LabelError",
    "Node",
    "TopologyError",
    "__version__",
    "derive",
]

if TYPE_CHECKING:
    from typing import Any

    from derive_env.errors import DeriveEnvError, LabelError, TopologyError
    from derive_env.frameworks.context import DerivedVariable
    from derive_env.pipeline import Derivation, derive
    from derive_env.policy import ImagePolicy
    from derive_env.topology import ClusterTopology, Node


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from importlib import import_module

        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'derive_env' has no attribute {name!r}")
