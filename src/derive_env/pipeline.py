"""The pipeline, pure: environment + labels (+ host facts) -> derived variables.

environment -> source -> topology; labels -> policy; (topology, policy) -> frameworks ->
merge. Nothing here reads the real environment, a file, or writes ``os.environ``; the
command line (cli/) reads inputs and renders or execs the result.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import import_module
from typing import NamedTuple

from derive_env.frameworks import FRAMEWORKS
from derive_env.frameworks.context import (
    SHARED,
    Context,
    Contribution,
    DerivedVariable,
    HostFacts,
    variable,
)
from derive_env.labels import is_opted_in
from derive_env.merge import changes, check_user_values, merge, run_id
from derive_env.policy import ImagePolicy
from derive_env.sources.compose import topology_of
from derive_env.topology import ClusterTopology, Inputs
from derive_env.validation import count_of


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


def derive(environ: Mapping[str, str], labels: Mapping[str, str],
           facts: HostFacts | Callable[[], HostFacts] | None = None,
           **given: object) -> Derivation | None:
    """Derive the framework variables of one container: the public API's form of
    :func:`derive_from`, the :class:`~derive_env.topology.Inputs` fields by name.

    :param environ: the container's environment (cluster manager's and user's variables).
    :param labels: the image's labels. Keys under other prefixes are ignored, except near
        misses of a derive-env label (``AI.Backend.Distributed.frameworks``,
        ``ai.backend.frameworks``; :func:`derive_env.labels.near_miss`), which are errors.
    :param facts: host facts, or a function that reads them, called at most once and only
        when a rule needs them (the ``socket-ifname`` label; the ``baimulti0`` default of a
        session of more than one node). ``None``: not this container (``--env-file``).
    :param given: the other fields by keyword: ``source`` (``--source``: a source name,
        ``auto``, ``none``; the ``choice`` field; unset: the ``DERIVE_ENV_SOURCE`` variable,
        else auto-detection); ``files`` (reads the files a source needs, ``SLURM_HOSTFILE``:
        paths -> contents, ``None`` for one that cannot be read; unset: none can be read);
        ``fresh_run_id`` (a random id drawn at the edge for this start, the run id when no
        manager identifies the job: :func:`derive_env.merge.run_id`); ``command``. The
        field's own name ``choice`` is taken for ``source`` too.
    :returns: and :raises: as :func:`derive_from`; ``TypeError`` for another keyword, or for
        both ``source`` and ``choice``.
    """
    if "source" in given and "choice" in given:
        raise TypeError("derive() got both source= and choice= (one field): give source=")
    choice = given.pop("source", given.pop("choice", None))
    return derive_from(Inputs(environ, labels, facts=facts, choice=choice, **given))


def derive_from(inputs: Inputs) -> Derivation | None:
    """Derive the framework variables of one container from what the edge read.

    :returns: ``None`` when the image did not opt in (no ``frameworks`` label).
    :raises LabelError: bad labels, near misses included (exit 4).
    :raises TopologyError: bad or inconsistent cluster variables, or a malformed user-set
        ``MASTER_ADDR`` / ``MASTER_PORT`` (exit 3); another launcher's multi-process
        topology (:func:`derive_env.sources.compose.topology_of`); a user-set value that
        contradicts the derived one (:func:`derive_env.merge.check_user_values`).
    """
    environ, labels = inputs.environ, inputs.labels
    if not is_opted_in(labels):
        return None
    policy = ImagePolicy.from_labels(labels)  # reads the distributed ones, checks the rest
    topology = topology_of(inputs)
    ctx = Context(topology, policy, inputs)
    part = contributions(ctx)
    merged = merge(environ, part.variables, part.checks)
    # the source's warnings first: they concern the input
    warnings = [*topology.warnings, *part.warnings, *ctx.warnings,  # ctx's: the ports, once
                *check_user_values(merged, topology)]
    return Derivation(
        topology=topology, policy=policy, variables=tuple(merged),
        notes=tuple(part.notes), warnings=tuple(warnings),
    )


def contributions(ctx: Context) -> Contribution:
    """Every framework's contribution for ``ctx`` (the policy's frameworks and those that
    always run, in :data:`~derive_env.frameworks.FRAMEWORKS` order), joined, then the run id
    (:func:`derive_env.merge.run_id`); the checks
    without the variables a launcher already set (``topology.preset``: torchrun's ``RANK``
    ... are its authority, never checked against a rule for another layout).

    :raises DeriveEnvError: as each framework's ``derive`` (:func:`derive`).
    """
    out = Contribution()
    for line in FRAMEWORKS:
        if line.always or line.name in ctx.policy.frameworks:
            part = import_module(line.module).derive(ctx)
            out.variables += part.variables
            out.checks += part.checks
            out.notes += part.notes
            out.warnings += part.warnings
    own = run_id(ctx)  # derive-env's own variable, after every framework's
    out.variables += own.variables
    out.notes += own.notes
    out.checks = [c for c in out.checks if c.name not in ctx.topology.preset]
    return out


def host_list(inputs: Inputs) -> tuple[ClusterTopology, int | None, bool]:
    """What the host formats print (:mod:`derive_env.render.hostfiles`): the session's nodes
    and the processes per node the image states.

    Needs only the topology, so it works for an image that did not opt in too (it sets no
    variable); then the labels are not read for N. An opted-in image's labels are validated
    as on every start, near misses included. ``on-error=warn`` does not apply: there is no
    command to run unchanged, and an empty host list would start a job on no node.

    :param inputs: the environment, the labels (stray labels of an image that did not opt in
        must already have been checked: the command line does), ``--source`` and the file
        reader, as for :func:`derive_from`; no host facts are read.
    :returns: ``(topology, nproc, opted_in)``: the topology, with the host list of a batch
        script's allocation too (``hosts_only``, :func:`derive_env.sources.compose.topology_of`);
        ``nproc``, the merged ``PET_NPROC_PER_NODE`` when it is an integer >= 1 (a user-set
        value wins over the label, so torchrun starts that many), else the label
        ``nproc-per-node``, ``None`` when neither or not opted in; whether the image opted in.
    :raises LabelError: bad labels (exit 4).
    :raises TopologyError: bad cluster variables (exit 3).
    """
    environ, labels = inputs.environ, inputs.labels
    opted_in = is_opted_in(labels)
    nproc = None
    if opted_in:
        # All labels go to ImagePolicy: it reports near misses (ai.backend.distibuted....) as
        # every other path does, instead of silently dropping them.
        nproc = _nproc_per_node(environ, ImagePolicy.from_labels(labels).nproc_per_node)
    return topology_of(inputs, hosts_only=True), nproc, opted_in


def _nproc_per_node(environ: Mapping[str, str], label: int | None) -> int | None:
    """The label's ``PET_NPROC_PER_NODE`` merged with the environment, as :func:`derive`
    merges it; an integer >= 1, else the label (torchrun's words ``auto``, ``gpu`` say no
    number)."""
    # From the label alone (empty without it: then only a user-set value counts); the GPU
    # count is not derived here: a launcher's own counts per node come first (render_hosts).
    derived = variable("pytorch")("PET_NPROC_PER_NODE", "" if label is None else label,
                                  "label nproc-per-node", scope=SHARED)
    (merged,) = merge(environ, [derived])
    return count_of(merged.value) or label
