"""Dagster glue only: assets from a factory per source, checks, sensors, jobs and resources.

Everything that talks OAI-PMH or SQL lives in the protocol core; this package wires it to Dagster.
"""
