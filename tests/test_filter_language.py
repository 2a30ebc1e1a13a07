"""One filter language (cortex.compile_filter v2, v4, v5, v7, v9, v10) for where_filter and every calute-style store."""

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
        # a conjunction (an object's keys and its $and, flattened) checked as a whole per field (v7)
        (
            {"$and": [{"category": "work"}, {"category": "home"}]},
            "where_filter.$and[1].category",
            'contradicts where_filter.$and[0].category: no value is both "work" and "home"',
        ),
        (
            {"category": "work", "$and": [{"category": "home"}]},
            "where_filter.$and[0].category",
            "contradicts where_filter.category:",
        ),
        (
            {"$and": [{"importance": {"$gt": 0.8}}, {"importance": {"$lt": 0.2}}]},
            "where_filter.$and[1].importance",
            "the range from 0.8 to 0.2 is empty",
        ),
        (
            {"$and": [{"importance": {"$gte": 0.5}}, {"$and": [{"importance": {"$lt": 0.5}}]}]},
            "where_filter.$and[1].$and[0].importance",
            "contradicts where_filter.$and[0].importance",
        ),
        (
            {"$and": [{"created_at": {"$gte": "2023-06-01"}}, {"created_at": {"$lt": "2023-05-01"}}]},
            "where_filter.$and[1].created_at",
            "is empty",
        ),
        (
            {
                "$fields": "item",
                "timestamp": {"$gte": "2024-01-01"},
                "$and": [{"created_at": {"$lt": "2023-01-01"}}],
            },
            "where_filter.$and[0].created_at",
            "contradicts where_filter.timestamp",
        ),
        (
            {"$and": [{"n": 1}, {"metadata.n": 2}]},
            "where_filter.$and[1].metadata.n",
            "no value is both 1 and 2",
        ),
        (
            {"$and": [{"n": {"$gt": 1}}, {"n": {"$lt": "z"}}]},
            "where_filter.$and[1].n",
            "a number and with a string",
        ),
        (
            {"$and": [{"n": {"$in": [1, 2]}}, {"n": {"$in": [3]}}]},
            "where_filter.$and[1].n",
            "no value is both one of",
        ),
        (
            {
                "$and": [
                    {"category": {"$in": ["a", "b"]}},
                    {"category": {"$in": ["b", "c"]}},
                    {"category": {"$ne": "b"}},
                ]
            },
            "where_filter.$and[2].category",
            "contradicts where_filter.$and[0].category, where_filter.$and[1].category: no value meets all of",
        ),
        (
            {"$and": [{"tags": {"$contains": "a"}}, {"tags": {"$nin": ["a"]}}]},
            "where_filter.$and[1].tags",
            "a is both",
        ),
        (
            {"$and": [{"tags": ["a"]}, {"tags": ["b"]}]},
            "where_filter.$and[1].tags",
            'exactly ["a"] and exactly ["b"]',
        ),
        ({"$and": [{"tags": ["a"]}, {"tags": "b"}]}, "where_filter.$and[1].tags", "not in the exact list"),
        (
            {"$and": [{"tags": {"$in": ["a", "b"]}}, {"tags": {"$nin": ["a"]}}, {"tags": {"$ne": "b"}}]},
            "where_filter.$and[2].tags",
            "every value of $in",
        ),
        # ... wherever the conjunction stands, as a contradictory operator object
        (
            {"$or": [{"a": 1}, {"$and": [{"category": "work"}, {"category": "home"}]}]},
            "where_filter.$or[1].$and[1].category",
            "contradicts where_filter.$or[1].$and[0].category",
        ),
        (
            {"$or": [{"a": 1}, {"category": "work", "$and": [{"category": "home"}]}]},
            "where_filter.$or[1].$and[0].category",
            "contradicts where_filter.$or[1].category",
        ),
        (
            {"$not": {"$and": [{"category": "work"}, {"category": "home"}]}},
            "where_filter.$not.$and[1].category",
            "contradicts",
        ),
        # access_count is an integer column: a range that holds no whole number is empty (v7)
        ({"access_count": {"$gt": 1, "$lt": 2}}, "where_filter.access_count", "none meets $gt 1 and $lt 2"),
        ({"access_count": {"$gt": 2147483647}}, "where_filter.access_count", "holds whole numbers"),
        (
            {"access_count": {"$gt": 1, "$lte": 2, "$ne": 2}},
            "where_filter.access_count",
            "no value meets all of",
        ),
        (
            {"$and": [{"access_count": {"$gt": 1}}, {"access_count": {"$lt": 2}}]},
            "where_filter.$and[1].access_count",
            "none meets $gt 1 and $lt 2",
        ),
        (
            {"$and": [{"access_count": 1}, {"access_count": {"$gt": 1}}]},
            "where_filter.$and[1].access_count",
            "no value meets all of",
        ),
        (
            {"$fields": "item", "$and": [{"access_count": {"$gte": 3}}, {"access_count": {"$lt": 3.0}}]},
            "where_filter.$and[1].access_count",
            "contradicts where_filter.$and[0].access_count",
        ),
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


