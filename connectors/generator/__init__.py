"""A source that generates a deterministic stream of changes, resumable from a stored count (the
``generator`` plugin), for demos and for crash tests of the runtime and the sinks."""

from connectors.generator.source import (
    GeneratorSource,
    GeneratorSourceConfig,
    GeneratorSourcePlugin,
)

__all__ = ["GeneratorSource", "GeneratorSourceConfig", "GeneratorSourcePlugin"]
