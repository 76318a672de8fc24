"""What every part of the core may use, using nothing of it but its error classes: the retry
policy, waiting (``wait_until``), the clock, logging, and redaction of secrets."""
