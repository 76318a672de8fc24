"""``python -m cdc.cli``: the ``cdc`` command."""

from cdc.cli.main import main

# Guarded: the install check imports every module, and an import must run nothing.
if __name__ == "__main__":
    main()
