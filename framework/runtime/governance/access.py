"""The capability rules handed to the builtin tools, for what they reach beyond their arguments.

Governance judges a call by its arguments before it runs; a tool then touches more than that: a
search reads every file below its folder, a listing looks at every entry, a fetch follows
redirects. :class:`CapabilityAccess` answers for those with the same functions that judged the
call — :func:`~framework.runtime.governance.paths.check_real_path` for files and
:func:`~framework.runtime.governance.network.check_url` for URLs — so a file or a URL reached
that way gets the decision, and the message, it would get if it had been the argument.

The runtime builds one per agent (``build_bundle(access=CapabilityAccess)``); it implements
:class:`framework.compiler.confine.Access`.
"""

from __future__ import annotations

from dataclasses import dataclass

from framework.runtime.governance.network import check_url
from framework.runtime.governance.paths import check_real_path
from framework.spec.capabilities import Capabilities


@dataclass(frozen=True)
class CapabilityAccess:
    """An agent's capabilities as the tools ask about them (None: the agent declares none)."""

    capabilities: Capabilities | None

    def path(self, rel: str, *, write: bool) -> str | None:
        """Why the real path ``rel`` may not be read (or written), or None when it may."""
        decision = check_real_path(rel, self.capabilities, write=write)
        return None if decision.allowed else decision.reason

    def url(self, url: str) -> str | None:
        """Why ``http.get`` may not fetch ``url``, or None when it may."""
        allowed = None if self.capabilities is None else self.capabilities.network.allow
        decision = check_url(url, allowed, what="http.get")
        return None if decision.allowed else decision.reason
