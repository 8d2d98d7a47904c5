"""Pure functions from validated specs to runnable things: models, tools, graphs, cards, the Bundle.

Nothing here does I/O at import time; heavy libraries are imported by these modules,
so the CLI imports this package only for commands that run agents.
"""
