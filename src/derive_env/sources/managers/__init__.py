"""The managers' own rules: one module per manager whose table line's roles do not say
everything (an order, a grammar, a file of its own), imported only when its line is seen.

A module here imports the kit (sources/roles.py, sources/lists.py, sources/report.py) and
the base modules, never another manager's module (its own split modules aside). Each has
``read(environ, line, files=None) -> Report``: ``environ`` holds every detect variable of
``line`` (its table line), ``files`` the texts of what ``files_needed(environ, name)`` named
(path -> text, ``None``: unreadable; unused by a module without ``files_needed``).
"""
