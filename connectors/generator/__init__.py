"""A source that generates a deterministic stream of changes, for demos and tests."""

from connectors.generator.source import (
    GeneratorSource,
    GeneratorSourceConfig,
    GeneratorSourcePlugin,
)

__all__ = ["GeneratorSource", "GeneratorSourceConfig", "GeneratorSourcePlugin"]
