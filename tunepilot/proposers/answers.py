"""The model's answers: the JSON schema a turn asks for (a proposal, a review's verdict, an
opening's configs) and the tolerant reading of what came back."""

from __future__ import annotations

import json
import re
from typing import Any

from tunepilot.space import Categorical, Float, SearchSpace


def answer_schema(space: SearchSpace, notes: bool = True, review: bool = False,
                  opening: int = 0) -> dict[str, Any]:
    """The JSON schema of an answer: the config (one property per parameter) and a rationale;
    for a review, first the decision ("accept" the sampler's candidate, or "override" it); for
    an opening, a list of up to `opening` configs and a rationale."""
    properties: dict[str, Any] = {}
    for name, p in space.params.items():
        if isinstance(p, Categorical):
            properties[name] = {"enum": list(p.choices), "description": p.describe()}
        else:
            kind = "number" if isinstance(p, Float) else "integer"
            properties[name] = {"type": kind, "minimum": p.low, "maximum": p.high,
                                "description": p.describe()}
    schema: dict[str, Any] = {
        "title": "Suggestion",
        "description": "The next configuration to train, and why.",
        "type": "object",
        "properties": {
            "config": {"type": "object", "properties": properties,
                       "required": list(properties), "additionalProperties": False},
            # For grammar-constrained local models: no raw newline, and no quote or backslash, or
            # llama.cpp's grammar (which takes the pattern literally) lets the string run on.
            "rationale": {"type": "string", "maxLength": 300, "pattern": '^[^"\\\\\\n]*$'},
            "notes": {"type": "string", "maxLength": 600},
        },
        "required": ["config", "rationale"],
        "additionalProperties": False,
    }
    if not notes or opening:
        del schema["properties"]["notes"]
    if opening:
        config = schema["properties"].pop("config")
        schema["properties"] = {"configs": {"type": "array", "items": config,
                                            "maxItems": opening},
                                **schema["properties"]}
        schema["required"] = ["configs", "rationale"]
        schema["title"] = "Opening"
        schema["description"] = (f"The first {opening} configurations to train on this task, "
                                 "and why.")
    elif review:
        # Accepting is {"decision": "accept"} alone: no copy of the candidate to pay for in
        # output tokens, or to mistype.
        schema["properties"] = {"decision": {"enum": ["accept", "override"]},
                                **schema["properties"]}
        schema["required"] = ["decision", "rationale"]
        schema["description"] = ("Accept the optimizer's candidate for the next trial, or "
                                 "override it with a better configuration, and why.")
    return schema


def parse_answer(message: Any, key: str = "config") -> dict[str, Any]:
    """The answer as a dict: the structured parse when there is one, else the first JSON
    object in the text (inside ```json fences or not). Raises ValueError with what was wrong:
    no object, or none with `key`: "config"; an opening's "configs"; a review's "decision"
    (an acceptance is {"decision": "accept"} alone, an override has a "config")."""
    if isinstance(message, dict) and message.get("parsed") is not None:
        parsed = message["parsed"]
    else:
        raw = message["raw"] if isinstance(message, dict) else message
        calls = getattr(raw, "tool_calls", None) or []
        text = _text(raw)
        parsed = calls[0].get("args") if calls else _first_json_object(text)
        if parsed is None:
            raise ValueError(f"the answer is not a JSON object: {text[:200]!r}")
    answer = parsed if isinstance(parsed, dict) else {}
    if key == "configs":
        valid = isinstance(answer.get("configs"), list)
        form = '{"configs": [{...}, ...], "rationale": "..."}'
    elif key == "decision":
        valid = (str(answer.get("decision") or "").strip().lower() == "accept"
                 or isinstance(answer.get("config"), dict))
        form = ('{"decision": "accept", "rationale": "..."} or {"decision": "override", '
                '"config": {...}, "rationale": "..."}')
    else:
        valid = isinstance(answer.get("config"), dict)
        form = '{"config": {...}, "rationale": "..."}'
    if not valid:
        raise ValueError(f"the answer must be {form}, found {json.dumps(parsed)[:200]}")
    return answer


def _text(message: Any) -> str:
    content = getattr(message, "content", message)
    if isinstance(content, list):  # content blocks
        content = "".join(b.get("text", "") if isinstance(b, dict) else str(b) for b in content)
    return str(content)


def _first_json_object(text: str) -> Any:
    decoder = json.JSONDecoder()
    for match in re.finditer(r"\{", text):
        try:
            value, _ = decoder.raw_decode(text, match.start())
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            return value
    return None
