"""The source registry: which remote repositories to harvest, read from a YAML file."""

from harvest_pipeline.sources.registry import (
    DEFAULT_SOURCES_FILE,
    SourceConfig,
    load_sources,
    sources_file_path,
)

__all__ = ["DEFAULT_SOURCES_FILE", "SourceConfig", "load_sources", "sources_file_path"]
