"""URLs without their secrets, for everything tunepilot prints or stores."""

from __future__ import annotations

import re

_SECRET_KEYS = re.compile(r"pass|pwd|secret|token|key", re.IGNORECASE)
_USERINFO = re.compile(r"(://[^/?#]*?:)[^/?#]*@")  # user:PASSWORD@ up to the last '@' of the host


def redact(url: str) -> str:
    """`url` with its password, and query values that look secret, replaced by ``***``.

    Parsed by SQLAlchemy (the parser the storage uses, so every form it accepts is covered);
    other URLs (an LLM server's) by the same rules, textually.

    Example:
        >>> redact("postgresql://me:s3cr@t@db:5432/tune?sslpassword=x")
        'postgresql://me:***@db:5432/tune?sslpassword=***'
        >>> redact("postgresql://me@db/tune?password=x")
        'postgresql://me@db/tune?password=***'
    """
    try:
        from sqlalchemy.engine import make_url

        parsed = make_url(url)
    except Exception:  # not a database URL (journal:FILE, http://...): textual rules
        return _redact_text(url)
    query = {k: ("***" if _SECRET_KEYS.search(k) else v) for k, v in parsed.query.items()}
    rendered = parsed.set(query=query).render_as_string(hide_password=True)
    # A raw '@' in a password ends it for SQLAlchemy; the textual rule hides up to the last '@'.
    return _redact_text(rendered.replace("%2A%2A%2A", "***"))


def _redact_text(url: str) -> str:
    url = _USERINFO.sub(r"\1***@", url)
    return re.sub(r"([?&][^=&#]*(?:pass|pwd|secret|token|key)[^=&#]*=)[^&#]*", r"\1***", url,
                  flags=re.IGNORECASE)
