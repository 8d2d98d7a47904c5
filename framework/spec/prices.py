"""Built-in model prices (US dollars per million tokens), extended by ``ca.yaml`` ``prices:``."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Protocol

BUILTIN_PRICES: dict[str, tuple[str, str]] = {
    # provider:model -> (input, output), list prices
    "openai:gpt-4o": ("2.50", "10.00"),
    "openai:gpt-4o-mini": ("0.15", "0.60"),
    "openai:gpt-4.1": ("2.00", "8.00"),
    "openai:gpt-4.1-mini": ("0.40", "1.60"),
    "openai:gpt-4.1-nano": ("0.10", "0.40"),
    "openai:o3": ("2.00", "8.00"),
    "openai:o4-mini": ("1.10", "4.40"),
    "anthropic:claude-3-5-haiku-latest": ("0.80", "4.00"),
    "anthropic:claude-sonnet-4-0": ("3.00", "15.00"),
    "anthropic:claude-opus-4-0": ("15.00", "75.00"),
    "offline": ("0", "0"),
    "scripted": ("0", "0"),
}


class _Price(Protocol):
    @property
    def input_per_mtok(self) -> Decimal: ...
    @property
    def output_per_mtok(self) -> Decimal: ...


def price_for(model: str, overrides: Mapping[str, _Price]) -> tuple[Decimal, Decimal] | None:
    """(input, output) US dollars per million tokens for ``provider:model``, or None if unknown."""
    if model in overrides:
        price = overrides[model]
        return price.input_per_mtok, price.output_per_mtok
    if model in BUILTIN_PRICES:
        inp, out = BUILTIN_PRICES[model]
        return Decimal(inp), Decimal(out)
    return None
