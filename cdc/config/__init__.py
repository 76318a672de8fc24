"""The pipeline file: YAML read, ``${VAR}`` expanded, the core's sections and each plugin's own
validated, every problem reported at once with its YAML path (``cdc validate``)."""
