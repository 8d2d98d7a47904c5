"""CleverAgents: AI agents declared in YAML, served over A2A and the Agent Client Protocol."""

from __future__ import annotations

__version__ = "0.1.0"
