"""``python -m framework`` is ``ca``."""

from framework.cli.entry import main

main()
