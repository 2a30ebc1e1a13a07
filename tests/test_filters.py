"""where_filter: compiled in SQL (cortex.compile_filter) — the SQL text, errors, and results."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime

import pytest
from sqlalchemy import text

from cortex_pg import ValidationError
from cortex_pg.errors import translate_db_errors


def compile_filter(store, flt, alias="n"):
    with store.engine.connect() as conn, translate_db_errors():
        return conn.execute(
            text("SELECT cortex.compile_filter(CAST(:f AS jsonb), :a)"), {"f": json.dumps(flt), "a": alias}
        ).scalar_one()


@pytest.mark.parametrize(
    ("flt", "sql"),
    [
        ({}, "true"),
        ({"category": "work"}, "((n.category = 'work'::text))"),
        ({"importance": {"$gte": 0.5}}, "((n.importance >= '0.5'::real))"),
        ({"tags": {"$contains": "python"}}, "(('python' = ANY (n.tags)))"),
        ({"tags": {"$in": ["a", "b"]}}, "((n.tags && '{a,b}'::text[]))"),
        ({"content": {"$contains": "O'Brien"}}, "((strpos(n.content, 'O''Brien') > 0))"),
        ({"speaker": "Ann"}, "(((n.metadata -> 'speaker') = '\"Ann\"'::jsonb))"),
        ({"$not": {"memory_type": "task"}}, "((NOT ((n.memory_type = 'task'::text))))"),
        (
            {"$or": [{"category": "a"}, {"category": "b"}]},
            "((((n.category = 'a'::text)) OR ((n.category = 'b'::text))))",
        ),
    ],
)
def test_compiled_sql(store, flt, sql):
    assert compile_filter(store, flt) == sql


@pytest.mark.parametrize(
    ("flt", "fragment"),
    [
        ({"tags": {"$regex": "x"}}, "unknown operator $regex"),
        ({"$xor": []}, "unknown operator $xor"),
        ({"bad field; DROP TABLE x": 1}, "is not a field name"),
        ({"importance": {"$gt": "high"}}, "expected a number"),
        ({"created_at": {"$gt": "not a date"}}, "not an ISO 8601 time"),
        ({"tags": {"$in": "python"}}, "list of strings"),
        ({"$and": []}, "non-empty list"),
        ({"user_id": "someone"}, "cannot be filtered"),
        ({"tags": {"$eq": "a", "plain": 1}}, "mixes operators"),
    ],
)
def test_bad_filters_raise_a_typed_error(store, flt, fragment):
    store.add("some note", user_id="u")
    with pytest.raises(ValidationError) as err:
        store.search("note", user_id="u", where_filter=flt)
    assert err.value.field == "where_filter"
    assert fragment in str(err.value)
    # nothing about the stored data changed, and the table still exists
    assert store.count(user_id="u") == 1


@pytest.fixture
def corpus(store):
    rows = [
        (
            "python tips for data work",
            ["python", "data"],
            "work.programming",
            0.9,
            {"lang": "en", "stars": 5},
        ),
        ("python snake at the zoo", ["animals"], "life.zoo", 0.2, {"lang": "en", "stars": 2}),
        ("cuisine française: la ratatouille", ["food"], "life.food", 0.6, {"lang": "fr", "stars": 4}),
        ("rust ownership rules", ["rust", "programming"], "work.programming", 0.7, {"lang": "en"}),
    ]
    ids = [
        store.add(c, user_id="f", tags=t, category=cat, importance=imp, metadata=m)
        for c, t, cat, imp, m in rows
    ]
    return store, ids


@pytest.mark.parametrize("source", ["ltm", "stm", "all"])
@pytest.mark.parametrize(
    ("flt", "expected"),
    [
        ({"tags": {"$contains": "python"}}, {0}),
        ({"category": "work.programming"}, {0, 3}),
        ({"importance": {"$gt": 0.5}}, {0, 2, 3}),
        ({"lang": {"$ne": "en"}}, {2}),
        ({"stars": {"$gte": 4}}, {0, 2}),
        ({"lang": {"$in": ["fr", "de"]}}, {2}),
        ({"stars": {"$nin": [5, 2]}}, {2, 3}),
        ({"$or": [{"tags": {"$contains": "rust"}}, {"stars": 2}]}, {1, 3}),
        ({"$and": [{"category": {"$contains": "work"}}, {"$not": {"tags": {"$contains": "rust"}}}]}, {0}),
        ({"content": {"$contains": "ratatouille"}}, {2}),
        ({"tags": {"$nin": ["python", "rust"]}}, {1, 2}),
    ],
)
def test_filters_select_the_same_notes_on_both_tiers(corpus, flt, expected, source):
    store, ids = corpus
    found = {
        r.id
        for r in store.search(
            "python rust food zoo", user_id="f", limit=10, where_filter=flt, memory_source=source, touch=False
        )
    }
    assert found == {ids[i] for i in expected}


@pytest.mark.parametrize(
    ("flt", "fragment"),
    [
        ({"access_count": {"$gte": 1.5}}, "whole number"),
        ({"importance": {"$gt": 10**400}}, "out of range"),
        ({"$not": None}, "takes a filter object"),
        ({"$and": [1, 2]}, "must be a filter object"),
    ],
)
def test_more_bad_filters(store, flt, fragment):
    with pytest.raises(ValidationError) as err:
        store.search("x", where_filter=flt)
    assert err.value.field == "where_filter" and fragment in str(err.value)


@pytest.mark.parametrize("source", ["ltm", "stm"])
def test_a_whole_number_written_with_a_fraction_matches_an_integer_field(corpus, source):
    """1.0 is a whole number: the access count's filter matches as 1 does (it used to compile
    to '1.0'::integer, which raised at run time)."""
    store, ids = corpus
    store.get(ids[1], user_id="f", touch=True)  # access_count 1 for the snake
    for flt in ({"access_count": 1.0}, {"access_count": {"$in": [1.0, 7]}}, {"access_count": {"$gte": 1.00}}):
        found = {
            r.id
            for r in store.search(
                "python snake", user_id="f", where_filter=flt, memory_source=source, touch=False
            )
        }
        assert found == {ids[1]}, flt
    assert store.search("python", user_id="f", where_filter={"access_count": 2.0}, touch=False) == []


def test_dates_in_filters_and_metadata_are_iso_dates(store):
    """A Python date is written as its ISO 8601 date, in a filter and in metadata (it used to
    be refused as not JSON-serialisable)."""
    nid = store.add(
        "dated note", user_id="d", metadata={"due": date(2024, 1, 1)}, time="2024-05-01T12:00:00Z"
    )
    assert store.get(nid, user_id="d").metadata == {"due": "2024-01-01"}
    for flt in (
        {"due": date(2024, 1, 1)},
        {"created_at": {"$gte": date(2024, 5, 1), "$lt": date(2024, 5, 2)}},
        {"created_at": {"$gte": datetime(2024, 5, 1, 11, tzinfo=UTC)}},
    ):
        assert [r.id for r in store.search("dated", user_id="d", where_filter=flt, touch=False)] == [nid], flt
    assert (
        store.search(
            "dated", user_id="d", where_filter={"created_at": {"$lt": date(2024, 5, 1)}}, touch=False
        )
        == []
    )


def test_deep_filters_are_refused_before_sql(store):
    flt: dict = {"category": "x"}
    for _ in range(2000):
        flt = {"$not": flt}
    with pytest.raises(ValidationError) as err:
        store.search("x", where_filter=flt)
    assert "nested deeper" in str(err.value)
