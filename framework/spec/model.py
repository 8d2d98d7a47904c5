"""Which chat model an agent uses: ``offline``, ``provider:name`` or a mapping."""

from __future__ import annotations

from typing import Any, Self

from pydantic import Field, model_validator

from framework.spec.common import Spec, did_you_mean, fail, string_form
from framework.spec.providers import PROVIDER_KEYS, key_variable


class ScriptedToolCall(Spec):
    name: str
    args: dict[str, Any] = Field(default_factory=dict)


class ScriptedReply(Spec):
    """One reply of a ``scripted`` model: text, tool calls, or both."""

    model_config = string_form("Hello!")

    text: str = ""
    tool_calls: list[ScriptedToolCall] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _from_text(cls, value: Any) -> Any:
        return {"text": value} if isinstance(value, str) else value


class ModelConfig(Spec):
    model_config = string_form("offline", "openai:gpt-4o-mini", "anthropic:claude-sonnet-4-0")

    """A chat model. The string ``openai:gpt-4o-mini`` is short for ``{provider: openai, name: gpt-4o-mini}``."""

    provider: str
    name: str = ""
    base_url: str | None = Field(default=None, description="An OpenAI-compatible server (vLLM, llama.cpp, ...).")
    api_key_env: str | None = Field(default=None, description="Environment variable holding the API key.")
    temperature: float | None = Field(default=None, ge=0, le=2)
    max_output_tokens: int | None = Field(default=None, ge=1, le=1_000_000)
    replies: list[ScriptedReply] = Field(default_factory=list, description="For provider: scripted.")
    params: dict[str, Any] = Field(default_factory=dict, description="Extra keyword arguments for the provider.")

    @model_validator(mode="before")
    @classmethod
    def _from_string(cls, value: Any) -> Any:
        if isinstance(value, str):
            provider, _, name = value.partition(":")
            return {"provider": provider.strip(), "name": name.strip()}
        return value

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.provider not in PROVIDER_KEYS:
            raise fail(
                "model",
                "unknown model provider {provider!r}",
                provider=self.provider,
                hint=did_you_mean(self.provider, PROVIDER_KEYS) or f"known providers: {', '.join(PROVIDER_KEYS)}",
            )
        if self.provider not in ("offline", "scripted") and not self.name:
            raise fail(
                "model",
                "model {provider!r} needs a model name, like '{provider}:MODEL'",
                provider=self.provider,
            )
        if self.provider == "scripted" and not self.replies:
            raise fail("model", "a scripted model needs a non-empty `replies:` list")
        if self.replies and self.provider != "scripted":
            raise fail("model", "`replies:` is only for provider: scripted")
        if self.base_url is not None and not self.base_url.startswith(("http://", "https://")):
            raise fail("model", "base_url must be an http(s) URL, got {url!r}", url=self.base_url)
        return self

    @property
    def key_variable(self) -> str | None:
        """The environment variable that must hold an API key, if any."""
        return key_variable(self.provider, api_key_env=self.api_key_env, base_url=self.base_url)

    def label(self) -> str:
        return f"{self.provider}:{self.name}" if self.name else self.provider
