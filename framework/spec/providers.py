"""Model providers and the variables holding their API keys (no imports: used on fast paths)."""

from __future__ import annotations

PROVIDER_KEYS: dict[str, str | None] = {
    "offline": None,
    "scripted": None,
    "openai": "OPENAI_API_KEY",
    "anthropic": "ANTHROPIC_API_KEY",
    "ollama": None,
    "azure_openai": "AZURE_OPENAI_API_KEY",
    "google_genai": "GOOGLE_API_KEY",
    "mistralai": "MISTRAL_API_KEY",
    "groq": "GROQ_API_KEY",
    "deepseek": "DEEPSEEK_API_KEY",
    "xai": "XAI_API_KEY",
}
"""Known providers and the environment variable holding each one's API key."""

PROVIDER_EXTRAS: dict[str, str] = {"openai": "openai", "anthropic": "anthropic", "ollama": "ollama"}
"""Providers with an optional extra: ``pip install 'cleveragents[openai]'``."""


def key_variable(provider: str, *, api_key_env: str | None = None, base_url: str | None = None) -> str | None:
    """The environment variable that must hold a model's API key, if any: its ``api_key_env``; none
    for a local OpenAI-compatible server (``base_url``); else its provider's (:data:`PROVIDER_KEYS`)."""
    if api_key_env:
        return api_key_env
    if base_url:  # local OpenAI-compatible servers usually need none
        return None
    return PROVIDER_KEYS.get(provider)
