"""The dry-run outputs that need more than :func:`derive_env.render.render`: the job digest
(``--format digest|digest-facts``), the host formats (``--format hosts`` and the hostfiles)
and every node's view (``--explain --all-nodes``, and ``--explain`` on an error). Loaded only
by the option that asks for one of them (:mod:`derive_env.cli` imports it lazily), so the
hook's and the ENTRYPOINT's start paths never load it.
"""

from __future__ import annotations

from collections.abc import Mapping

from derive_env import cli as edge
from derive_env.cli import gather_facts
from derive_env.labels import PREFIX, is_opted_in


def digest(environ: Mapping[str, str], labels: Mapping[str, str], fmt: str,
           source: str | None, files, host_facts: bool) -> str:
    """``--format digest`` and ``digest-facts`` (contract 8): from the derivation, or from
    the topology alone when the image did not opt in. ``on-error=warn`` does not apply: a
    node that cannot derive has no digest to agree with."""
    from derive_env.digest import render_digest
    from derive_env.pipeline import derive
    from derive_env.sources.compose import topology_from

    if not is_opted_in(labels):
        return render_digest(topology_from(environ, source, files), None, fmt)
    full = PREFIX + "socket-ifname" in labels
    derivation = derive(environ, labels, (lambda: gather_facts(full)) if host_facts else None,
                        source, files, fresh_run_id=edge.new_run_id() if host_facts else None)
    assert derivation is not None  # opted in
    return render_digest(derivation.topology, derivation, fmt)


def host_list(environ: Mapping[str, str], labels: Mapping[str, str], fmt: str,
              source: str | None, files) -> str:
    """``--format hosts`` and the hostfiles: from the topology, whether opted in or not."""
    from derive_env.pipeline import host_list as hosts_of
    from derive_env.render.hostfiles import render_hosts

    topology, nproc, opted_in = hosts_of(environ, labels, source, files)
    return render_hosts(topology, fmt, nproc, opted_in=opted_in)


def picture(environ: Mapping[str, str], labels: Mapping[str, str], source: str | None,
            files, own) -> str:
    """Every node's view, for ``--explain --all-nodes`` or ``--explain`` on an error
    (:func:`derive_env.whole_job.picture`; ``own``: this node's derivation, if any)."""
    from derive_env.whole_job import picture as whole_job

    return whole_job(environ, labels, source, files, own)
