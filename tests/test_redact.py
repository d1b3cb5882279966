"""Every URL form a person may type loses its secrets before anything prints or stores it."""

from __future__ import annotations

import pytest

from tunepilot.memory import redact


@pytest.mark.parametrize(("url", "shown"), [
    ("postgresql://me:pw@db:5432/tune", "postgresql://me:***@db:5432/tune"),
    ("postgresql+psycopg2://me:pw@db/tune", "postgresql+psycopg2://me:***@db/tune"),
    ("postgresql://me@db/tune?password=pw", "postgresql://me@db/tune?password=***"),
    ("postgresql://me:s3cr@t@db/tune", "postgresql://me:***@db/tune"),
    ("mysql+pymysql://root:p%40ss@h:3306/test", "mysql+pymysql://root:***@h:3306/test"),
    ("postgresql://me@db/tune?sslmode=require&sslpassword=pw",
     "postgresql://me@db/tune?sslmode=require&sslpassword=***"),
    ("http://user:pw@llm.local:8080/v1?api_key=pw", "http://user:***@llm.local:8080/v1?api_key=***"),
    ("sqlite:///tunepilot.db", "sqlite:///tunepilot.db"),
    ("journal:study.log", "journal:study.log"),
])
def test_redact(url, shown):
    assert redact(url) == shown
    assert "pw" not in redact(url).replace("pwd", "") and "s3cr" not in redact(url)
