"""Content up to the documented cap (500,000 characters) in any script is stored whole and
searchable; errors name the caller's fields."""

from __future__ import annotations

import itertools

import pytest
from sqlalchemy import text

from cortex_pg import ValidationError
from cortex_pg.store import validation

CYRILLIC = "абвгдежзиклмнопрстуфхцчшэюя"
CJK = "".join(chr(c) for c in range(0x4E00, 0x4E00 + 400))


def _distinct_words(alphabet: str, length: int, first: str) -> str:
    """``first`` then distinct words of ``alphabet`` (every word a new lexeme), ``length`` characters."""
    words = ("".join(p) for n in itertools.count(3) for p in itertools.product(alphabet, repeat=n))
    out, size = [first], len(first)
    for w in words:
        out.append(w)
        size += len(w) + 1
        if size >= length:
            break
    return " ".join(out)[:length]


def test_docs_and_code_agree_on_the_cap():
    assert validation.MAX_CONTENT_LENGTH == 500_000
    assert "500,000 characters" in validation.__doc__
    assert "1,000,000" not in validation.__doc__


@pytest.mark.parametrize(
    ("alphabet", "marker"),
    [(CYRILLIC, "жемчужина"), (CJK, "北京大学"), ("abcdefghijklmnopqrstuvwxyz", "pearlmarker")],
    ids=["cyrillic", "cjk", "latin"],
)
def test_content_up_to_the_cap_is_stored_whole_and_searchable(store, alphabet, marker):
    content = _distinct_words(alphabet, 495_000, marker)
    assert len(content) == 495_000
    nid = store.add(content, user_id="big", to_stm=False)
    assert store.get(nid, user_id="big").content == content  # stored whole
    with store.engine.connect() as conn:
        hit = conn.execute(
            text(
                "SELECT tsv @@ plainto_tsquery('english', :q), length(tsv) > 0 "
                "FROM cortex.notes WHERE user_id = 'big' AND id = :id"
            ),
            {"q": marker, "id": nid},
        ).one()
    assert hit == (True, True)  # the beginning is full-text indexed
    assert store.search(marker, user_id="big", limit=1)[0].note.id == nid


def test_a_tsvector_that_does_not_fit_indexes_a_prefix(store):
    """Over 1 MB of tsvector: the indexed text is a prefix, so a word near the end is not
    matched by full text (documented), while the note itself is whole."""
    content = _distinct_words(CYRILLIC, 499_000, "начало") + " конецтекста"
    nid = store.add(content, user_id="p", to_stm=False)
    with store.engine.connect() as conn:
        start, end, whole = conn.execute(
            text(
                "SELECT tsv @@ plainto_tsquery('english', 'начало'), "
                "tsv @@ plainto_tsquery('english', 'конецтекста'), content = :c "
                "FROM cortex.notes WHERE user_id = 'p' AND id = :id"
            ),
            {"id": nid, "c": content},
        ).one()
    assert (start, end, whole) == (True, False, True)


def test_update_to_long_cyrillic_content_works(store):
    nid = store.add("short note", user_id="u")
    long = _distinct_words(CYRILLIC, 495_000, "обновление")
    assert store.update(nid, user_id="u", content=long).content == long
    with store.engine.connect() as conn:
        tiers = conn.execute(
            text(
                "SELECT (SELECT content FROM cortex.notes WHERE id = :id), "
                "(SELECT content FROM cortex.stm_notes WHERE id = :id)"
            ),
            {"id": nid},
        ).one()
    assert tiers == (long, long)


def test_over_the_cap_names_content(store):
    with pytest.raises(ValidationError) as info:
        store.add("я" * 500_001, user_id="u")
    assert info.value.field == "content"
    with pytest.raises(ValidationError) as info:
        store.add_many([{"content": "ok"}, {"content": "я" * 500_001}], user_id="u")
    assert info.value.field == "items[1].content"


def test_metadata_over_its_cap_names_metadata_and_stores_nothing(store):
    near = {"notes": "x" * 99_900}  # under 100,000 characters of JSON: stored whole
    nid = store.add("a note with long metadata", user_id="meta", metadata=near)
    assert store.get(nid, user_id="meta").metadata == near
    with pytest.raises(ValidationError) as info:
        store.add("a note with too much metadata", user_id="meta", metadata={"notes": "x" * 100_000})
    assert info.value.field == "metadata" and "100,000" in info.value.reason
    with pytest.raises(ValidationError) as info:
        store.update(nid, user_id="meta", metadata={f"k{i}": i for i in range(20_000)})
    assert info.value.field == "metadata"
    assert store.count(user_id="meta") == 1 and store.get(nid, user_id="meta").metadata == near
    # the cap holds for the merged result of an update too, which is rolled back
    with pytest.raises(ValidationError) as info:
        store.update(nid, user_id="meta", metadata={"more": "y" * 60_000})
    assert info.value.field == "metadata" and "merged" in info.value.reason
    assert store.get(nid, user_id="meta").metadata == near
    # a where_filter is not stored: a long one is no metadata and has no such cap
    ids = [f"00000000-0000-4000-8000-{i:012d}" for i in range(3_000)]
    assert store.search("long metadata", user_id="meta", where_filter={"ref": {"$in": ids}}) == []


