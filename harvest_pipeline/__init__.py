"""harvest_pipeline: keeps a local DuckDB catalogue in step with OAI-PMH repositories.

The protocol core (oai/, formats/, store/, harvest/) has no Dagster imports; defs/ is the
Dagster glue and demo/ the local data provider used by the demo and the tests.
"""
