"""``python -m framework`` is ``ca``."""

from framework.cli.app import main

main()