def test_a_long_note_is_embedded_window_by_window(store):
    from cortex_pg.embeddings.windows import MAX_WINDOW_CHARS

    head = "x" * MAX_WINDOW_CHARS  # the hashing embedder's window: 4,096 characters
    a = store.add(head + " tail one", user_id="w", to_stm=False)
    b = store.add(head + " tail two", user_id="w", to_stm=False)
    with store.engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT note_id::text, window_no, embedding::text FROM cortex.embeddings "
                "WHERE user_id = 'w' AND kind = 'text' ORDER BY note_id, window_no"
            )
        ).all()
    windows = {(r[0], r[1]): r[2] for r in rows}
    assert sorted(k for n, k in windows if n == a) == [0, 1] == sorted(k for n, k in windows if n == b)
    assert windows[(a, 0)] == windows[(b, 0)]  # the same first window
    assert windows[(a, 1)] != windows[(b, 1)]  # the tails differ, and are embedded


def test_server_errors_name_the_callers_field(store):
    from cortex_pg.errors import translate_db_errors

    with pytest.raises(ValidationError) as info, translate_db_errors("content"), store.engine.begin() as conn:
        conn.execute(text("SELECT 1 / 0"))  # 22012, no column named
    assert info.value.field == "content"
    with pytest.raises(ValidationError) as info, translate_db_errors(), store.engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO cortex.notes (id, user_id, content, created_at) "
                "VALUES (gen_random_uuid(), 'u', 'x', NULL)"
            )
        )  # 23502 on created_at
    assert info.value.field == "time"  # the API's name, not the column's


def test_a_notes_short_fields_have_limits_that_name_the_field(store):
    """memory_type 255 characters, context 10,000, keywords and tags 1,000 of 255 characters
    each, a link's reason 10,000: at the limit stored, past it refused naming the field."""
    assert "10,000" in validation.__doc__ and "1,000" in validation.__doc__
    tags = [f"t{i}" for i in range(validation.MAX_LIST_ITEMS)]
    nid = store.add(
        "a note at every limit",
        user_id="lim",
        memory_type="m" * 255,
        context="c" * 10_000,
        tags=[*tags, *tags, " "],  # repeats and blanks are dropped, not counted
        keywords=["k" * 255],
    )
    note = store.get(nid, user_id="lim")
    assert (note.memory_type, note.context) == ("m" * 255, "c" * 10_000)
    assert note.tags == tags and note.keywords == ["k" * 255]
    too_much = [
        ({"memory_type": "m" * 256}, "memory_type"),
        ({"context": "c" * 10_001}, "context"),
        ({"tags": [*tags, "one more"]}, "tags"),
        ({"keywords": [f"k{i}" for i in range(1_001)]}, "keywords"),
        ({"keywords": ["ok", "k" * 256]}, "keywords[1]"),
        ({"tags": ["  " + "t" * 256 + "  "]}, "tags[0]"),
    ]
    for fields, field in too_much:
        with pytest.raises(ValidationError) as info:
            store.add("a note past a limit", user_id="lim", **fields)
        assert info.value.field == field, fields
        with pytest.raises(ValidationError) as info:
            store.update(nid, user_id="lim", **fields)
        assert info.value.field == field, fields
    with pytest.raises(ValidationError) as info:
        store.add_many([{"content": "ok"}, {"content": "ok too", "context": "c" * 10_001}], user_id="lim")
    assert info.value.field == "items[1].context"
    other = store.add("another note", user_id="lim")
    store.update(nid, user_id="lim", links={other: {"reason": "r" * 10_000}})
    with pytest.raises(ValidationError) as info:
        store.update(nid, user_id="lim", links={other: {"reason": "r" * 10_001}})
    assert info.value.field == f"links[{other!r}].reason"
    assert store.count(user_id="lim") == 2 and store.get(nid, user_id="lim").memory_type == "m" * 255


def test_blank_tags_and_memory_types_by_the_invisible_rule(store):
    nid = store.add("tagged", user_id="u", tags=["\u2800", "ok", "\u200b", " \u3164 "], keywords=["\u0301"])
    note = store.get(nid, user_id="u")
    assert (note.tags, note.keywords) == (["ok"], [])
    for bad in ("\u3164", "\u200b", "\u0301", "\ud800"):
        with pytest.raises(ValidationError) as err:
            store.add("typed", user_id="u", memory_type=bad)
        assert err.value.field == "memory_type"
        with pytest.raises(ValidationError) as err:
            store.update(nid, user_id="u", memory_type=bad)
        assert err.value.field == "memory_type"


@pytest.mark.parametrize("bulk", [False, True])
def test_an_importance_a_real_cannot_hold_is_named(store, bulk):
    with pytest.raises(ValidationError) as err:
        store.add_many([{"content": "tiny", "importance": 1e-50}], user_id="u", bulk=bulk)
    assert err.value.field == "items[0].importance" and "too small for a real" in err.value.reason
    nid = store.add("small but a real", user_id="u", importance=1e-45)
    assert store.get(nid, user_id="u").importance > 0
