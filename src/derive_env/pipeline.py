"""The pipeline, pure: environment + labels (+ host facts) -> derived variables.

environment -> source -> topology; labels -> policy; (topology, policy) -> frameworks ->
merge. Nothing here reads the real environment, a file, or writes ``os.environ``; the
command line (app.py) reads inputs and renders or execs the result.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from importlib import import_module
from typing import NamedTuple

from derive_env.frameworks import FRAMEWORKS
from derive_env.frameworks.context import Context, DerivedVariable, HostFacts
from derive_env.labels import is_opted_in
from derive_env.merge import changes, check_user_values, merge
from derive_env.policy import ImagePolicy
from derive_env.sources import topology_from
from derive_env.topology import ClusterTopology


class Derivation(NamedTuple):
    """The result for an opted-in image (a named tuple: cheap to define at startup).

    :ivar variables: every derived variable, merged (kept ones flagged), in framework order.
    :ivar notes: lines for ``--explain`` (tables, what was not set and why).
    :ivar warnings: things an operator should fix that do not stop the command.
    """

    topology: ClusterTopology
    policy: ImagePolicy
    variables: tuple[DerivedVariable, ...]
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    def changes(self) -> dict[str, str]:
        """The variables the exec adds or changes (not the kept ones)."""
        return changes(self.variables)


def derive(
    environ: Mapping[str, str],
    labels: Mapping[str, str],
    facts: HostFacts | Callable[[], HostFacts] | None = None,
    source: str | None = None,
    files: Callable[[Sequence[str]], Mapping[str, str | None]] | None = None,
) -> Derivation | None:
    """Derive the framework variables of one container.

    :param environ: the container's environment (cluster manager's and user's variables).
    :param labels: the image's labels. Keys under other prefixes are ignored, except near
        misses of a derive-env label (``AI.Backend.Distributed.frameworks``,
        ``ai.backend.frameworks``; :func:`derive_env.labels.near_miss`), which are errors.
    :param facts: host facts, or a function that reads them, called at most once and only
        when a rule needs them (the ``socket-ifname`` label; the ``baimulti0`` default of a
        session of more than one node). ``None``: not this container (``--env-file``).
    :param source: ``--source`` (a source name, ``auto``, ``none``); ``None``: the
        ``DERIVE_ENV_SOURCE`` variable, else auto-detection.
    :param files: reads the files a source needs (``SLURM_HOSTFILE``): paths -> contents
        (``None`` for one that cannot be read); ``None``: no file can be read.
    :returns: ``None`` when the image did not opt in (no ``frameworks`` label).
    :raises LabelError: bad labels, near misses included (exit 4).
    :raises TopologyError: bad or inconsistent cluster variables, or a malformed user-set
        ``MASTER_ADDR`` / ``MASTER_PORT`` (exit 3); another launcher's multi-process
        topology (:func:`derive_env.sources.topology_from`); a user-set value that
        contradicts the derived one (:func:`derive_env.merge.check_user_values`).
    """
    if not is_opted_in(labels):
        return None
    policy = ImagePolicy.from_labels(labels)  # reads the distributed ones, checks the rest
    topology = topology_from(environ, source, files)
    ctx = Context(topology=topology, policy=policy, environ=environ, host=facts)
    variables: list[DerivedVariable] = []
    checks: list[DerivedVariable] = []
    notes: list[str] = []
    warnings: list[str] = list(topology.warnings)  # the source's first: they concern the input
    for line in FRAMEWORKS:
        if not (line.always or line.name in policy.frameworks):
            continue
        part = import_module(line.module).derive(ctx)
        variables += part.variables
        checks += part.checks
        notes += part.notes
        warnings += part.warnings
    # A launcher's own variables (torchrun's RANK...) are its authority: never checked
    # against a rule for another layout (torchrun mode's one process per node).
    checks = [c for c in checks if c.name not in topology.preset]
    merged = merge(environ, variables, checks)
    warnings += check_user_values(merged, topology)
    return Derivation(
        topology=topology, policy=policy, variables=tuple(merged),
        notes=tuple(notes), warnings=tuple(warnings),
    )
