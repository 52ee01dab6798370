"""Benchmarks: ``python -m benchmarks NAME [options]``; each prints a table, then one JSON line."""
