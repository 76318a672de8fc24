"""The read side: records back to typed values and their comparable form, for the sinks and
``cdc verify`` (a source's own decoding comes from its plugin: ``record_rows``)."""
