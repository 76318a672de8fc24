"""The pipeline runtime: the pipeline, its source task and sink tasks, and their controls."""
