"""``python -m queuemgr``: the same CLI as the ``queuemgr`` console script."""

from queuemgr.cli.main import main

if __name__ == "__main__":
    main()
