"""The model factory: a spec's ``model:`` becomes a langchain chat model.

``offline`` and ``scripted`` are built in (no key, no network); every other provider goes
through ``langchain.chat_models.init_chat_model``. Everything a user can get wrong here (a
missing integration package, an unset API key) becomes a ``ModelError`` saying what to do.
Heavy imports happen inside :func:`build_model`, so importing this module stays cheap.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from framework.compiler.tool_names import model_facing_name
from framework.errors import ModelError
from framework.spec.model import ModelConfig
from framework.spec.providers import PROVIDER_EXTRAS, PROVIDER_KEYS

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel


class ModelHook(Protocol):
    """Wraps how an agent's model is built (``ca test``'s cassettes record or replay through one).

    ``build`` builds the model ``config`` describes; a hook may not call it (a replay needs no key).
    """

    def __call__(self, build: Callable[[], BaseChatModel], config: ModelConfig | None, agent: str) -> BaseChatModel: ...


_PACKAGES: dict[str, str] = {"azure_openai": "langchain-openai"}
"""Integration packages whose name is not ``langchain-<provider>``."""

_MAX_TOKENS_PARAM: dict[str, str] = {"ollama": "num_predict"}
"""Providers whose output-length limit is not called ``max_tokens``."""

_OPENAI_SDK = frozenset({"openai", "azure_openai"})
"""Providers whose integration runs on the OpenAI SDK: their async HTTP client is aiohttp, and their
chat messages skip the SDK's parameter walk (:mod:`.model_http`)."""

_NO_KEY_NEEDED = "not-needed"
"""Placeholder key for an OpenAI-compatible local server, whose client still insists on one."""


def build_model(
    config: ModelConfig | None,
    *,
    agent: str,
    environ: Mapping[str, str] | None = None,
    tools: Iterable[str] | None = None,
    hook: ModelHook | None = None,
) -> BaseChatModel:
    """Build the chat model ``config`` describes for the agent named ``agent``.

    ``None`` means the built-in ``offline`` model. ``environ`` (default: ``os.environ``) is where
    API keys are looked up. ``tools``, the spec names of the agent's tools, tells the offline
    model which tools exist before any are bound: ``create_agent`` binds none for an agent
    without tools, and the offline model must then answer a ``@tool`` line in text instead of
    calling a tool nobody runs. ``hook`` wraps the building (see :class:`ModelHook`). Raises
    ``ModelError`` when the model cannot be built.
    """
    if hook is not None:
        return hook(lambda: build_model(config, agent=agent, environ=environ, tools=tools), config, agent)
    if config is None or config.provider == "offline":
        from framework.compiler.offline import OfflineChatModel

        if tools is None:
            return OfflineChatModel(agent=agent)
        return OfflineChatModel(agent=agent, tool_names=tuple(model_facing_name(t) for t in tools))
    if config.provider == "scripted":
        from framework.compiler.scripted import ScriptedChatModel

        return ScriptedChatModel(replies=list(config.replies))
    return _provider_model(config, os.environ if environ is None else environ)


def _provider_model(config: ModelConfig, environ: Mapping[str, str]) -> BaseChatModel:
    label = config.label()
    api_key = _api_key(config, environ)
    kwargs: dict[str, Any] = {}
    if config.base_url is not None:
        kwargs["base_url"] = config.base_url
    if api_key is not None:
        kwargs["api_key"] = api_key
    if config.temperature is not None:
        kwargs["temperature"] = config.temperature
    if config.max_output_tokens is not None:
        kwargs[_MAX_TOKENS_PARAM.get(config.provider, "max_tokens")] = config.max_output_tokens
    kwargs.update(config.params)

    from langchain.chat_models import init_chat_model

    try:
        model: BaseChatModel = init_chat_model(f"{config.provider}:{config.name}", **kwargs)
        if config.provider in _OPENAI_SDK:
            from framework.compiler.model_http import openai_arguments, without_transform

            if faster := openai_arguments(model):  # again, calling over aiohttp (what the params say wins)
                model = init_chat_model(f"{config.provider}:{config.name}", **(faster | kwargs))
            model = without_transform(model)
    except Exception as exc:
        if isinstance(exc, ImportError) and _missing_integration(exc):
            raise ModelError(_missing_package_message(config.provider, label)) from exc
        raise ModelError(f"model {label!r} could not be created: {_redact(exc, api_key)}") from exc
    if "streaming" in type(model).model_fields and "streaming" not in config.params:
        # The provider is asked to stream whether or not the tokens are followed (a blocking A2A
        # request runs without LangGraph's messages mode, which would otherwise decide): the same
        # HTTP exchange in every mode, and Anthropic's SDK refuses long requests that do not stream.
        model = model.model_copy(update={"streaming": True})
    return model


def _api_key(config: ModelConfig, environ: Mapping[str, str]) -> str | None:
    """The key to pass, or None to pass none; raises when a required variable is unset."""
    variable = config.key_variable
    if variable is not None:
        value = environ.get(variable, "")
        if not value:
            raise ModelError(f"model {config.label()!r} needs an API key: set {variable} (in the environment or .env)")
        return value
    default_variable = PROVIDER_KEYS.get(config.provider)
    if config.base_url is not None and default_variable is not None:
        # A local OpenAI-compatible server: use the provider's key if one is set, else a placeholder,
        # because clients such as ChatOpenAI refuse to start without any key.
        return environ.get(default_variable) or _NO_KEY_NEEDED
    return None


def _missing_integration(exc: ImportError) -> bool:
    """Whether ``exc`` says a ``langchain_*`` integration package is not installed (not a broken one)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ModuleNotFoundError) and (seen.name or "").startswith("langchain_"):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _missing_package_message(provider: str, label: str) -> str:
    package = _PACKAGES.get(provider, f"langchain-{provider.replace('_', '-')}")
    extra = PROVIDER_EXTRAS.get(provider)
    install = f"pip install 'cleveragents[{extra}]'" if extra else f"pip install {package}"
    return f"model {label!r} needs the package {package}: {install}"


def _redact(exc: BaseException, secret: str | None) -> str:
    """The exception's text with the API key blanked out (pydantic errors echo their input)."""
    text = str(exc) or type(exc).__name__
    if secret and secret != _NO_KEY_NEEDED:
        text = text.replace(secret, "***")
    return text