def test_satisfiable_conjunctions_compile_as_before(store):
    # look-alikes of the contradictions above that some value meets compile as they did: the
    # clauses of an $and, each compiled alone, AND-ed
    for flt in (
        {"$and": [{"category": "work"}, {"importance": {"$gt": 0.5}}]},
        {"$and": [{"importance": {"$gt": 0.2}}, {"importance": {"$lt": 0.8}}]},
        {"$and": [{"category": "work"}, {"category": "work"}]},
        {"$and": [{"category": {"$in": ["a", "b"]}}, {"category": {"$in": ["b", "c"]}}]},
        {"$and": [{"tags": "a"}, {"tags": "b"}]},  # has a and has b
        {"$and": [{"tags": {"$in": ["a", "b"]}}, {"tags": {"$nin": ["a"]}}]},
        {"$and": [{"n": 1}, {"metadata.n": 1.0}]},
        {"$and": [{"n": {"$gte": 1}}, {"n": {"$lte": 1}}]},
        {"$and": [{"access_count": {"$gt": 1}}, {"access_count": {"$lt": 3}}]},
        {"$and": [{"access_count": {"$gte": 1}}, {"access_count": {"$lt": 2}}]},
    ):
        expected = "((" + " AND ".join(compile_filter(store, c) for c in flt["$and"]) + "))"
        assert compile_filter(store, flt) == expected
    for flt in (
        {"category": "work", "$and": [{"importance": {"$gt": 0.5}}]},
        {"access_count": {"$gte": 1, "$lt": 2}},  # 1
        {"access_count": {"$gt": 1, "$lte": 2}},  # 2
        {"access_count": {"$gt": 1, "$lt": 3, "$ne": 1}},  # 2
        {"access_count": {"$gt": -1}},
        {"access_count": 1.0, "$and": [{"access_count": {"$gt": 0}}]},
        {"$and": [{"category": {"$contains": "w"}}, {"category": {"$under": "work"}}]},
        {"$or": [{"category": "work"}, {"category": "home"}]},  # either: not a conjunction
        {"$and": [{"category": "work"}, {"$or": [{"category": "home"}, {"importance": 1}]}]},
        {"category": "work", "$not": {"category": "home"}},
        {"$and": [{"created_at": {"$gte": "2023-05-01"}}, {"created_at": {"$lt": "2023-05-02"}}]},
        {"$and": [{"n": {"$ne": 1}}, {"n": {"$ne": 2}}, {"n": {"$gte": 1, "$lte": 3}}]},
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


def test_search_refuses_contradictory_conjunctions_and_keeps_their_look_alikes(store):
    # the QA reproduction: these returned [] instead of raising
    work = store.add("Work note about the quarterly plan", user_id="u", category="work", importance=0.5)
    home = store.add("Home note about the garden plan", user_id="u", category="home", importance=0.9)

    def found(flt):
        return {r.id for r in store.search("plan", user_id="u", limit=10, where_filter=flt, touch=False)}

    for flt, path in (
        ({"$and": [{"category": "work"}, {"category": "home"}]}, "where_filter.$and[1].category"),
        ({"category": "work", "$and": [{"category": "home"}]}, "where_filter.$and[0].category"),
        (
            {"$and": [{"importance": {"$gt": 0.8}}, {"importance": {"$lt": 0.2}}]},
            "where_filter.$and[1].importance",
        ),
        ({"access_count": {"$gt": 1, "$lt": 2}}, "where_filter.access_count"),
        (
            {"$or": [{"category": "work"}, {"$and": [{"category": "work"}, {"category": "home"}]}]},
            "where_filter.$or[1]",
        ),
    ):
        with pytest.raises(ValidationError) as err:
            store.search("plan", user_id="u", where_filter=flt, touch=False)
        assert err.value.field == "where_filter" and err.value.reason.startswith(path), (
            flt,
            err.value.reason,
        )
    assert found({"$and": [{"category": "work"}, {"importance": {"$gt": 0.4}}]}) == {work}
    assert found({"$and": [{"importance": {"$gt": 0.2}}, {"importance": {"$lt": 0.8}}]}) == {work}
    assert found({"category": "home", "$and": [{"importance": {"$gte": 0.9}}]}) == {home}
    assert found({"access_count": {"$gte": 0, "$lt": 1}}) == {work, home}
    assert found({"access_count": {"$gte": 1, "$lt": 2}}) == set()  # well written, no match: []


def test_a_calute_store_scope_is_not_part_of_the_callers_conjunction(store):
    from cortex_pg.compat.calute import LongTermMemory, ShortTermMemory

    stm = ShortTermMemory(store=store, user_id="u")
    ltm = LongTermMemory(store=store, user_id="u")
    said = stm.save("said in the short term")
    # asking the short-term store for another type is a filter that matches nothing here
    assert stm.retrieve(filters={"memory_type": "long_term"}) == []
    assert stm.retrieve(filters={"$and": [{"memory_type": "long_term"}]}) == []
    assert ltm.retrieve(filters={"memory_type": {"$in": ["short_term"]}}) == []
    assert [i.memory_id for i in stm.retrieve(filters={"memory_type": "short_term"})] == [said.memory_id]
    # a contradiction in the caller's own filter is refused, naming the caller's field
    with pytest.raises(ValidationError) as err:
        stm.retrieve(filters={"agent_id": "a", "$and": [{"agent_id": "b"}]})
    assert err.value.field == "filters" and "contradicts" in err.value.reason
    with pytest.raises(ValidationError) as err:
        stm.retrieve(filters={"memory_type": "short_term", "$and": [{"memory_type": "entity"}]})
    assert err.value.field == "filters" and "contradicts" in err.value.reason


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


def test_an_item_field_compared_with_a_value_that_is_not_a_string_is_refused(store):
    """agent_id, task_id and conversation_id hold strings (an item with another is refused), so
    a filter comparing them with a number could only match nothing; the item's user_id already
    raised the compiler's own error."""
    from cortex_pg.compat.calute import LongTermMemory, ShortTermMemory

    stm = ShortTermMemory(store=store, user_id="u")
    ltm = LongTermMemory(store=store, user_id="u")
    said = stm.save("said by agent 5", agent_id="5")
    assert [i.memory_id for i in stm.retrieve(filters={"agent_id": "5"})] == [said.memory_id]
    for memory, flt, path in (
        (stm, {"agent_id": 5}, "filters.agent_id"),
        (stm, {"task_id": {"$in": ["t", 7]}}, "filters.task_id.$in"),
        (
            ltm,
            {"$or": [{"conversation_id": "c"}, {"conversation_id": {"$eq": True}}]},
            "filters.$or[1].conversation_id.$eq",
        ),
        (ltm, {"$not": {"agent_id": {"$ne": 1.5}}}, "filters.$not.agent_id.$ne"),
        (stm, {"user_id": 5}, "filters.user_id"),
        (stm, {"metadata.agent_id": 5}, "filters.metadata.agent_id"),
        (ltm, {"agent_id": {"$contains": 7}}, "filters.agent_id.$contains"),
    ):
        with pytest.raises(ValidationError) as err:
            memory.retrieve(filters=flt)
        assert err.value.field == "filters", flt
        assert err.value.reason.startswith(f"{path}: expected a string, got "), err.value.reason
    assert [i.memory_id for i in stm.retrieve(filters={"agent_id": None})] == [said.memory_id]  # unset
    assert stm.retrieve(filters={"agent_id": {"$in": ["6", None]}}) == []  # well written, no match


# one value written two ways: equal as the compiled filter compares them (v8 matches by key)
SAME_VALUE = [  # (field, the value, written otherwise, another value)
    ("importance", 0.7, 0.7000000001, 0.1),  # one real
    ("access_count", 1, 1.0, 2),
    ("created_at", "2023-05-08T00:00:00Z", "2023-05-08T02:00:00+02:00", "2023-05-09"),  # one instant
    ("n", 1, 1.0, 2),  # metadata: jsonb numbers
    ("metadata.n", "x", "x", "y"),
]


@pytest.mark.parametrize(("field", "a", "b", "other"), SAME_VALUE)
def test_a_value_written_two_ways_is_one_value(store, field, a, b, other):
    # excluded in either spelling: nothing is left
    for flt, path in (
        ({field: {"$in": [a], "$nin": [b]}}, f"where_filter.{field}"),
        ({field: {"$eq": b, "$ne": a}}, f"where_filter.{field}"),
        ({"$and": [{field: {"$in": [a]}}, {field: {"$nin": [b]}}]}, f"where_filter.$and[1].{field}"),
    ):
        with pytest.raises(ValidationError) as err:
            compile_filter(store, flt)
        assert err.value.reason.startswith(path + ":"), (flt, err.value.reason)
    # allowed in either spelling: the lists meet
    flt = {"$and": [{field: {"$in": [a, other]}}, {field: {"$in": [b]}}]}
    assert compile_filter(store, flt) != "true"


def test_a_uuid_in_either_case_is_one_id(store):
    low = "0b5e3d8c-8f5a-4a8e-9b0c-1d2e3f4a5b6c"
    with pytest.raises(ValidationError, match=r"memory_id"):
        compile_filter(store, {"$fields": "item", "memory_id": {"$in": [low], "$nin": [low.upper()]}})
    assert (
        compile_filter(
            store,
            {
                "$fields": "item",
                "$and": [{"memory_id": {"$in": [low]}}, {"memory_id": {"$in": [low.upper()]}}],
            },
        )
        != "true"
    )


def test_long_value_lists_are_checked_whole(store):
    # lists of 1,500 values (v5 and v7 compared them pair by pair; v8 matches them by key): the
    # one value they share, or the one value not excluded, is found; lists that share none raise
    first = [f"c{i}" for i in range(1500)]
    second = [f"c{i}" for i in range(1499, 3000)]  # shares c1499 alone
    compiled = compile_filter(store, {"$and": [{"category": {"$in": first}}, {"category": {"$in": second}}]})
    assert "'c1499'" in compiled and "'c2999'" in compiled
    with pytest.raises(ValidationError) as err:
        compile_filter(store, {"$and": [{"category": {"$in": first}}, {"category": {"$in": second[1:]}}]})
    assert err.value.reason.startswith(
        "where_filter.$and[1].category: contradicts where_filter.$and[0].category"
    )
    numbers = list(range(1500))
    assert compile_filter(store, {"n": {"$in": numbers, "$nin": numbers[:-1]}}) != "true"
    with pytest.raises(ValidationError) as err:
        compile_filter(store, {"n": {"$in": numbers, "$nin": [float(x) for x in numbers]}})
    assert err.value.reason.startswith("where_filter.n: no value meets all of")


# $under with the other conditions of its field, in one operator object or a conjunction (v9)
UNDER_CONTRADICTIONS = [
    (
        {"category": {"$eq": "work", "$under": "home"}},
        "where_filter.category",
        'both "work" and under "home"',
    ),
    (
        {"category": {"$in": ["work"], "$under": "home"}},
        "where_filter.category",
        'both "work" and under "home"',
    ),
    ({"category": {"$in": ["work", "homework"], "$under": "home"}}, "where_filter.category", "one of"),
    (
        {"category": "work", "$and": [{"category": {"$under": "home"}}]},
        "where_filter.$and[0].category",
        'contradicts where_filter.category: no value is both "work" and under "home"',
    ),
    (
        {"$and": [{"category": {"$under": "a"}}, {"category": {"$under": "b"}}]},
        "where_filter.$and[1].category",
        'contradicts where_filter.$and[0].category: no value is both under "a" and under "b"',
    ),
    (
        {"$and": [{"category": {"$under": "a.b"}}, {"category": {"$under": "a"}}, {"category": "a.c"}]},
        "where_filter.$and[2].category",
        'no value is both "a.c" and under "a.b"',
    ),
    (
        {"category": {"$in": ["a.x", "b"], "$under": "a", "$ne": "a.x"}},
        "where_filter.category",
        "no value meets all of",
    ),
    ({"context": {"$eq": "work", "$under": "home"}}, "where_filter.context", "under"),
    (
        {"$or": [{"x": 1}, {"category": {"$under": "work"}, "$and": [{"category": {"$under": "workout"}}]}]},
        "where_filter.$or[1].$and[0].category",
        "contradicts where_filter.$or[1].category",
    ),
]


@pytest.mark.parametrize(("flt", "path", "fragment"), UNDER_CONTRADICTIONS)
def test_under_is_checked_with_the_other_conditions_of_its_field(store, flt, path, fragment):
    with pytest.raises(ValidationError) as err:
        compile_filter(store, flt)
    assert err.value.field == "where_filter"
    assert err.value.reason.startswith(path + ":") and fragment in err.value.reason, err.value.reason


def test_under_look_alikes_that_some_value_meets_compile_as_before(store):
    # a value under the path, a path under the other, exclusions (an $under holds every path
    # below it, so no $ne or $nin empties it): the clauses AND-ed, each as it compiles alone
    for flt in (
        {"$and": [{"category": "work.python"}, {"category": {"$under": "work"}}]},
        {"$and": [{"category": {"$in": ["home", "work"]}}, {"category": {"$under": "work"}}]},
        {"$and": [{"category": {"$under": "a"}}, {"category": {"$under": "a.b"}}, {"category": "a.b.c"}]},
        {"$and": [{"category": {"$under": "a.b"}}, {"category": {"$under": "a"}}]},
        {
            "$and": [
                {"category": {"$under": "a"}},
                {"category": {"$ne": "a"}},
                {"category": {"$nin": ["a.b"]}},
            ]
        },
        {"$and": [{"category": {"$under": "work"}}, {"category": {"$contains": "py"}}]},
        {"$and": [{"category": {"$eq": "work", "$under": "work"}}]},
    ):
        expected = "((" + " AND ".join(compile_filter(store, c) for c in flt["$and"]) + "))"
        assert compile_filter(store, flt) == expected, flt
    assert compile_filter(store, {"category": {"$under": "a", "$ne": "a"}}) == (
        "((n.category IS DISTINCT FROM 'a'::text) AND cortex.category_under(n.category, 'a'))"
    )
    assert compile_filter(store, {"$or": [{"category": "work"}, {"category": {"$under": "home"}}]}) != "true"


# values read in the form notes store them (v9)
def test_filter_values_are_read_as_notes_store_them(store):
    nid = store.add(
        "normalised note", user_id="u", category="work/python", tags=[" urgent "], keywords=[" kw "]
    )
    note = store.get(nid, user_id="u")
    assert (note.category, note.tags, note.keywords) == ("work.python", ["urgent"], ["kw"])

    def found(flt):
        got = {r.id for r in store.search("normalised", user_id="u", where_filter=flt, touch=False)}
        # the short-term tier alone: its copy is read through the search's second alias (s)
        stm = {
            r.id
            for r in store.search(
                "normalised", user_id="u", where_filter=flt, touch=False, memory_source="stm"
            )
        }
        assert stm == got, flt
        return got

    for flt in (
        {"category": "work/python"},
        {"category": " work / python "},
        {"category": {"$under": "work/python"}},
        {"category": {"$under": "work/"[:-1]}},
        {"category": {"$in": ["home", "work/python"]}},
        {"tags": " urgent "},
        {"tags": {"$contains": "urgent\u00a0"}},  # stripped as Python strips
        {"tags": {"$in": [" urgent", "x"]}},
        {"tags": [" urgent ", "urgent", " "]},  # the exact list as stored: ["urgent"]
        {"keywords": " kw "},
    ):
        assert found(flt) == {note.id}, flt
    for flt in (
        {"category": {"$ne": "work/python"}},
        {"category": {"$nin": [" work.python"]}},
        {"tags": {"$ne": " urgent"}},
        {"keywords": {"$nin": ["kw "]}},
    ):
        assert found(flt) == set(), flt
    assert compile_filter(store, {"category": "work/python"}) == compile_filter(
        store, {"category": "work.python"}
    )
    assert compile_filter(store, {"tags": [" a ", "a", "b"]}) == compile_filter(store, {"tags": ["a", "b"]})
    # excluded in either spelling: a contradiction, as in stored form
    with pytest.raises(ValidationError) as err:
        compile_filter(store, {"category": {"$eq": "a/b", "$ne": "a.b"}})
    assert err.value.reason.startswith("where_filter.category: no value meets all of")


@pytest.mark.parametrize(
    ("flt", "path", "fragment"),
    [
        ({"category": "..a"}, "where_filter.category", 'no note\'s category is "..a"'),
        ({"category": {"$eq": "a./b"}}, "where_filter.category.$eq", "empty segment"),
        ({"category": " "}, "where_filter.category", "a blank one as none"),
        ({"category": {"$under": " "}}, "where_filter.category.$under", "no note's category"),
        ({"category": {"$under": "..a"}}, "where_filter.category.$under", "not a dot path"),
        ({"category": "a" * 256}, "where_filter.category", "at most 255 characters"),
        ({"category": "a\u0007b"}, "where_filter.category", "control character"),
        ({"category": {"$in": ["..a", "/"]}}, "where_filter.category.$in", "is any of"),
        ({"tags": " "}, "where_filter.tags", 'no note has the tag " "'),
        ({"keywords": {"$contains": ""}}, "where_filter.keywords.$contains", "keyword"),
        ({"tags": {"$in": [" ", ""]}}, "where_filter.tags.$in", "any of the tags"),
        ({"tags": ["a", "b\u0001"]}, "where_filter.tags", "control character"),
        ({"$and": [{"x": 1}, {"tags": " "}]}, "where_filter.$and[1].tags", "no note has"),
    ],
)
def test_values_no_note_holds_are_refused(store, flt, path, fragment):
    with pytest.raises(ValidationError) as err:
        compile_filter(store, flt)
    assert err.value.field == "where_filter"
    assert err.value.reason.startswith(path + ":") and fragment in err.value.reason, err.value.reason


def test_values_in_stored_form_and_harmless_exclusions_compile_as_before(store):
    assert compile_filter(store, {"category": "work.python"}) == "((n.category = 'work.python'::text))"
    assert compile_filter(store, {"tags": "urgent"}) == "(('urgent' = ANY (n.tags)))"
    assert compile_filter(store, {"tags": []}) == "((n.tags = '{}'::text[]))"
    # a value no note holds, where it need not be held: kept as written
    assert (
        compile_filter(store, {"category": {"$ne": "..a"}}) == "((n.category IS DISTINCT FROM '..a'::text))"
    )
    assert "'..a'" in compile_filter(store, {"category": {"$in": ["..a", "b"]}})
    assert compile_filter(store, {"tags": {"$nin": [" "]}}) == "((NOT (n.tags && '{\" \"}'::text[])))"
    # ranges and substrings compare the text as written; other text columns are not categories
    assert "'a/b'" in compile_filter(store, {"category": {"$gte": "a/b"}})
    assert "'a/b'" in compile_filter(store, {"category": {"$contains": "a/b"}})
    assert "'a/b'" in compile_filter(store, {"context": "a/b"})
    assert '" x "' in compile_filter(store, {"cat": " x "})  # a metadata key


# importance is kept from 0 to 1 by the CHECK of notes and stm_notes (v9)
@pytest.mark.parametrize(
    ("flt", "path", "fragment"),
    [
        ({"importance": 2}, "where_filter.importance", "2 is not one"),
        ({"importance": {"$gt": 1}}, "where_filter.importance", "none meets $gt 1"),
        ({"importance": {"$gte": 1.5, "$lte": 3}}, "where_filter.importance", "from 0 to 1"),
        ({"importance": {"$lt": 0}}, "where_filter.importance", "none meets $lt 0"),
        ({"importance": {"$lte": -0.5}}, "where_filter.importance", "from 0 to 1"),
        ({"importance": {"$in": [2, -1]}}, "where_filter.importance", "none of [2, -1] is one"),
        (
            {"$and": [{"importance": {"$gte": 0.5}}, {"importance": {"$gt": 1}}]},
            "where_filter.$and[1].importance",
            "none meets $gt 1",  # the clause alone, as its own level is checked first
        ),
        ({"$not": {"importance": -1}}, "where_filter.$not.importance", "from 0 to 1"),
    ],
)
def test_importance_outside_its_range_is_refused(store, flt, path, fragment):
    with pytest.raises(ValidationError) as err:
        compile_filter(store, flt)
    assert err.value.reason.startswith(path + ":") and fragment in err.value.reason, err.value.reason


def test_importance_within_its_range_and_access_count_compile_as_before(store):
    assert compile_filter(store, {"importance": {"$gte": 1}}) == "((n.importance >= '1'::real))"
    assert compile_filter(store, {"importance": {"$lte": 0}}) == "((n.importance <= '0'::real))"
    assert compile_filter(store, {"importance": 1}) == "((n.importance = '1'::real))"
    assert compile_filter(store, {"importance": {"$in": [2, 0.5]}}) == (
        "((n.importance IN ('2'::real, '0.5'::real)))"
    )
    assert compile_filter(store, {"importance": {"$ne": 2}}) == "((n.importance IS DISTINCT FROM '2'::real))"
    # access_count has no CHECK: a note may be written with any integer
    assert compile_filter(store, {"access_count": {"$lt": 0}}) == "((n.access_count < '0'::integer))"


# a number too small for a real (v10)
@pytest.mark.parametrize(
    ("flt", "path"),
    [
        ({"importance": {"$gt": 1e-50}}, "where_filter.importance.$gt"),
        ({"importance": {"$nin": [0.5, -1e-50]}}, "where_filter.importance.$nin"),
        ({"$and": [{"importance": 1e-46}]}, "where_filter.$and[0].importance"),
    ],
)
def test_a_number_too_small_for_a_real_is_an_error_naming_its_path(store, flt, path):
    with pytest.raises(ValidationError) as err:
        store.search("x", user_id="u", where_filter=flt)
    assert err.value.field == "where_filter"
    assert err.value.reason.startswith(f"{path}: ")
    assert "too small for a real" in err.value.reason


def test_a_small_real_and_zero_still_filter(store):
    # a subnormal real (1e-40) and 0 are values a real holds
    nid = store.add("an unimportant note", user_id="u", importance=0.0)
    found = store.search("unimportant", user_id="u", where_filter={"importance": {"$gt": 1e-40}}, touch=False)
    assert nid not in {r.id for r in found}
    found = store.search("unimportant", user_id="u", where_filter={"importance": {"$lt": 1e-40}}, touch=False)
    assert nid in {r.id for r in found}
    assert compile_filter(store, {"importance": {"$gte": 0}}) == "((n.importance >= '0'::real))"


# one importance or access_count clause: answered at once when it plainly fits (v10), else
# checked in full, with version 9's errors
@pytest.mark.parametrize(
    "flt",
    [
        {"importance": {"$gte": 0.5}},
        {"importance": {"$gt": 0.2, "$lte": 0.8, "$ne": 0.5}},
        {"importance": {"$in": [0.25, 0.75], "$nin": [0.75]}},
        {"importance": {"$gte": 0.9999999}},  # near 1: not plainly, checked in full, fits
        {"importance": 1},
        {"access_count": {"$gte": 1}},
        {"access_count": {"$gt": 1, "$lt": 10}},
        {"access_count": {"$gt": 1, "$lt": 3}},  # only 2 fits: checked in full
    ],
)
def test_one_clause_that_fits_compiles(store, flt):
    with store.engine.connect() as conn:  # the text of the compiler before version 9's checks
        before = conn.execute(
            text("SELECT cortex.compile_filter_v8(CAST(:f AS jsonb), 'n', 'where_filter')"),
            {"f": json.dumps(flt)},
        ).scalar_one()
    assert compile_filter(store, flt) == before != "true"


@pytest.mark.parametrize(
    ("flt", "fragment"),
    [
        ({"importance": {"$gt": 1}}, "importance holds values from 0 to 1"),
        ({"importance": {"$gt": 0.99999999999}}, "importance holds values from 0 to 1"),  # 1 as a real
        ({"importance": {"$lt": 0}}, "importance holds values from 0 to 1"),
        ({"importance": {"$in": [2, 3]}}, "importance holds values from 0 to 1"),
        ({"importance": {"$gt": 0.5, "$gte": 0.9, "$lt": 0.8}}, "is empty"),
        ({"access_count": {"$gt": 1, "$lt": 2}}, "access_count holds whole numbers"),
        ({"access_count": {"$gt": 2147483647}}, "access_count holds whole numbers"),
        ({"access_count": {"$gt": 2, "$lt": 4, "$ne": 3}}, "no value meets"),  # 3 alone, excluded
    ],
)
def test_one_clause_that_cannot_match_is_still_refused(store, flt, fragment):
    with pytest.raises(ValidationError) as err:
        compile_filter(store, flt)
    assert fragment in err.value.reason
