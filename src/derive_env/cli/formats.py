"""The dry-run outputs that need more than :func:`derive_env.render.render`: the job digest
(``--format digest|digest-facts``), the host formats (``--format hosts`` and the hostfiles)
and every node's view (``--explain --all-nodes``, and ``--explain`` on an error). Loaded only
by the option that asks for one of them (:mod:`derive_env.cli` imports it lazily), so the
hook's and the ENTRYPOINT's start paths never load it. Each takes the
:class:`~derive_env.topology.Inputs` :mod:`derive_env.cli` read.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from derive_env.pipeline import Derivation
    from derive_env.topology import Inputs


def digest(inputs: Inputs, fmt: str) -> str:
    """``--format digest`` and ``digest-facts`` (docs/behaviour.md section 8): from the
    derivation, or from the topology alone when the image did not opt in. ``on-error=warn``
    does not apply: a node that cannot derive has no digest to agree with."""
    from derive_env.digest import render_digest
    from derive_env.labels import is_opted_in
    from derive_env.pipeline import derive_from
    from derive_env.sources.compose import topology_from

    if not is_opted_in(inputs.labels):
        return render_digest(topology_from(inputs.environ, inputs.choice, inputs.files), None,
                             fmt)
    derivation = derive_from(inputs)
    assert derivation is not None  # opted in
    return render_digest(derivation.topology, derivation, fmt)


def host_list(inputs: Inputs, fmt: str) -> str:
    """``--format hosts`` and the hostfiles: from the topology, whether opted in or not."""
    from derive_env.pipeline import host_list as hosts_of
    from derive_env.render.hostfiles import render_hosts

    topology, nproc, opted_in = hosts_of(inputs)
    return render_hosts(topology, fmt, nproc, opted_in=opted_in)


def picture(inputs: Inputs, own: Derivation | None) -> str:
    """Every node's view (:func:`derive_env.whole_job.job_view`, ``own``: this node's
    derivation, if any) rendered for a person (:mod:`derive_env.render.all_nodes`), for
    ``--explain --all-nodes`` or ``--explain`` on an error; ``""`` when not even a topology
    can be built (then the error says why)."""
    from derive_env.errors import DeriveEnvError
    from derive_env.render.all_nodes import all_nodes
    from derive_env.whole_job import job_view

    try:
        view = job_view(inputs._replace(facts=None), own)
    except DeriveEnvError:
        return ""
    return all_nodes(view)
