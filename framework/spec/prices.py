"""What a model call costs: ``ca.yaml`` ``prices:`` first, then genai-prices' maintained table.

genai-prices (pydantic's table of provider prices, with tiers and history) takes most of a second
to import, so it is imported on the first call that needs a price it alone can give: local models
(offline, scripted, ollama) and the models ``ca.yaml`` prices never load it, and neither does
``ca validate`` unless a cost budget names a model ``prices:`` does not.

A model is ``provider:name`` as ``ca.yaml`` writes it (spec/model.py) or as LangChain's callbacks
name it (``ls_provider:ls_model_name``); :data:`PROVIDERS` maps both spellings to genai-prices'
provider ids. An Azure OpenAI model is its deployment name: priced when the deployment is named
after the model (``azure_openai:gpt-4o``), unknown otherwise — give it a ``prices:`` row.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from decimal import Decimal
from typing import Protocol

LOCAL_PROVIDERS = frozenset({"offline", "scripted", "ollama"})
"""Models that run on this machine: a call costs nothing (known, not unknown)."""

PROVIDERS: dict[str, str] = {
    "openai": "openai",
    "anthropic": "anthropic",
    "azure_openai": "azure",
    "azure": "azure",
    "google_genai": "google",
    "google": "google",
    "mistralai": "mistral",
    "mistral": "mistral",
    "groq": "groq",
    "deepseek": "deepseek",
    "xai": "x-ai",
}
"""Our provider names (and LangChain's ``ls_provider``) -> genai-prices' provider ids."""

_MTOK = Decimal(1_000_000)


class _Price(Protocol):
    @property
    def input_per_mtok(self) -> Decimal: ...
    @property
    def output_per_mtok(self) -> Decimal: ...


def call_cost(model: str, overrides: Mapping[str, _Price], input_tokens: int, output_tokens: int) -> Decimal | None:
    """US dollars for one call of ``model`` (``provider:name``), or None when no price is known."""
    if model in overrides:
        price = overrides[model]
        return (price.input_per_mtok * input_tokens + price.output_per_mtok * output_tokens) / _MTOK
    provider, _, name = model.partition(":")
    if provider in LOCAL_PROVIDERS:
        return Decimal(0)
    if provider not in PROVIDERS or not name:
        return None
    return _maintained(PROVIDERS[provider], name, input_tokens, output_tokens)


def known_price(model: str, overrides: Mapping[str, _Price]) -> bool:
    """Whether a call of ``model`` has a price (``ca.yaml``, local, or genai-prices)."""
    return call_cost(model, overrides, 0, 0) is not None


def _maintained(provider: str, name: str, input_tokens: int, output_tokens: int) -> Decimal | None:
    if not _listed(provider, name):
        return None
    import genai_prices

    usage = genai_prices.Usage(input_tokens=input_tokens, output_tokens=output_tokens)
    return genai_prices.calc_price(usage, name, provider_id=provider).total_price


@functools.cache
def _listed(provider: str, name: str) -> bool:
    """Whether genai-prices prices ``name`` at ``provider`` (its LookupError is the one answer for 'no')."""
    import genai_prices

    try:
        genai_prices.calc_price(genai_prices.Usage(), name, provider_id=provider)
    except LookupError:
        return False
    return True
