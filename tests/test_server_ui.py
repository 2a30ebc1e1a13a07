"""The inspector page (/ui) in a real browser: Chromium from the system's packages, driven by
Playwright, against the app served by uvicorn on loopback and a real database under RLS.

A user pastes a key, searches with filters, reads the score parts, opens a note (its fields,
history, links and their graph), follows a link, and walks an entity's neighbourhood; errors
show the API's message naming the field. The page only reads: no access counted, no history
written, and it loads nothing but its own files (no console error, no request elsewhere).
"""

from __future__ import annotations

import re

import pytest

from tests.helpers.browser import ARGS, chromium, serve
from tests.helpers.service import app, key_for, owner_engine, rls_store  # noqa: F401


@pytest.fixture(scope="module")
def browser():
    path = chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=path, headless=True, args=ARGS)
        yield b
        b.close()


@pytest.fixture
def memory(rls_store):  # noqa: F811
    """Notes of user maya: two linked ones about her dog, one about work, one with facts."""
    add = lambda content, **kw: rls_store.add(content, user_id="maya", **kw)  # noqa: E731
    dog = add("Maya adopted a golden retriever named Max.", time="2024-03-01T10:00:00Z", tags=["pets"])
    swim = add("Max the golden retriever loves swimming in the lake.", time="2024-03-04T10:00:00Z")
    add("The quarterly report is due on Friday.", time="2024-03-05T10:00:00Z", tags=["work"])
    add("Maya works at Acme and knows Bob.", time="2024-03-06T10:00:00Z")
    add("Bob likes Jazz.", time="2024-03-07T10:00:00Z")
    rls_store.update(dog, user_id="maya", links={swim: {"type": "extends", "strength": 0.9}})
    rls_store.update(dog, user_id="maya", importance=0.9)
    return {"dog": dog, "swim": swim}


@pytest.fixture
def page(browser, app, memory):  # noqa: F811
    with serve(app) as url:
        context = browser.new_context()
        pg = context.new_page()
        problems: list[str] = []
        pg.on(
            "console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None
        )
        pg.on("pageerror", lambda e: problems.append(f"page error: {e}"))
        pg.on("request", lambda r: None if r.url.startswith(url) else problems.append(f"request to {r.url}"))
        pg.goto(f"{url}/ui")
        yield pg, problems
        context.close()


def _use_key(pg, key: str) -> None:  # noqa: ANN001
    pg.fill("#api-key", key)
    pg.click("#key-form button")
    pg.wait_for_selector("#key-state:has-text('in use')")


def _search(pg, query: str) -> None:  # noqa: ANN001
    pg.fill("#q", query)
    pg.evaluate("() => { document.querySelector('#status').dataset.state = 'sent'; }")
    pg.click("#search-button")
    pg.wait_for_selector("#status[data-state=done], #status[data-state=error]")


