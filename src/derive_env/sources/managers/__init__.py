"""The managers' own rules: one module per manager whose table line's roles do not say
everything (an order, a grammar, a file of its own), imported only when its line is seen.

A module here imports the kit (sources/roles.py, sources/lists.py, sources/report.py) and
the base modules, never another manager's module (its own split modules aside).
"""
