"""The read side: records back to typed values, for the sinks and ``cdc verify`` (values, their
comparable form, MongoDB's Extended JSON)."""
