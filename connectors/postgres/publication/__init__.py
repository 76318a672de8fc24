"""What is captured: the publication (tables, options, DDL), its column lists and row filters,
and each table's filters as the source applies them."""
