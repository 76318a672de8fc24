"""The read side: record values back to typed values and their comparable form, for the sinks and
``cdc verify``; a source whose records are not plain rows decodes them through its plugin."""
