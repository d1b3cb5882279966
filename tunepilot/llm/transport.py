"""What counts as a passing transport failure of a model's endpoint, and how long to wait.

Timeouts, dropped connections, 429 (honouring Retry-After) and 5xx are retried with backoff;
everything else (400, 401, a refused request form) is not.
"""

from __future__ import annotations

import json
from typing import Any

import tenacity


def is_transient(e: BaseException | None) -> bool:
    """Worth retrying: timeouts, dropped connections, 429 and 5xx."""
    import httpx
    import openai

    if isinstance(e, (openai.APIConnectionError, openai.RateLimitError,
                      openai.InternalServerError, openai.APIResponseValidationError,
                      httpx.TransportError, TimeoutError, ConnectionError,
                      json.JSONDecodeError)):  # a body that is not JSON: a proxy's error page
        return True
    status = getattr(e, "status_code", None)
    return isinstance(status, int) and (status == 429 or status >= 500)


def timed_out(e: BaseException | None) -> bool:
    """The request ran out of its time-out (`llm_timeout`): the model is slow, not gone. Asking
    a slow model again costs the same time again, so a turn does not retry it."""
    import httpx
    import openai

    return isinstance(e, (openai.APITimeoutError, httpx.TimeoutException, TimeoutError))


def retry_after(e: BaseException | None) -> float | None:
    response = getattr(e, "response", None)
    headers = getattr(response, "headers", None)
    if not headers:
        return None
    value = headers.get("retry-after-ms")
    if value is not None:
        try:
            return float(value) / 1000
        except ValueError:
            pass
    value = headers.get("retry-after")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None  # an HTTP date: fall back to exponential backoff


def wait_for(max_wait_s: float) -> Any:
    backoff = tenacity.wait_exponential_jitter(multiplier=0.5, max=max_wait_s, jitter=0.5)

    def wait(state: tenacity.RetryCallState) -> float:
        seconds = retry_after(state.outcome.exception() if state.outcome else None)
        return min(seconds, max_wait_s) if seconds is not None else backoff(state)

    return wait


def describe_error(e: BaseException | None) -> str:
    if e is None:
        return "unknown error"
    status = getattr(e, "status_code", None)
    text = str(e).strip().splitlines()
    first = text[0][:200] if text else ""
    return f"{type(e).__name__}{f' {status}' if status else ''}: {first}"
