"""The ``p2pboost`` command and what only it needs: TOML party files, the demo, reports.

Nothing in the library imports this package (``lint-imports`` enforces it): everything here
is glue between a terminal and the library's public API.
"""
