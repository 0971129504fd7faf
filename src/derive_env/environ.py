"""Merge: derived variables against the environment they will be added to.

Rule (contract section 6): a variable the environment already holds with a non-empty value
is kept, and reported as kept (with the value the shim would have set). An empty value
counts as unset, as torch's ``env://`` rendezvous treats it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from derive_env.frameworks import DerivedVariable


def merge(environ: Mapping[str, str], derived: Sequence[DerivedVariable]) -> list[DerivedVariable]:
    """Mark each derived variable ``kept`` when ``environ`` already has it (non-empty).

    :returns: the variables in the same order; a kept one carries the user's value as
        ``value`` and the shim's as ``derived``.
    """
    merged = []
    for var in derived:
        user = environ.get(var.name, "")
        if user:
            var = var._replace(kept=True, value=user, derived=var.value)
        merged.append(var)
    return merged


def changes(variables: Sequence[DerivedVariable]) -> dict[str, str]:
    """The variables the exec adds or changes: the derived ones that were not kept."""
    return {v.name: v.value for v in variables if not v.kept}
