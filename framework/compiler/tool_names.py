"""A tool's two names: the spec's (``fs.read``) and the one a model sees (``fs_read``).

Its own module because the tool builders, the model factory and the built-in models all
translate between the two, and the factory imports the models it builds.
"""

from __future__ import annotations

from collections.abc import Iterable


def model_facing_name(spec_name: str) -> str:
    """The tool name a model sees: ``fs.read`` → ``fs_read`` (providers reject dots in names)."""
    return spec_name.replace(".", "_")


def spec_name(model_name: str, known: Iterable[str]) -> str:
    """The spec name among ``known`` whose model-facing name is ``model_name``; ``model_name`` itself if none."""
    for name in known:
        if model_facing_name(name) == model_name:
            return name
    return model_name


def yaml_name(model_name: str, ca_name: str | None) -> str | None:
    """The YAML's name of a tool the model knows as ``model_name``, when ``ca_name`` (the tool's
    ``metadata["ca_name"]``) is that name with dots (``notes.list_notes``); None otherwise (an
    agent tool's ``ca_name`` is its URL, not a name a person reads as the tool's)."""
    if ca_name and ca_name != model_name and model_facing_name(ca_name) == model_name:
        return ca_name
    return None
