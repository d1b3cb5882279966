"""Experts of known quality, served as OpenAI-compatible chat models on loopback.

Their knowledge is a parameter, not a skill: each one holds a task's configs ranked by loss
(read from a published table, or from many evaluations done once) and answers from a part of
that ranking. They speak HTTP like vLLM or llama.cpp's server, so the agent's real path
(langchain, the `openai` client, structured output, validation, retries) carries every answer.

- `oracle:Q`   overrides every candidate (or proposes, or opens a study with k configs) with
               configs from the best Q of the task (`oracle:1%`, `oracle:5%`), with a sentence
               of reason;
- `noisy:P`    an `oracle:1%` right with probability P, a config drawn at random otherwise;
- `misleading` configs from the worst 20%, said as confidently;
- `picky:P`    knows the best 1% but says so with probability P: it overrides a candidate
               with one of them then, and accepts it otherwise; asked to propose (or to open
               a study), it gives one of them with probability P and a guess (a random
               config) otherwise: a model that helps `review` more than `hybrid`;
- `accept`     accepts every candidate, proposes no opening (a random config when asked for
               one);
- `memorizer`  an `oracle:1%` on the problems it has read about (published tables, told by
               their parameters' names and ranges) and a guesser elsewhere: it recalls, it
               does not know (what `tune calibrate`'s disguised tables are there to catch);
- `garbage`    never answers with JSON.

An expert serving several problems at once (`tune calibrate`'s tables) is given a ranking per
problem, keyed by `signature(space)`: it tells them apart by the parameters a request names.

    with Expert("oracle:1%", ranked, seed=0) as expert:
        model = expert.chat_model()  # a ChatOpenAI pointed at it
"""

from __future__ import annotations

import json
import random
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.llm_server import ScriptedLLMServer

KINDS = ("oracle:Q", "noisy:P", "picky:P", "misleading", "accept", "memorizer", "garbage")
_NAMES = ("oracle", "noisy", "picky", "misleading", "accept", "memorizer", "garbage")


def signature(properties: Mapping[str, Any]) -> tuple[Any, ...]:
    """A problem as a request shows it: its parameters' names and bounds (a SearchSpace's
    `distributions()` or an answer schema's `properties`)."""
    out = []
    for name, p in sorted(properties.items()):
        if isinstance(p, Mapping):
            low, high = p.get("minimum"), p.get("maximum")
        else:
            low, high = getattr(p, "low", None), getattr(p, "high", None)
        out.append((name, None if low is None else float(low), None if high is None
                    else float(high)))
    return tuple(out)


def served(tables: Sequence[Any]) -> tuple[dict[tuple[Any, ...], list[dict[str, Any]]],
                                           frozenset[tuple[Any, ...]]]:
    """What an expert serving `tune calibrate`'s tables is given: each table's ranking, keyed by
    its `signature` and, for a published table, the data set its task names (the published
    tables share one space: a model tells them apart by the name); and the keys a `memorizer`
    has read about (the published ones)."""
    problems, published = {}, set()
    for t in tables:
        key = signature(t.space.params) + ((("named", t.dataset),) if not t.disguised else ())
        problems[key] = t.ranked()
        if not t.disguised:
            published.add(key)
    return problems, frozenset(published)


def _fraction(text: str) -> float:
    text = text.strip()
    return float(text[:-1]) / 100 if text.endswith("%") else float(text)