def test_search_open_a_note_see_its_links_history_and_graph(page, key_for, memory, rls_store):  # noqa: F811
    pg, problems = page
    _use_key(pg, key_for("maya"))
    _search(pg, "golden retriever")
    rows = pg.locator("#results tbody tr")
    assert rows.count() >= 2
    assert "golden retriever" in rows.nth(0).locator("td.note").inner_text()
    # every score part is shown; vector and BM25 are numbers, context is empty without a context
    first = rows.nth(0)
    for part in ("score", "vector", "bm25", "recency", "relevance"):
        assert re.fullmatch(r"-?\d+\.\d{3}", first.locator(f"td[data-part={part}]").inner_text()), part
    assert float(first.locator("td[data-part=bm25]").inner_text()) > 0
    assert first.locator("td[data-part=context]").inner_text() == "–"

    # filters: a context fills the context part; a where_filter narrows to the pets note
    pg.fill("#f-context", "animals and pets")
    pg.fill("#f-where", '{"tags": {"$contains": "pets"}}')
    _search(pg, "golden retriever")
    assert pg.locator("#status").inner_text() == "1 result"
    assert re.fullmatch(r"-?\d+\.\d{3}", rows.nth(0).locator("td[data-part=context]").inner_text())
    assert rows.nth(0).get_attribute("data-note-id") == memory["dog"]

    # open the note: fields, links, history, graph
    rows.nth(0).locator("td.note a").click()
    pg.wait_for_selector(f"#note-panel[data-note-id='{memory['dog']}']")
    assert pg.locator("#note-content").inner_text() == "Maya adopted a golden retriever named Max."
    link = pg.locator("#note-links li").first
    assert link.get_attribute("data-note-id") == memory["swim"]
    assert "extends" in link.inner_text() and "swimming in the lake" in link.inner_text()
    history = pg.locator("#note-history li")
    assert history.count() == 2  # links live in their own table; the importance change is recorded
    assert [history.nth(i).locator("strong").inner_text() for i in range(2)] == ["insert", "update"]
    assert "importance: 0.5 → 0.9" in history.nth(1).inner_text()
    graph = pg.evaluate(
        "() => { const g = cortexInspector.graphs.note; return {nodes: g.nodes().map(n => n.id()),"
        " edges: g.edges().map(e => [e.source().id(), e.target().id(), e.data('label')])}; }"
    )
    assert sorted(graph["nodes"]) == sorted([memory["dog"], memory["swim"]])
    assert graph["edges"] == [[memory["dog"], memory["swim"], "extends"]]
    assert pg.locator("#note-graph canvas").count() >= 1  # drawn by the vendored Cytoscape.js

    # follow the link: the linked note opens, its reciprocal link points back
    link.locator("a").click()
    pg.wait_for_selector(f"#note-panel[data-note-id='{memory['swim']}']")
    back = pg.locator("#note-links li").first
    assert back.get_attribute("data-note-id") == memory["dog"] and "extended_by" in back.inner_text()

    # read-only: nothing was counted as accessed, no history written by the page
    assert rls_store.get(memory["dog"], user_id="maya").access_count == 0
    assert len(rls_store.history(memory["dog"], user_id="maya")) == 2
    assert problems == []


def test_an_entitys_neighbourhood_as_a_graph(page, key_for):  # noqa: F811
    pg, problems = page
    _use_key(pg, key_for("maya"))
    pg.click("#entity-list-button")
    pg.wait_for_selector("#entity-list li a")
    assert "Maya" in pg.locator("#entity-list").inner_text()
    pg.fill("#entity-name", "maya")
    pg.click("#entity-form button[type=submit]")
    pg.wait_for_selector("#entity-detail:not([hidden])")
    assert pg.locator("#entity-heading").inner_text().startswith("Maya (person")
    related = pg.locator("#entity-related").inner_text()
    assert "Acme" in related and "Bob" in related and "Jazz" in related  # Jazz: 2 hops, via Bob
    facts = pg.locator("#entity-facts").inner_text()
    assert "works_at" in facts and "likes" in facts
    nodes = pg.evaluate("() => cortexInspector.graphs.entity.nodes().map(n => n.data('label')).sort()")
    assert {"Maya", "Acme", "Bob", "Jazz"} <= set(nodes)
    edges = pg.evaluate("() => cortexInspector.graphs.entity.edges().map(e => e.data('label')).sort()")
    assert {"works_at", "knows", "likes"} <= set(edges)
    # click a neighbour in the list: its own neighbourhood
    pg.locator("#entity-related a", has_text="Bob").click()
    pg.wait_for_selector("#entity-heading:has-text('Bob')")
    assert problems == []


def test_errors_show_the_field_and_a_bad_key_is_refused(page, key_for):  # noqa: F811
    pg, problems = page
    _use_key(pg, "cpk_" + "x" * 43)
    _search(pg, "golden retriever")
    assert pg.locator("#status").inner_text() == "Authorization: unknown or revoked API key"
    assert pg.locator("#results tbody tr").count() == 0
    _use_key(pg, key_for("maya"))
    pg.fill("#f-where", "{not json")
    _search(pg, "golden retriever")
    assert pg.locator("#status").inner_text().startswith("where_filter: not valid JSON")
    pg.fill("#f-where", '{"tags": {"$regex": "x"}}')
    _search(pg, "golden retriever")
    assert pg.locator("#status").inner_text().startswith("where_filter: ")
    pg.fill("#f-where", "")
    pg.fill("#f-from", "2024-03-03T00:00:00Z")
    _search(pg, "golden retriever")
    ids = pg.locator("#results tbody tr").evaluate_all("rows => rows.map(r => r.dataset.noteId)")
    assert ids and all(i for i in ids)
    assert "Maya adopted" not in pg.locator("#results").inner_text()  # 1 March is before the window
    problems = [p for p in problems if "401" not in p and "422" not in p]  # the refused requests above
    assert problems == []
