"""The ``opensearch`` sink: each source table kept as an OpenSearch index, one document a key,
written with the Bulk API under external versions derived from the source position."""
