"""Documents as memory: chunking (headings kept with their text, no fragments, heading paths,
determinism) and long notes embedded window by window (found by their end, windows replaced
on update, written by re-embedding)."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from cortex_pg import Chunk, ValidationError, chunk_text
from cortex_pg.embeddings import HashingEmbedder
from cortex_pg.embeddings.windows import text_windows, window_chars
from cortex_pg.store import MemoryStore
from cortex_pg.store import reembed as r

GUIDE = (
    "# Guide\n\nA short introduction.\n\n## Install\n\n"
    + "Download the archive and unpack it into a folder of your choice. " * 25
    + "\n\n## Usage\n\n**Options:**\n\n"
    + "Run the tool with a folder name; it prints what it found, one line per file. " * 20
    + "\n\n### Advanced\n\nThe end.\n"
)


def _is_heading_only(chunk: Chunk) -> bool:
    lines = [x for x in chunk.text.splitlines() if x.strip()]
    return all(x.lstrip().startswith("#") for x in lines)


@pytest.mark.parametrize("size", [200, 400, 1000])
def test_a_heading_is_never_a_chunk_of_its_own_and_no_chunk_is_a_fragment(size):
    chunks = chunk_text(GUIDE, size=size)
    assert len(chunks) >= 2
    assert not any(_is_heading_only(c) for c in chunks)
    assert all(len(c.text) >= size // 5 for c in chunks)
    assert all(len(c.text) <= size + size // 5 for c in chunks)
    # every heading is followed, in its chunk, by text
    for c in chunks:
        lines = [x for x in c.text.splitlines() if x.strip()]
        assert not lines[-1].startswith("#")


def test_chunk_contexts_carry_heading_paths():
    chunks = chunk_text(GUIDE, size=400)
    contexts = [c.context for c in chunks]
    assert "Guide > Install" in contexts and "Guide > Usage" in contexts
    for c in chunks:
        assert c.context is not None and c.context.startswith("Guide")
        if c.text.startswith("Download"):
            assert c.context == "Guide > Install"
    assert chunk_text("Plain text, no headings at all.")[0].context is None


def test_chunking_is_deterministic_and_covers_the_document():
    a, b = chunk_text(GUIDE, size=300, overlap=50), chunk_text(GUIDE, size=300, overlap=50)
    assert a == b
    covered = "".join(GUIDE[c.start : c.end] for c in chunk_text(GUIDE, size=300))
    assert covered.replace("\n", "").replace(" ", "") == GUIDE.replace("\n", "").replace(" ", "")
    assert all(GUIDE[c.start : c.end] == c.text for c in a)


def test_small_documents_are_one_chunk_and_blank_ones_none():
    assert [c.text for c in chunk_text("# Title\n\nTiny.")] == ["# Title\n\nTiny."]
    assert chunk_text("  \n\n ") == []


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"size": 10}, "size"),
        ({"overlap": 600}, "overlap"),
        ({"min_size": -1}, "min_size"),
        ({"section_separator": ""}, "section_separator"),
        ({"size": "1000"}, "size"),
    ],
)
def test_bad_chunking_arguments_name_their_field(kwargs, field):
    with pytest.raises(ValidationError) as info:
        chunk_text("some text", **kwargs)
    assert info.value.field == field


def test_text_windows_cover_a_long_text_with_overlap():
    body = " ".join(f"word{i}" for i in range(2000))
    windows = text_windows(body, 1000)
    assert len(windows) > 1 and all(len(w) <= 1000 for w in windows)
    assert windows[0].startswith("word0 ") and windows[-1].endswith("word1999")
    for left, right in zip(windows, windows[1:], strict=False):
        assert right.split()[0] in left  # consecutive windows overlap
    assert text_windows("short", 1000) == ["short"]
    assert window_chars(HashingEmbedder(window_chars=300)) == 300
    assert window_chars(HashingEmbedder()) == 4096


def _windows(store: MemoryStore, nid: str, model: str | None = None) -> list[int]:
    with store.engine.connect() as conn:
        return list(
            conn.execute(
                text(
                    "SELECT window_no FROM cortex.embeddings WHERE note_id = :id AND kind = 'text' "
                    "AND model = :m ORDER BY window_no"
                ),
                {"id": nid, "m": model or store.embedder.name},
            ).scalars()
        )


LONG = " ".join(
    f"Paragraph {i} tells of the harbour, the ships and the weather of that year." for i in range(60)
)
ENDING = "At last the lighthouse keeper painted the tower bright orange."


@pytest.fixture
def small_window_store(db_url):
    s = MemoryStore.open(db_url, embedder=HashingEmbedder(window_chars=400), auto_migrate=False)
    yield s
    s.close()


def test_a_long_note_is_found_by_a_sentence_from_its_end_by_vector_search_alone(small_window_store):
    store = small_window_store
    nid = store.add(LONG + " " + ENDING, user_id="doc", to_stm=False)
    for i in range(30):  # distractors of one window each
        store.add(f"Note {i} about gardening, tomatoes and roses in spring.", user_id="doc", to_stm=False)
    assert len(_windows(store, nid)) == len(text_windows(LONG + " " + ENDING, 400)) > 5
    # vector only, as the search's HNSW candidates are found: the nearest text row is its last window
    with store.engine.begin() as conn:
        best = conn.execute(
            text(
                "SELECT note_id::text FROM cortex.embeddings WHERE user_id = 'doc' AND kind = 'text' "
                "ORDER BY embedding <=> CAST(:q AS vector) LIMIT 1"
            ),
            {"q": str(store.embedder.embed([ENDING])[0])},
        ).scalar_one()
    assert best == nid
    assert str(store.search(ENDING, user_id="doc", limit=3)[0].id) == nid
    # a query sharing no lexeme with any note (BM25 finds nothing), only word pieces: vector alone
    glued = "lighthousekeeper paintedthetower brightorange"
    [hit] = store.search(glued, user_id="doc", limit=1)
    assert str(hit.id) == nid and not hit.text_score


def test_long_note_windows_are_written_by_every_path_and_replaced_on_update(small_window_store):
    store = small_window_store
    nid = store.add(LONG, user_id="w", to_stm=False)
    n = len(text_windows(LONG, 400))
    assert _windows(store, nid) == list(range(n))
    [mid] = store.add_many([{"content": LONG + " More."}], user_id="w", to_stm=False, bulk=True)
    assert _windows(store, mid) == list(range(len(text_windows(LONG + " More.", 400))))
    store.update(nid, user_id="w", content=LONG[:900])  # shorter: the stale windows go
    assert _windows(store, nid) == list(range(len(text_windows(LONG[:900], 400)))) and n > 3
    store.update(nid, user_id="w", content="Now a short note.")
    assert _windows(store, nid) == [0]
    with store.engine.connect() as conn:
        contexts = conn.execute(
            text("SELECT count(*) FROM cortex.embeddings WHERE note_id = :id AND kind = 'context'"),
            {"id": mid},
        ).scalar_one()
    assert contexts == 1  # the context embedding stays one row


def test_reembed_writes_every_window_and_back_fills_notes_stored_with_one(small_window_store):
    store = small_window_store
    nid = store.add(LONG, user_id="r", to_stm=False)
    short = store.add("A short note.", user_id="r", to_stm=False)
    with store.engine.begin() as conn:  # as stored before long notes had windows
        conn.execute(text("DELETE FROM cortex.embeddings WHERE note_id = :id AND window_no > 0"), {"id": nid})
    assert _windows(store, nid) == [0]
    assert r.backfill(store.engine, store.embedder) == 1  # the active model: windows added
    assert _windows(store, nid) == list(range(len(text_windows(LONG, 400))))
    assert r.backfill(store.engine, store.embedder) == 0  # idempotent
    other = HashingEmbedder(128, name="hashing-128", window_chars=600)
    r.prepare(store.engine, other)
    assert r.backfill(store.engine, other) == 2
    assert _windows(store, nid, "hashing-128") == list(range(len(text_windows(LONG, 600))))
    assert _windows(store, short, "hashing-128") == [0]
    r.activate(store.engine, other)
    assert {m["model"]: m["active"] for m in r.models(store.engine)}["hashing-128"] is True


def test_ingesting_the_same_document_twice_stores_nothing_new(store, tmp_path):
    from cortex_pg.ingest import text_items

    f = tmp_path / "guide.md"
    f.write_text(GUIDE)
    items = text_items(f, size=400)
    assert [i["content"] for i in items] == [c.text for c in chunk_text(GUIDE, size=400)]
    first = store.add_many(items, user_id="g", session_id="doc")
    again = store.add_many(text_items(f, size=400), user_id="g", session_id="doc")
    assert first == again
    assert store.stats(user_id="g")["ltm_notes"] == len({i["content"] for i in items})  # one per text


def test_a_byte_order_mark_is_not_part_of_the_document(store, tmp_path):
    """A file saved with a UTF-8 byte-order mark (as some editors do) gives the chunks, heading
    paths and notes of the same file without it."""
    from cortex_pg.ingest import read_locomo, text_items

    plain, marked = tmp_path / "plain.md", tmp_path / "marked.md"
    plain.write_text(GUIDE, encoding="utf-8")
    marked.write_text(GUIDE, encoding="utf-8-sig")
    assert marked.read_bytes().startswith(b"\xef\xbb\xbf")
    items = text_items(marked, size=400)
    assert items == text_items(plain, size=400)
    assert items[0]["context"] == "Guide" and not items[0]["content"].startswith("\ufeff")
    first = store.add_many(items, user_id="bom", session_id="doc")
    assert store.add_many(text_items(plain, size=400), user_id="bom", session_id="doc") == first
    assert store.get(first[0], user_id="bom").context == "Guide"

    conversation = tmp_path / "conversation.json"
    conversation.write_text(
        '[{"sample_id": "c1", "conversation": {"speaker_a": "A", "speaker_b": "B", '
        '"session_1_date_time": "1:56 pm on 8 May, 2023", '
        '"session_1": [{"speaker": "A", "dia_id": "D1:1", "text": "Hello there"}]}}]',
        encoding="utf-8-sig",
    )
    assert [c.sample_id for c in read_locomo(conversation)] == ["c1"]
