"""The pipeline runtime: source task, sink tasks, retries."""
