"""The parts of the stream's :class:`~connectors.postgres.stream.Assembler`, one job each.

- :mod:`.transaction`: the transaction being assembled (framing, sequence, ``source`` info,
  row writers).
- :mod:`.relations`: the captured relations and types, as ``Relation`` messages describe them.
- :mod:`.batch`: the batch being built (events, schemas, dead letters, the cut at a shape
  change) and its latest event per key.
- :mod:`.bad`: a value that does not convert: fail, or keep the change as a dead letter.
- :mod:`.fill`: unchanged TOAST values, filled from previous images.
"""
