"""Model prices: our ``provider:name`` labels matched to genai-prices' table, ``ca.yaml`` over it,
local models free, everything else unknown (None), never 0."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import genai_prices
import pytest

from framework.spec import load_project
from framework.spec.prices import PROVIDERS, call_cost, known_price
from tests.conftest import ProjectFactory

NONE: dict[str, Any] = {}


def listed(provider: str, model: str, tokens_in: int, tokens_out: int) -> Decimal:
    usage = genai_prices.Usage(input_tokens=tokens_in, output_tokens=tokens_out)
    return genai_prices.calc_price(usage, model, provider_id=provider).total_price


@pytest.mark.parametrize(
    ("label", "provider", "model"),
    [
        ("openai:gpt-4o-mini", "openai", "gpt-4o-mini"),
        ("anthropic:claude-sonnet-4-0", "anthropic", "claude-sonnet-4-0"),
        ("azure_openai:gpt-4o", "azure", "gpt-4o"),  # a deployment named after its model
        ("azure:gpt-4o", "azure", "gpt-4o"),  # LangChain's ls_provider for Azure, as traces name it
        ("google_genai:gemini-2.0-flash", "google", "gemini-2.0-flash"),
        ("mistralai:mistral-large-latest", "mistral", "mistral-large-latest"),
        ("groq:llama-3.3-70b-versatile", "groq", "llama-3.3-70b-versatile"),
        ("deepseek:deepseek-chat", "deepseek", "deepseek-chat"),
        ("xai:grok-3", "x-ai", "grok-3"),
    ],
)
def test_each_provider_is_priced_by_genai_prices(label: str, provider: str, model: str) -> None:
    cost = call_cost(label, NONE, 120_000, 30_000)
    assert cost is not None and cost > 0
    assert cost == listed(provider, model, 120_000, 30_000)
    assert PROVIDERS[label.partition(":")[0]] == provider


@pytest.mark.parametrize("label", ["offline", "scripted", "offline:offline", "scripted:scripted", "ollama:llama3.2"])
def test_local_models_cost_nothing_and_that_is_known(label: str) -> None:
    assert call_cost(label, NONE, 5000, 5000) == 0
    assert known_price(label, NONE)


@pytest.mark.parametrize(
    "label",
    [
        "azure_openai:my-prod-deployment",  # a deployment name genai-prices cannot know
        "openai:no-such-model-anywhere",
        "unknown:gpt-4o",  # a provider LangChain names but genai-prices has no id for
        "openai",  # no model name
    ],
)
def test_an_unlisted_model_has_no_price_not_a_zero_one(label: str) -> None:
    assert call_cost(label, NONE, 1000, 1000) is None
    assert not known_price(label, NONE)


def test_ca_yaml_prices_win_over_the_table_and_price_the_unlisted(make_project: ProjectFactory) -> None:
    root = make_project(
        {
            "ca.yaml": """
                prices:
                  "openai:gpt-4o-mini": {input_per_mtok: 1, output_per_mtok: 2}
                  "azure_openai:my-prod-deployment": {input_per_mtok: 2.5, output_per_mtok: 10}
            """,
            "agents/a.yaml": "name: a\n",
        }
    )
    prices = load_project(root).config.prices
    assert call_cost("openai:gpt-4o-mini", prices, 1_000_000, 1_000_000) == Decimal(3)
    assert call_cost("azure_openai:my-prod-deployment", prices, 2_000_000, 100_000) == Decimal(6)
    assert call_cost("openai:gpt-4o", prices, 0, 0) == 0  # the table still prices the rest


def test_a_cost_budget_on_an_unpriced_model_is_a_warning(make_project: ProjectFactory) -> None:
    root = make_project(
        {
            "agents/a.yaml": """
                name: a
                model: {provider: openai, name: my-finetune, api_key_env: HOME}
                budget: {max_cost_usd: 1}
            """,
            "agents/b.yaml": """
                name: b
                model: {provider: openai, name: gpt-4o-mini, api_key_env: HOME}
                budget: {max_cost_usd: 1}
            """,
        }
    )
    warnings = [w.message for w in load_project(root).warnings]
    assert warnings == ["no known price for model 'openai:my-finetune'; the cost budget cannot be enforced"]
