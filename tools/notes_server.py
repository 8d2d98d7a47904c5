"""A small MCP server shipped with the examples: a notebook kept in ``.ca/notes.txt``.

It is an ordinary MCP server built with the official ``mcp`` SDK, spoken to over stdio; ``ca.yaml``
declares it as ``notes`` and ``agents/notetaker.yaml`` uses its tools. Its annotations drive the
``supervised`` profile: ``list_notes`` and ``count_words`` are read-only (they run on their own),
``add_note`` is not (a person approves it). Try ``ca mcp list notes``.
"""

from __future__ import annotations

from pathlib import Path

from mcp.server import MCPServer
from mcp.types import ToolAnnotations

NOTES = Path(".ca") / "notes.txt"
server = MCPServer("notes")


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def list_notes() -> str:
    """List every note of the notebook, one a line."""
    text = NOTES.read_text(encoding="utf-8") if NOTES.is_file() else ""
    return text.strip() or "(the notebook is empty)"


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def count_words(text: str) -> str:
    """Count the words of a text."""
    return f"{len(text.split())} words"


@server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False))
def add_note(text: str) -> str:
    """Add one note to the notebook."""
    NOTES.parent.mkdir(exist_ok=True)
    with NOTES.open("a", encoding="utf-8") as f:
        f.write(text.replace("\n", " ") + "\n")
    return "noted"


if __name__ == "__main__":
    server.run("stdio")
