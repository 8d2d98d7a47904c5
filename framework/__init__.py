"""CleverAgents: AI agents declared in YAML, served over A2A and the Agent Client Protocol."""

from __future__ import annotations

from framework import deferred

__version__ = "0.1.0"

deferred.install()  # before anything imports LangChain: see framework/deferred.py
