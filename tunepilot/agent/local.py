"""The embedded local model: not in this version yet (see the embedded-model issue)."""

from __future__ import annotations

from typing import Any

from tunepilot.errors import ConfigError


def chat_model(settings: Any) -> Any:
    raise ConfigError(
        "--llm local needs the embedded model, which this version of tunepilot cannot run yet; "
        "use --llm openai:MODEL --llm-base-url URL with a local OpenAI-compatible server "
        "(llama.cpp's server, Ollama, vLLM), or --llm none."
    )
