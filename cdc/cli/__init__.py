"""The ``cdc`` command (:mod:`.main`) and each command's work and report: snapshot, doctor,
status, tail, sink resets, verify."""
