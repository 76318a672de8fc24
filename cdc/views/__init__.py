"""Live join views: a document per root row with other tables' rows embedded, kept up to date
from the log and published as a topic every sink can consume (docs/views.md)."""