class Expert:
    """One expert over `ranked` (configs, best first) for one run; `seed` makes its picks."""

    def __init__(self, kind: str, ranked: Sequence[Mapping[str, Any]], seed: int = 0, *,
                 problems: Mapping[tuple[Any, ...], Sequence[Mapping[str, Any]]] | None = None,
                 published: frozenset[tuple[Any, ...]] = frozenset(), delay: float = 0.0):
        """`problems`: rankings by `signature`, for an expert serving several; `published`:
        the signatures a `memorizer` has read about (it guesses on the others); `delay`: the
        seconds it takes to answer, as a model behind an API does (requests overlap)."""
        name, _, arg = kind.partition(":")
        if name not in _NAMES or (name in ("oracle", "noisy", "picky") and not arg):
            raise ValueError(f"unknown expert {kind!r}; expected one of {', '.join(KINDS)}")
        self.kind, self.name = kind, name
        self.arg = _fraction(arg) if arg else 0.0
        self.ranked = list(ranked)
        self.problems = {k: list(v) for k, v in (problems or {}).items()}
        self.published = published
        self.guessing = False  # a memorizer on a problem it has not read about
        self.rng = random.Random(f"{kind}-{seed}")
        self.proposed: set[str] = set()
        self.requests = 0
        self._lock = threading.Lock()
        self.delay = delay
        self._server = ScriptedLLMServer(self.answer, model=f"expert-{kind}")

    # What it knows ------------------------------------------------------------------------

    def _pick(self, lo: float, hi: float) -> dict[str, Any]:
        """A config it has not proposed yet from the ranks [lo, hi) of the ranking (shares)."""
        n = len(self.ranked)
        first, last = int(lo * n), max(int(lo * n) + 1, int(hi * n))
        for _ in range(50):
            config = dict(self.ranked[self.rng.randrange(first, last)])
            key = json.dumps(config, sort_keys=True)
            if key not in self.proposed:
                break
        else:  # a small ranking's band is spent: the nearest rank outside it not proposed yet
            for config in map(dict, self.ranked[last:] + self.ranked[:first][::-1]):
                key = json.dumps(config, sort_keys=True)
                if key not in self.proposed:
                    break
        self.proposed.add(key)
        return config

    def config(self, knows: bool = False) -> tuple[dict[str, Any], str]:
        """Its next config and the reason it gives (`knows`: a `picky` one that speaks up)."""
        if self.name == "memorizer":
            if self.guessing:
                return self._pick(0.0, 1.0), ("Published results on this task put this "
                                              "configuration among the best.")
            return self._pick(0.0, 0.01), ("Published results on this task put this "
                                           "configuration among the best 1%.")
        if self.name == "oracle" or knows or (self.name in ("noisy", "picky")
                                              and self.rng.random() < self.arg):
            q = self.arg if self.name == "oracle" else 0.01
            return self._pick(0.0, q), (f"Published results on this task put this configuration "
                                        f"among the best {q:.0%}.")
        if self.name == "misleading":
            return self._pick(0.8, 1.0), ("Published results on this task put this "
                                          "configuration among the best; it should beat the "
                                          "candidate.")
        return self._pick(0.0, 1.0), "A configuration from a different part of the space."

    def answer(self, request: Mapping[str, Any]) -> str:
        """The assistant message for a chat-completions request body."""
        if self.delay:
            time.sleep(self.delay)
        with self._lock:  # the server answers requests of several searches in threads
            return self._answer(request)

    def _answer(self, request: Mapping[str, Any]) -> str:
        self.requests += 1
        if self.name == "garbage":
            return "I would raise the learning rate a little and see what happens."
        schema = ((request.get("response_format") or {}).get("json_schema") or {}).get(
            "schema") or {}
        self._for(schema, " ".join(str(m.get("content")) for m in request.get("messages", [])))
        review = "decision" in (schema.get("properties") or {})
        if "configs" in (schema.get("properties") or {}):  # the opening: k configs at once
            if self.name == "accept":  # knows nothing: the sampler starts alone
                return json.dumps({"configs": [], "rationale": "No prior for this task."})
            k = int((schema["properties"]["configs"]).get("maxItems") or 1)
            picks = [self.config() for _ in range(k)]
            return json.dumps({"configs": [c for c, _ in picks], "rationale": picks[0][1]})
        speaks = review and self.name == "picky" and self.rng.random() < self.arg
        if review and (self.name == "accept" or (self.name == "picky" and not speaks)):
            return json.dumps({"decision": "accept",
                               "rationale": "The optimizer's candidate is a sound next step."})
        config, why = self.config(knows=speaks)
        body: dict[str, Any] = {"config": config, "rationale": why}
        return json.dumps({"decision": "override", **body} if review else body)

    def _for(self, schema: Mapping[str, Any], text: str) -> None:
        """Picks the ranking of the problem a request is about (an expert of several): by its
        parameters, and by the data set its text names where several share them."""
        if not self.problems:
            return
        props = schema.get("properties") or {}
        config = props.get("config") or (props.get("configs") or {}).get("items") or {}
        key = signature(config.get("properties") or {})
        named = [k for k in self.problems if len(k) == len(key) + 1 and k[:-1] == key
                 and repr(k[-1][1]) in text]
        key = named[0] if named else key
        if key in self.problems:
            self.ranked = self.problems[key]
        self.guessing = self.name == "memorizer" and key not in self.published

    # Serving: the same loopback OpenAI-compatible server the tests script -----------------

    @property
    def base_url(self) -> str:
        return self._server.base_url

    def chat_model(self) -> Any:
        from langchain_openai import ChatOpenAI

        return ChatOpenAI(model=f"expert-{self.kind}", base_url=self.base_url,
                          api_key="not-needed", max_retries=0, timeout=30)  # type: ignore[arg-type]

    def __enter__(self) -> Expert:
        self._server.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.__exit__(*exc)
