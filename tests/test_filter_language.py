"""One filter language (cortex.compile_filter v2, v4, v5) for where_filter and every calute-style store."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import text

from cortex_pg import ValidationError
from cortex_pg.errors import translate_db_errors


def compile_filter(store, flt, path="where_filter"):
    with store.engine.connect() as conn, translate_db_errors():
        return conn.execute(
            text("SELECT cortex.compile_filter(CAST(:f AS jsonb), 'n', :p)"),
            {"f": json.dumps(flt), "p": path},
        ).scalar_one()


@pytest.mark.parametrize(
    ("flt", "path", "fragment"),
    [
        ({"or": [{"a": 1}, {"b": 2}]}, "where_filter.or", 'written with "$" ($or)'),
        ({"AND": [{"a": 1}]}, "where_filter.AND", "($and)"),
        ({"not": {"a": 1}}, "where_filter.not", "($not)"),
        ({"nor": [{"a": 1}]}, "where_filter.nor", "$not of $or"),
        ({"$nor": [{"a": 1}]}, "where_filter", "unknown operator $nor"),
        ({"year": {"gte": 2022}}, "where_filter.year.gte", "not an operator"),
        ({"memory_type": {"in": ["a"]}}, "where_filter.memory_type.in", "($in)"),
        ({"year": {"$gte": 2020, "$lte": "2024"}}, "where_filter.year", "a number and with a string"),
        ({"year": {"$gte": "2022"}}, "where_filter.year.$gte", "never matches a number"),
        ({"year": {"$lt": " -1.5e3 "}}, "where_filter.year.$lt", "never matches a number"),
        ({"year": {"$gt": 2024, "$lt": 2020}}, "where_filter.year", "range from 2024 to 2020 is empty"),
        ({"year": {"$gt": 3, "$lte": 3}}, "where_filter.year", "is empty"),
        # empty ranges between strings: times compared as times, text and metadata strings as text
        ({"created_at": {"$gte": "2023-06-01", "$lt": "2023-05-01"}}, "where_filter.created_at", "is empty"),
        ({"created_at": {"$gt": "2023-05-08", "$lt": "2023-05-08"}}, "where_filter.created_at", "is empty"),
        (
            {"created_at": {"$gte": "2023-05-08T00:00:00Z", "$lt": "2023-05-08T01:00:00+02:00"}},
            "where_filter.created_at",
            "is empty",
        ),
        ({"src": {"$gt": "z", "$lt": "a"}}, "where_filter.src", "is empty"),
        ({"category": {"$gte": "b", "$lte": "a"}}, "where_filter.category", "is empty"),
        (
            {"$and": [{"updated_at": {"$gt": "2024-01-02", "$lte": "2024-01-01"}}]},
            "where_filter.$and[0].updated_at",
            "is empty",
        ),
        (
            {"$fields": "item", "timestamp": {"$gt": "2024-01-02", "$lt": "2024-01-01"}},
            "where_filter.timestamp",
            "is empty",
        ),
        ({"category": ["a", "b"]}, "where_filter.category", "use $in"),
        ({"importance": {"$eq": [0.5]}}, "where_filter.importance.$eq", "use $in"),
        ({"$and": [{"or": []}]}, "where_filter.$and[0].or", "($or)"),
        ({"$fields": "calute"}, "where_filter.$fields", 'must be "item" or "note"'),
        ({"memory_id": "x"}, None, None),  # a metadata key outside item mode: fine
        ({"$fields": "item", "memory_id": "nope"}, "where_filter.memory_id", "not a memory id"),
        ({"$fields": "item", "relevance_score": 1}, "where_filter.relevance_score", "cannot be filtered"),
        ({"$not": {}}, "where_filter.$not", "matches everything"),
        # operators of one field that no value meets together (v5)
        ({"n": {"$eq": 5, "$ne": 5}}, "where_filter.n", "no value meets all of"),
        ({"n": {"$eq": 5, "$ne": 5.0}}, "where_filter.n", "no value meets all of"),
        ({"n": {"$eq": 5, "$gt": 6}}, "where_filter.n", "its $eq allows"),
        ({"n": {"$in": [1, 2], "$nin": [2, 1]}}, "where_filter.n", "its $in allows"),
        ({"n": {"$in": [1, 2], "$gte": 3}}, "where_filter.n", "its $in allows"),
        ({"n": {"$eq": 5, "$in": [4, 6]}}, "where_filter.n", "no value meets all of"),
        ({"s": {"$eq": "b", "$gt": 3}}, "where_filter.s", "no value meets all of"),
        ({"importance": {"$eq": 0.5, "$lt": 0.2}}, "where_filter.importance", "no value meets all of"),
        ({"category": {"$in": ["a"], "$ne": "a"}}, "where_filter.category", "no value meets all of"),
        (
            {"created_at": {"$eq": "2023-05-07", "$ne": "2023-05-07T02:00:00+02:00"}},
            "where_filter.created_at",
            "no value meets all of",
        ),
        ({"$or": [{"a": 1}, {"n": {"$eq": 1, "$lt": 1}}]}, "where_filter.$or[1].n", "no value meets all of"),
        ({"tags": {"$in": ["a"], "$nin": ["a"]}}, "where_filter.tags", "every value of $in"),
        ({"tags": {"$contains": "a", "$ne": "a"}}, "where_filter.tags", "a is both required and excluded"),
        ({"tags": {"$eq": ["a", "b"], "$nin": ["b"]}}, "where_filter.tags", "b is both required"),
        ({"tags": {"$eq": ["a"], "$in": ["b"]}}, "where_filter.tags", "every value of $in"),
        ({"tags": {"$eq": ["a"], "$contains": "b"}}, "where_filter.tags", "b is required but not in"),
        ({"tags": {"$in": []}}, "where_filter.tags.$in", "non-empty list"),
        ({"keywords": {"$in": []}}, "where_filter.keywords.$in", "non-empty list"),
        ({"n": {"$gte": 5, "$lte": 5, "$ne": 5}}, "where_filter.n", "its $gte and $lte allows"),
        # times in ISO 8601 only (v5)
        ({"created_at": {"$gte": "today"}}, "where_filter.created_at", '"today" is not an ISO 8601 time'),
        ({"created_at": "epoch"}, "where_filter.created_at", "not an ISO 8601 time"),
        ({"updated_at": {"$lt": "infinity"}}, "where_filter.updated_at", "not an ISO 8601 time"),
        ({"created_at": {"$in": ["2023-05-07", "05/08/2023"]}}, "where_filter.created_at", '"05/08/2023"'),
        ({"created_at": {"$lt": "2023-05-08 PST"}}, "where_filter.created_at", "not an ISO 8601 time"),
        ({"$fields": "item", "timestamp": {"$gt": "now"}}, "where_filter.timestamp", "not an ISO 8601 time"),
    ],
)
def test_shapes_that_match_nothing_raise_with_their_path(store, flt, path, fragment):
    if path is None:
        assert "metadata" in compile_filter(store, flt)
        return
    with pytest.raises(ValidationError) as err:
        compile_filter(store, flt)
    assert err.value.field == "where_filter"
    assert err.value.reason.startswith(path + ":") and fragment in err.value.reason
    with pytest.raises(ValidationError) as err:  # the caller's field, from the path given
        compile_filter(store, flt, path="filters")
    assert err.value.field == "filters" and err.value.reason.startswith(
        "filters" + path[len("where_filter") :]
    )


def test_valid_neighbours_of_the_refused_shapes_still_compile(store):
    # a metadata key called "or" is written explicitly; text bounds of one type; a point range
    assert "'or'" in compile_filter(store, {"metadata.or": 1})
    assert compile_filter(store, {"name": {"$gte": "a", "$lt": "n"}}).count("jsonb_typeof") == 2
    assert "1990-01-01" in compile_filter(store, {"born": {"$gte": "1990-01-01"}})
    assert compile_filter(store, {"year": {"$gte": 3, "$lte": 3}}) != "true"
    assert compile_filter(store, {"year": {"$gt": 2, "$lt": 3}}) != "true"
    # string ranges that hold a value: a point with inclusive bounds, and times whose text
    # order is the reverse of their order in time (midnight at +02:00 is 22:00 UTC the day before)
    assert "2023-05-08" in compile_filter(store, {"created_at": {"$gte": "2023-05-08", "$lte": "2023-05-08"}})
    assert "+02:00" in compile_filter(
        store, {"created_at": {"$gte": "2023-05-08T00:00:00+02:00", "$lt": "2023-05-08T00:00:00Z"}}
    )
    assert '"m"' in compile_filter(store, {"src": {"$gte": "a", "$lt": "m"}})
    # operators of one field that some value meets together
    for flt in (
        {"n": {"$eq": 5, "$ne": 4}},
        {"n": {"$eq": 5, "$ne": "5"}},  # a string never equals a number: 5 passes both
        {"n": {"$in": [5, 6], "$nin": [6]}},
        {"n": {"$eq": 5, "$gte": 5, "$lt": 6}},
        {"s": {"$eq": "b", "$gte": "a"}},
        {"tags": {"$in": ["a", "c"], "$nin": ["c"]}},
        {"tags": {"$contains": "a", "$ne": "b"}},
        {"created_at": {"$eq": "2023-05-07T00:00:00Z", "$lte": "2023-05-07"}},
        {"created_at": {"$in": ["2023-05-07 10:00", "2023-05-07T10:00:00.5-03:30"]}},
        {"created_at": {"$gte": "2023-05-07t10:00:00z"}},  # RFC 3339 allows lower case
        {"created_at": {"$gte": "1850-01-01T00:00:00+00:19:32"}},  # Python's isoformat, an LMT offset
        {"created_at": {"$gte": "20230508T000000Z"}},  # ISO 8601 basic form
        {"importance": {"$in": [0.7], "$gte": 0.1 * 7}},  # compared as the column's real
        {"n": {"$gte": 5, "$lte": 5, "$ne": 4}},
    ):
        assert compile_filter(store, flt) != "true", flt


def test_where_filter_on_the_prem_api_refuses_them_too(store):
    store.add("a note from 2023", user_id="u", metadata={"year": 2023})
    for flt in (
        {"year": {"gte": 2022}},
        {"year": {"$gte": "2022"}},
        {"or": [{"year": 2023}]},
        {"created_at": {"$gte": "2023-06-01", "$lt": "2023-05-01"}},  # a window written backwards
    ):
        with pytest.raises(ValidationError) as err:
            store.search("note", user_id="u", where_filter=flt)
        assert err.value.field == "where_filter"
    assert [r.content for r in store.search("note", user_id="u", where_filter={"year": {"$gte": 2022}})] == [
        "a note from 2023"
    ]


def test_a_bare_list_means_equal_to_exactly_that_list(store):
    a = store.add("listed a b", user_id="u", metadata={"topics": ["a", "b"]}, tags=["x", "y"])
    store.add("listed b a", user_id="u", metadata={"topics": ["b", "a"]}, tags=["y", "x"])
    store.add("listed a", user_id="u", metadata={"topics": ["a"]}, tags=["x"])

    def found(flt):
        return {r.id for r in store.search("listed", user_id="u", limit=10, where_filter=flt, touch=False)}

    assert found({"topics": ["a", "b"]}) == {a}
    assert found({"tags": ["x", "y"]}) == {a}
    assert len(found({"topics": {"$contains": "a"}})) == 3  # "has a"
    assert len(found({"tags": {"$in": ["y", "z"]}})) == 2  # "any of"


def test_item_fields_select_by_the_items_user_time_and_id(store):
    from cortex_pg.compat.calute import ShortTermMemory

    stm = ShortTermMemory(store=store, user_id="tenant")
    mine = stm.save("said by the tenant")
    bobs = stm.save("said for bob", user_id="bob")
    assert [i.memory_id for i in stm.retrieve(filters={"user_id": "bob"})] == [bobs.memory_id]
    assert [i.memory_id for i in stm.retrieve(filters={"user_id": "tenant"})] == [mine.memory_id]
    assert [i.memory_id for i in stm.retrieve(filters={"memory_id": bobs.memory_id})] == [bobs.memory_id]
    since = mine.timestamp.isoformat()
    got = stm.retrieve(filters={"timestamp": {"$gt": since}})
    assert [i.memory_id for i in got] == [bobs.memory_id]
    assert stm.retrieve(filters={"user_id": "nobody"}) == []  # well written, no match: []
