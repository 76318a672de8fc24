"""What every part of the core may use and that uses nothing of it: the retry policy, the
clock, logging, and redaction of secrets."""
