"""The pipeline YAML: parsing and validation (:mod:`.pipeline`), the checks across sections, the
plugins' sections, ``${VAR}`` expansion, did-you-mean for keys, byte sizes."""
