"""The source-neutral snapshot kit: chunk state and planning, the DBLog watermark window, progress
reporting, start actions. It imports only :mod:`cdc`; database readers live in the connector."""
