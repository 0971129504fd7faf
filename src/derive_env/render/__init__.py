"""Render a derivation for ``--dry-run``: the format names and the variable formats.

Only derived variables are ever printed (the input environment can hold access keys).
The machine formats (env, json, toml, shell) print exactly the variables the exec would add
or change. The host formats (:data:`HOST_FORMATS`) print the session's nodes for a launcher
instead; they need the topology, not the derivation, and are printed by
:func:`derive_env.render.hostfiles.render_hosts`. The digest formats (:data:`DIGEST_FORMATS`)
print the job's digest or the facts it covers (:func:`derive_env.digest.render_digest`).
``--explain`` is
:func:`derive_env.render.explain.explain`.

This module is the one the hook's fast dry run (``derive-env --dry-run --format shell``)
and click's ``--format`` choice read: it holds the names as plain data and imports neither
the host formats nor the explanation, which only the option that needs them imports. A new
format: its name here, its renderer in :func:`render` (or in a module of this package).
"""

from __future__ import annotations

import json

# Not from typing, and the pipeline (pydantic) only for type checkers: an image that did not
# opt in renders through here without importing pydantic (docs/performance.md).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from derive_env.pipeline import Derivation

__all__ = ["DIGEST_FORMATS", "FORMATS", "HOST_FORMATS", "render"]

#: The host-list formats of ``--format`` (:mod:`derive_env.render.hostfiles`); the names are
#: fixed: launchers' job scripts rely on them.
HOST_FORMATS: tuple[str, ...] = (
    "hosts", "openmpi-hostfile", "mpich-hostfile", "deepspeed-hostfile", "horovod-hosts",
)
#: The job digest's formats (:mod:`derive_env.digest`, docs/behaviour.md section 8): one line
#: ``<digest> <node_rank> <host>``, and the facts it covers; names fixed (on-every-node).
DIGEST_FORMATS: tuple[str, ...] = ("digest", "digest-facts")
#: Every ``--format`` choice: the variable formats (``env``, the default, first), then the
#: host formats, then the digest's.
FORMATS: tuple[str, ...] = ("env", "json", "toml", "shell", *HOST_FORMATS, *DIGEST_FORMATS)


def render(derivation: Derivation | None, fmt: str) -> str:
    """The variables the exec would add or change, in ``fmt``.

    * ``env``: ``KEY=VALUE`` lines (values never contain a newline: they are derived from
      validated host names, numbers and compact JSON);
    * ``json``: one flat object of strings (``{}`` when not opted in);
    * ``toml``: a flat table of strings (tomli-w);
    * ``shell``: POSIX ``export KEY='value'`` lines, safe to ``eval`` whatever the values
      contain (``shlex.quote``).

    :param derivation: the derivation, ``None`` when the image did not opt in.
    :raises ValueError: an unknown format, a host format (those need the topology:
        :func:`derive_env.render.hostfiles.render_hosts`) or a digest format
        (:func:`derive_env.digest.render_digest`); the command line passes none here.
    """
    values = derivation.changes() if derivation else {}
    if fmt == "json":
        return json.dumps(values, indent=None, separators=(", ", ": ")) + "\n"
    if fmt == "toml":
        import tomli_w

        return tomli_w.dumps(values)
    if fmt == "shell":
        return "".join(f"export {k}={_single_quoted(v)}\n" for k, v in values.items())
    if fmt == "env":
        return "".join(f"{k}={v}\n" for k, v in values.items())
    if fmt in HOST_FORMATS:
        raise ValueError(
            f"format {fmt!r} is rendered by derive_env.render.hostfiles.render_hosts")
    if fmt in DIGEST_FORMATS:
        raise ValueError(f"format {fmt!r} is rendered by derive_env.digest.render_digest")
    raise ValueError(f"unknown format {fmt!r}")


def _single_quoted(value: str) -> str:
    """``'value'`` for a POSIX shell, always quoted (contract: ``export KEY='value'``)."""
    import shlex  # only when there is something to quote: not for an image that did not opt in

    quoted = shlex.quote(value)
    # shlex leaves safe words bare; those hold no quote or special character to escape.
    return quoted if quoted.startswith("'") else f"'{value}'"
