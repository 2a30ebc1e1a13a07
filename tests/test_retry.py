"""Transient-error retry (cortex_pg.db.retry): pure logic, no database. The standing program
(tests/test_program.py) exercises it against real deadlocks and counts the retries from the
log lines pinned here."""

from __future__ import annotations

import logging

import pytest

from cortex_pg.db import retry
from cortex_pg.errors import DatabaseError


@pytest.fixture(autouse=True)
def no_waiting(monkeypatch):
    monkeypatch.setattr(retry, "BASE_DELAY", 0.0)


def test_a_deadlock_is_run_again_and_each_retry_is_logged(caplog):
    calls = []

    @retry.retry_transient
    def write() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise DatabaseError("deadlock detected", "40P01" if len(calls) == 1 else "40001")
        return "done"

    with caplog.at_level(logging.INFO, logger="cortex_pg.db.retry"):
        assert write() == "done"
    assert len(calls) == 3
    lines = [r.getMessage() for r in caplog.records if r.name == "cortex_pg.db.retry"]
    assert len(lines) == 2
    assert "SQLSTATE 40P01" in lines[0] and "attempt 2 of 8" in lines[0]
    assert "SQLSTATE 40001" in lines[1] and "write" in lines[1]


def test_other_errors_and_the_last_attempt_raise():
    calls = []

    @retry.retry_transient
    def refused() -> None:
        calls.append(1)
        raise DatabaseError("value too long", "22001")

    with pytest.raises(DatabaseError):
        refused()
    assert len(calls) == 1

    @retry.retry_transient
    def always_deadlocked() -> None:
        calls.append(1)
        raise DatabaseError("deadlock detected", "40P01")

    with pytest.raises(DatabaseError):
        always_deadlocked()
    assert len(calls) == 1 + retry.ATTEMPTS


def test_only_the_outermost_call_retries():
    inner_calls = []

    @retry.retry_transient
    def inner() -> None:
        inner_calls.append(1)
        raise DatabaseError("deadlock detected", "40P01")

    @retry.retry_transient
    def outer() -> None:
        inner()

    with pytest.raises(DatabaseError):
        outer()
    assert len(inner_calls) == retry.ATTEMPTS  # the outer call retried; the inner did not loop
