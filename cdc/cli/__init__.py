"""The ``cdc`` command: :mod:`.main` parses it, and each command's work and report lives here
(status, tail, snapshot, sink resets, doctor, verify). No other package imports it."""
