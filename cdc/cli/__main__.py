"""``python -m cdc.cli``: the ``cdc`` command."""

from cdc.cli.main import main

main()
