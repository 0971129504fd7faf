"""The ``--dry-run --format`` names, in a module light enough for the fast dry-run path.

Kept apart from :mod:`derive_env.render` so that the command line's fast path (the hook's
``derive-env --dry-run --format shell``, see :mod:`derive_env.__main__`) and click's
``--format`` choice can check a format name without importing the renderers (and with them
the pipeline). It imports only :mod:`derive_env.hostfiles`, which keeps its heavy imports
inside :func:`~derive_env.hostfiles.render_for`. A new format: its name here, its renderer in
:func:`derive_env.render.render`.
"""

from __future__ import annotations

from derive_env.hostfiles import HOST_FORMATS

#: Every ``--format`` choice: the variable formats (``env``, the default, first), then the
#: host formats.
FORMATS: tuple[str, ...] = ("env", "json", "toml", "shell", *HOST_FORMATS)
