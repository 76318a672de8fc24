"""The core of the change-data-capture framework: the plugin contracts, the write and read paths
around the log, the runtime and the CLI. Sources and sinks are plugins found by entry point."""

__version__ = "0.1.0"
