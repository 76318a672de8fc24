"""The contracts between the core and its plugins: what a source emits and implements, what a
sink implements, positions, table schemas, errors, the stored snapshot progress, plugin lookup."""
