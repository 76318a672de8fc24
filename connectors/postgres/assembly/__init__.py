"""Decoded pgoutput messages to change events, in commit order and in bounded batches: the
:class:`.assembler.Assembler` and its parts, one job each.

- :mod:`.transaction`: the transaction being assembled (framing, sequence, ``source`` info,
  row writers).
- :mod:`.relations`: the captured relations and types, as ``Relation`` messages describe them;
  :mod:`.relation_state`: one relation's state (its row encoder, key, projection).
- :mod:`.shapes`, :mod:`.evolution`: each table's shape and how it changed.
- :mod:`.toast`: unchanged TOAST values and their images.
- :mod:`.batch`: the batch being built (events, schemas, dead letters, the cut at a shape
  change) and its latest event per key.
- :mod:`.bad`: a value that does not convert: fail, or keep the change as a dead letter.
- :mod:`.fill`: unchanged TOAST values, filled from previous images.
- :mod:`.source_fields`: PostgreSQL's fields of a record's ``source`` block.
- :mod:`.connect`: a relation's Connect schemas (``schemas.enable``).
- :mod:`.unwritten`: the operations left out when the assembler writes records itself.
"""
