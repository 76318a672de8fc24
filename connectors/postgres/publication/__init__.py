"""What is captured: the publication (tables, options, DDL), its column lists and row filters
(checked before they count), and each table's filters as the source applies them."""
