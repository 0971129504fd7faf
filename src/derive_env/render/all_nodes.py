"""``--explain --all-nodes``: the whole job as a table, for a person.

Renders a :class:`derive_env.whole_job.JobView`: the values every node shares, then one row
per node (node rank, its name and host, the variables that differ per node), a ``!`` on a
user-set value that differs from the one derived on that node, and what each node decides
on itself. Values with control characters are escaped. Imported only for ``--all-nodes``
and for ``--explain`` on an error.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from derive_env.whole_job import JobView, NodeRow

__all__ = ["all_nodes"]

#: What a node decides on itself, for the line that says so.
_OWN = ("  decided by each node itself, not derived here: its interfaces "
        "(GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME), its GPU count (PET_NPROC_PER_NODE from it, "
        "JAX_LOCAL_DEVICE_IDS), its own host checks (derive-env check)")


def all_nodes(view: JobView) -> str:
    """The table of :class:`~derive_env.whole_job.JobView`, ending in a newline.

    :returns: a heading line, then the values the same on every node, the table, the
        variables in conflict (``!``), the nodes nothing could be derived for, and what each
        node decides on itself; or, without a node count, the heading and why no table.
    """
    count = ("nodes not stated" if view.num_nodes is None
             else f"{view.num_nodes} node{'s' if view.num_nodes != 1 else ''}")
    lines = [f"all nodes, each derived here from what every node shares "
             f"(source {view.source}, {count}):"]
    if view.absent is not None:
        return "\n".join([*lines, f"  no table: {view.absent}"]) + "\n"
    if view.shared:
        alone = len(view.rows) > 1 and sum(1 for row in view.rows if row.cells) == 1
        lines.append("  this node's (the others' are not derived here):" if alone
                     else "  the same on every node:")
        width = max(len(name) for name, _, _ in view.shared)
        for name, value, user in view.shared:
            mark = f"  ! set to {_printable(user)} in the environment" if user else ""
            lines.append(f"    {name:<{width}} = {_printable(value)}{mark}")
    lines += _table(view)
    lines += _conflicts(view)
    errors = {row.error for row in view.rows if row.error}
    for error in sorted(errors):
        at = [_where(row) for row in view.rows if row.error == error]
        lines.append(f"  not derived for {', '.join(at)}: {_printable(error, 600)}")
    lines += [f"  {note}" for note in view.notes]
    lines.append(_OWN)
    if view.node_decided:
        lines.append(f"  decided by this node: {', '.join(view.node_decided)} (see above)")
    return "\n".join(lines) + "\n"


def _printable(value: str, limit: int = 120) -> str:
    if not value.isprintable():
        value = repr(value)
    return value if len(value) <= limit else value[:limit] + "..."


def _where(row: NodeRow) -> str:
    return f"{row.host or '?'} (node rank {row.rank})"


def _groups(view: JobView) -> list[list[str]]:
    """The columns, those with equal cells on every row and no conflict joined
    (``NODE_RANK/PET_NODE_RANK``)."""
    groups: list[list[str]] = []
    for column in view.columns:
        cells = [(row.cells.get(column), column in row.conflicts) for row in view.rows]
        for group in groups:
            if not any(c for _, c in cells) and cells == [
                    (row.cells.get(group[0]), group[0] in row.conflicts) for row in view.rows]:
                group.append(column)
                break
        else:
            groups.append([column])
    return groups


def _table(view: JobView) -> list[str]:
    """The header and one line per node shown."""
    groups = _groups(view)
    named = any(row.name and row.name != row.host for row in view.rows)
    header = ["node rank", *(["node"] if named else []), "host", *("/".join(g) for g in groups)]
    body = []
    for row in view.rows:
        cells = [str(row.rank), *([row.name or "-"] if named else []), row.host or "?"]
        for group in groups:
            text = _printable(row.cells.get(group[0], "-"), 60)
            cells.append(text + ("!" if group[0] in row.conflicts else ""))
        tags = (["master"] if row.rank == 0 else []) + (
            ["this node"] if row.rank == view.own_rank else [])
        body.append((cells, f"({', '.join(tags)})" if tags else ""))
    widths = [max(len(c) for c in column)
              for column in zip(header, *(cells for cells, _ in body), strict=True)]
    lines = ["  " + "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()]
    lines += ["  " + "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True))
              + (f"  {tags}" if tags else "") for cells, tags in body]
    lines = [line.rstrip() for line in lines]
    shown = len(view.rows)
    if view.num_nodes is not None and view.num_nodes > shown:
        lines.append(f"  ... {view.num_nodes} nodes in all ({shown} shown: the first ones, "
                     "this node and the last one)")
    return lines


def _conflicts(view: JobView) -> list[str]:
    """One line per variable whose user-set value differs from the derived one somewhere."""
    lines = []
    names = dict.fromkeys(name for row in view.rows for name in row.conflicts)
    for name in names:
        user = next(row.conflicts[name] for row in view.rows if name in row.conflicts)
        wrong = [f"{row.cells.get(name, '?')} on {_where(row)}" for row in view.rows
                 if name in row.conflicts]
        lines.append(
            f"  ! {name} is set to {_printable(user)} in the environment (a job-wide value: "
            f"the same on every node), but is derived as {', '.join(wrong)}")
    return lines
