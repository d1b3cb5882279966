"""Prompt templates shipped as package files, rendered with Jinja2 `StrictUndefined`.

A template that names a variable the caller did not pass fails loudly instead of sending the
model a prompt with a hole in it.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any


def render(name: str, /, **variables: Any) -> str:
    """Renders the template file `name` (e.g. ``"system.j2"``) of this package."""
    return _environment().get_template(name).render(**variables)


@cache
def _environment() -> Any:
    import jinja2

    def load(name: str) -> str:
        return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")

    return jinja2.Environment(
        loader=jinja2.FunctionLoader(load),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,  # prompts are plain text, not HTML
    )


@cache
def version() -> str:
    """A short hash of every template: what a model was measured with (`tune calibrate`)."""
    import hashlib

    digest = hashlib.sha1()
    for entry in sorted(resources.files(__package__).iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".j2"):
            digest.update(entry.name.encode() + entry.read_bytes())
    return digest.hexdigest()[:10]
