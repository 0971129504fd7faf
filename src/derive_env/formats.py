"""The ``--dry-run --format`` names, in a module that imports nothing.

Kept apart from :mod:`derive_env.render` so that the command line's fast path (the hook's
``derive-env --dry-run --format shell``, see :mod:`derive_env.__main__`) and click's
``--format`` choice can check a format name without importing the renderers. Add a new
format here and its renderer in :func:`derive_env.render.render`.
"""

#: Every ``--format`` value, ``env`` (the default) first.
FORMATS = ("env", "json", "toml", "shell")
