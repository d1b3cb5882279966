"""Chat models by a string, and what their tokens cost.

Specs:
    openai:gpt-4o-mini                       OpenAI (key from OPENAI_API_KEY)
    openai:MODEL + llm_base_url=URL           any OpenAI-compatible server (vLLM, llama.cpp's
                                              server, Ollama, LM Studio); no key needed
    anthropic:claude-...  (any provider)      whatever langchain's init_chat_model knows, when
                                              that provider's package is installed
    local                                     the embedded model (llama-cpp-python), offline
    none                                      no LLM: Optuna proposes every trial
    auto                                      OpenAI if OPENAI_API_KEY is set, else the local
                                              model if installed, else none

API keys are read from the environment by the provider's client; they are never part of a
config, a study, a log line or a prompt.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tunepilot.errors import ConfigError

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

# USD per million tokens (input, output). Extend or override with the `llm_prices` setting.
PRICES: dict[str, tuple[float, float]] = {
    "gpt-4o-mini": (0.15, 0.60),
    "gpt-4o": (2.50, 10.00),
    "gpt-4.1": (2.00, 8.00),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1-nano": (0.10, 0.40),
    "o4-mini": (1.10, 4.40),
    "local": (0.0, 0.0),
}


@dataclass(frozen=True)
class LLMSettings:
    spec: str = "auto"
    base_url: str | None = None
    temperature: float = 0.4  # some variety between proposals; 0 makes repeats likelier
    max_tokens: int = 400  # a config, one sentence of rationale and short notes fit easily
    timeout: float = 60.0  # seconds per request; a slow local model may need more
    prices: Mapping[str, tuple[float, float]] | None = None
    model_path: str | None = None  # a GGUF file for --llm local
    attempts: int = 3  # answers a turn asks for before the sampler takes the trial


@dataclass(frozen=True)
class Choice:
    """The chat model picked for a run, or None, and why (printed at the start of a run)."""

    model: BaseChatModel | None
    name: str  # model name for the price table and the records
    reason: str


def choose(settings: LLMSettings) -> Choice:
    """Resolves `settings.spec` to a chat model; raises `ConfigError` for a bad spec."""
    spec = settings.spec.strip()
    if spec == "none":
        return Choice(None, "none", "--llm none: Optuna proposes every trial")
    if spec == "auto":
        if os.environ.get("OPENAI_API_KEY"):
            return _choose_spec("openai:gpt-4o-mini", settings,
                                "--llm auto: OPENAI_API_KEY is set, so openai:gpt-4o-mini")
        from tunepilot.llm import local

        if local.available(settings.model_path):
            return Choice(local.chat_model(settings), "local",
                          f"--llm auto: no OPENAI_API_KEY, so {local.label(settings.model_path)}")
        return Choice(None, "none", "--llm auto: no OPENAI_API_KEY is set and the embedded model "
                      "is not installed, so Optuna proposes every trial; set OPENAI_API_KEY, "
                      "pass --llm openai:MODEL --llm-base-url URL, or install the local model "
                      f"({local.INSTALL})")
    return _choose_spec(spec, settings, f"--llm {spec}")


def _choose_spec(spec: str, settings: LLMSettings, reason: str) -> Choice:
    if spec == "local":
        from tunepilot.llm import local

        return Choice(local.chat_model(settings), "local",
                      f"{reason}: {local.label(settings.model_path)}")
    provider, sep, model = spec.partition(":")
    if not sep or not model:
        raise ConfigError(
            f"LLM spec {spec!r} is not PROVIDER:MODEL. Examples: openai:gpt-4o-mini, "
            "openai:MODEL with --llm-base-url for an OpenAI-compatible server, local, none, auto."
        )
    if provider == "openai":
        return Choice(_openai(model, settings), model, reason)
    try:
        from langchain.chat_models import init_chat_model

        chat = init_chat_model(model, model_provider=provider, temperature=settings.temperature,
                               max_tokens=settings.max_tokens, timeout=settings.timeout,
                               max_retries=0)
    except ImportError as e:
        raise ConfigError(f"LLM provider {provider!r} needs a package that is not installed "
                          f"({e}); install it, e.g. pip install langchain-{provider}.") from None
    except ValueError as e:
        raise ConfigError(f"LLM spec {spec!r}: {e}") from None
    return Choice(chat, model, reason)


def _openai(model: str, settings: LLMSettings) -> BaseChatModel:
    from langchain_openai import ChatOpenAI

    key = os.environ.get("OPENAI_API_KEY")
    if settings.base_url is None and not key:
        raise ConfigError(
            f"--llm openai:{model} needs OPENAI_API_KEY in the environment, or --llm-base-url "
            "URL of an OpenAI-compatible server (vLLM, llama.cpp, Ollama) that needs no key."
        )
    from pydantic import SecretStr

    return ChatOpenAI(  # type: ignore[call-arg]  # max_tokens: an alias mypy does not see
        model=model,
        base_url=settings.base_url,
        # Local servers ignore the key, but the client insists on one.
        api_key=SecretStr(key or "not-needed"),
        temperature=settings.temperature,
        max_tokens=settings.max_tokens,
        timeout=settings.timeout,
        max_retries=0,  # retries are ours (tenacity), so that they are counted and recorded
    )


def cost_usd(model: str, tokens_in: int, tokens_out: int,
             prices: Mapping[str, tuple[float, float]] | None = None) -> float | None:
    """The price of one call, or None when the model is not in the price table."""
    table = {**PRICES, **(prices or {})}
    price = table.get(model)
    if price is None:
        # "gpt-4o-mini-2024-07-18" is priced as "gpt-4o-mini".
        matches = [k for k in table if model.startswith(k)]
        price = table[max(matches, key=len)] if matches else None
    if price is None:
        return None
    return (tokens_in * price[0] + tokens_out * price[1]) / 1e6

