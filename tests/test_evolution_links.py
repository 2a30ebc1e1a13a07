"""Reciprocal links, links set by hand, cortex.linked_notes and search(include_links=True)."""

from __future__ import annotations

import itertools

import pytest
from sqlalchemy import text

from cortex_pg import ValidationError
from cortex_pg.evolution import get_links, linked_notes, set_links
from cortex_pg.store.links import reciprocal_strength, reciprocal_type


def test_reciprocal_rules():
    assert reciprocal_type("supports") == "supported_by"
    assert reciprocal_type("supported_by") == "supports"
    assert reciprocal_type("prerequisite") == "depends_on"
    assert reciprocal_type("causal") == "effect_of"
    assert reciprocal_type("example") == "exemplified_by"
    assert reciprocal_type("related") == "related"
    assert reciprocal_type("similar") == "similar"
    assert reciprocal_strength(0.5) == pytest.approx(0.65)  # floor
    assert reciprocal_strength(0.9) == pytest.approx(0.81)


def test_update_links_writes_reciprocals(store):
    a = store.add("alpha note about gardens", user_id="u")
    b = store.add("beta note about tomatoes", user_id="u")
    c = store.add("gamma note about soil", user_id="u")
    store.update(
        a,
        user_id="u",
        links={
            b: {"type": "supports", "strength": 0.85, "reason": "same garden"},
            c: {"type": "related", "strength": 0.4},
        },
    )
    out_a = get_links(store, a, user_id="u")
    assert out_a[b]["type"] == "supports" and out_a[b]["strength"] == pytest.approx(0.85)
    assert out_a[c]["type"] == "related" and out_a[c]["strength"] == pytest.approx(0.4)
    back_b = get_links(store, b, user_id="u")[a]
    assert back_b["type"] == "supported_by"
    assert back_b["strength"] == pytest.approx(max(0.65, 0.9 * 0.85))
    assert back_b["reason"] == "Reciprocal of: same garden"
    assert get_links(store, c, user_id="u")[a]["strength"] == pytest.approx(0.65)
    # setting again replaces (type and strength), reciprocal follows
    set_links(store, a, {b: {"type": "contradicts", "strength": 0.7, "reason": "changed"}}, user_id="u")
    assert get_links(store, a, user_id="u")[b]["type"] == "contradicts"
    assert get_links(store, b, user_id="u")[a]["type"] == "contradicted_by"


def test_links_refuse_self_other_user_and_bad_values(store):
    a = store.add("one", user_id="u")
    other = store.add("two", user_id="v")
    with pytest.raises(ValidationError):
        store.update(a, user_id="u", links={a: {"type": "related", "strength": 0.9}})
    with pytest.raises(ValidationError) as err:  # another tenant's note is no note of this user
        store.update(a, user_id="u", links={other: {"type": "related", "strength": 0.9}})
    assert err.value.field == f"links[{other!r}]"
    b = store.add("three", user_id="u")
    with pytest.raises(ValidationError):
        store.update(a, user_id="u", links={b: {"type": "related", "strength": 1.5}})
    with pytest.raises(ValidationError):
        store.update(a, user_id="u", links={"not-a-uuid": {}})
    for blank in ("", "  ", 0, False):  # a type given but blank is an error, not the default type
        with pytest.raises(ValidationError) as err:
            store.update(a, user_id="u", links={b: {"type": blank}})
        assert err.value.field.endswith(".type")
    for bad in ("rel\x00ated", "rel\ud800", "İ" * 64):  # named as the link's type (the last: 128 lower-cased)
        for write in (
            lambda t: store.update(a, user_id="u", links={b: {"type": t}}),
            lambda t: store.set_links(a, {b: {"type": t}}, user_id="u"),
            lambda t: store.add("four", user_id="u", links={b: {"type": t}}),
        ):
            with pytest.raises(ValidationError) as err:
                write(bad)
            assert err.value.field == f"links[{b!r}].type"
    with store.engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM cortex.note_links")).scalar_one() == 0


@pytest.fixture
def graph(store):
    """a -> b -> c -> d -> a (a cycle, one-way only so depths are exact) plus a -> e."""
    ids = {k: store.add(f"graph node {k} " + k * 5, user_id="g") for k in "abcde"}
    rows = [("a", "b", 0.9), ("b", "c", 0.8), ("c", "d", 0.5), ("d", "a", 0.9), ("a", "e", 0.3)]
    with store.engine.begin() as conn:
        for s, t, w in rows:
            conn.execute(
                text(
                    "INSERT INTO cortex.note_links (user_id, source_id, target_id, type, strength) "
                    "VALUES ('g', :s, :t, 'related', :w)"
                ),
                {"s": ids[s], "t": ids[t], "w": w},
            )
    return ids


def test_linked_notes_depths_with_cycle(store, graph):
    name = {v: k for k, v in graph.items()}

    def walk(depth, min_strength=0.0):
        got = linked_notes(store, graph["a"], depth=depth, min_strength=min_strength, user_id="g")
        return {name[x.note.id]: (x.hops, round(x.path_strength, 4)) for x in got}

    assert walk(1) == {"b": (1, 0.9), "e": (1, 0.3)}
    assert walk(2) == {"b": (1, 0.9), "e": (1, 0.3), "c": (2, 0.72)}
    assert walk(3) == {"b": (1, 0.9), "e": (1, 0.3), "c": (2, 0.72), "d": (3, 0.36)}
    # the cycle returns to a: never listed, never walked again
    assert walk(10) == walk(3)
    assert walk(3, min_strength=0.5) == {"b": (1, 0.9), "c": (2, 0.72)}
    # from c the cycle runs c -> d -> a -> b (and a -> e)
    got = linked_notes(store, graph["c"], depth=3, user_id="g")
    assert [(name[x.note.id], x.hops) for x in got] == [("d", 1), ("a", 2), ("b", 3), ("e", 3)]
    assert [name[p] for p in got[2].path] == ["c", "d", "a", "b"]


def _insert_links(store, user, rows):
    with store.engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO cortex.note_links (user_id, source_id, target_id, type, strength) "
                "SELECT :u, s, t, 'related', w FROM unnest(CAST(:s AS uuid[]), CAST(:t AS uuid[]), "
                "CAST(:w AS real[])) AS r(s, t, w)"
            ),
            {"u": user, "s": [r[0] for r in rows], "t": [r[1] for r in rows], "w": [r[2] for r in rows]},
        )


def _shortest_strongest(edges, start, depth, floor):
    """The documented result by enumerating every simple path (what linked_notes v1 did):
    note -> (fewest hops, strongest product among them), paths cut below ``floor``."""
    out = {}

    def dfs(node, path, strength):
        if len(path) > depth:
            return
        for target, w in edges.get(node, []):
            if target in path or strength * w < floor:
                continue
            hops, best = out.get(target, (depth + 1, -1.0))
            if (len(path), -strength * w) < (hops, -best):
                out[target] = (len(path), strength * w)
            dfs(target, [*path, target], strength * w)

    dfs(start, [start], 1.0)
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_linked_notes_equals_the_shortest_strongest_simple_path(store, seed):
    import random

    rng = random.Random(seed)
    ids = [store.add(f"walk note {seed} {i}", user_id="w") for i in range(14)]
    edges: dict[str, list[tuple[str, float]]] = {}
    rows = []
    for a in ids:
        for b in rng.sample(ids, 4):
            if a != b and all(b != t for t, _ in edges.get(a, [])):
                w = rng.choice([0.2, 0.4, 0.5, 0.7, 0.9, 1.0])
                edges.setdefault(a, []).append((b, w))
                rows.append((a, b, w))
    _insert_links(store, "w", rows)
    for depth, floor in ((2, 0.0), (4, 0.0), (6, 0.3), (6, 0.05)):
        expected = _shortest_strongest(edges, ids[0], depth, floor)
        got = linked_notes(store, ids[0], depth=depth, min_strength=floor, user_id="w")
        assert {x.note.id: (x.hops, pytest.approx(x.path_strength)) for x in got} == expected
        for x in got:  # the path is a real one: start .. note, each step a link, its product
            assert x.path[0] == ids[0] and x.path[-1] == x.note.id and len(x.path) == x.hops + 1
            assert len(set(x.path)) == len(x.path) and x.via == x.path[-2]
            product = 1.0
            for s, t in itertools.pairwise(x.path):
                product *= dict(edges[s])[t]
            assert product == pytest.approx(x.path_strength)


def test_the_floor_is_met_by_a_product_equal_to_it(store):
    a, b, c = (store.add(f"floor note {k}", user_id="f") for k in "abc")
    _insert_links(store, "f", [(a, b, 0.7), (b, c, 0.7)])  # stored as real: 0.7 x 0.7 = 0.48999998
    got = linked_notes(store, a, depth=2, min_strength=0.49, user_id="f")
    assert [(x.note.id, x.hops) for x in got] == [(b, 1), (c, 2)]


def test_a_densely_linked_neighbourhood_is_walked_by_hops_not_paths(store):
    """40 notes, every one linked to every other: v1 listed every simple path (about 10^15 at
    depth 10); each note is one hop away."""
    ids = [store.add(f"dense note {i}", user_id="d") for i in range(40)]
    _insert_links(store, "d", [(a, b, 0.9) for a in ids for b in ids if a != b])
    got = linked_notes(store, ids[0], depth=10, min_strength=0.1, user_id="d")
    assert sorted(x.note.id for x in got) == sorted(ids[1:]) and {x.hops for x in got} == {1}


def test_linked_notes_sql_is_callable_from_psql(store, graph):
    with store.engine.connect() as conn:
        rows = conn.execute(
            text("SELECT id, hops FROM cortex.linked_notes('g', :id, 2, 0)"), {"id": graph["a"]}
        ).all()
        assert len(rows) == 3
        with pytest.raises(Exception, match="p_depth"):
            conn.execute(text("SELECT * FROM cortex.linked_notes('g', :id, 0, 0)"), {"id": graph["a"]})


def test_search_include_links(store):
    a = store.add("The red bicycle has a flat tyre", user_id="s")
    b = store.add("Buy a puncture repair kit on Saturday", user_id="s")
    c = store.add("Quarterly tax return is due in April", user_id="s")
    store.update(a, user_id="s", links={b: {"type": "causal", "strength": 0.8, "reason": "flat tyre"}})
    plain = store.search("red bicycle flat tyre", user_id="s", limit=1, touch=False)
    assert [r.id for r in plain] == [a]
    linked = store.search("red bicycle flat tyre", user_id="s", limit=1, touch=False, include_links=True)
    assert [r.id for r in linked] == [a, b]
    extra = linked[1]
    assert extra.is_linked and not linked[0].is_linked
    assert extra.relationship_type == "causal"
    assert extra.relationship_strength == pytest.approx(0.8)
    assert extra.relationship_reason == "flat tyre"
    assert extra.linked_from == a
    d = extra.to_dict()
    assert d["is_linked"] is True and d["relationship_type"] == "causal"
    # capped at `limit` extra rows, nothing duplicated
    # update(links=...) sets the note's links: keep the one to b, add one to c
    store.update(
        a,
        user_id="s",
        links={
            b: {"type": "causal", "strength": 0.8, "reason": "flat tyre"},
            c: {"type": "related", "strength": 0.7},
        },
    )
    two = store.search("red bicycle flat tyre", user_id="s", limit=1, touch=False, include_links=True)
    assert len(two) == 2 and two[1].id == b
    three = store.search("bicycle tyre puncture", user_id="s", limit=2, touch=False, include_links=True)
    ids = [r.id for r in three]
    assert len(ids) == len(set(ids)) == 3 and c in ids


def test_add_with_links_writes_them_in_the_notes_transaction(store):
    a = store.add("the first note", user_id="u")
    b = store.add("the second note", user_id="u", links={a: {"type": "supports", "strength": 0.8}})
    assert get_links(store, b, user_id="u")[a]["type"] == "supports"
    assert b in get_links(store, a, user_id="u")  # with its reciprocal
    missing = "11111111-1111-4111-8111-111111111111"
    with pytest.raises(ValidationError) as err:
        store.add("a third note", user_id="u", links={missing: {}})
    assert err.value.field == f"links[{missing!r}]"
    assert store.count(user_id="u") == 2  # nothing stored
    with pytest.raises(ValidationError):
        store.add("an STM-only note", user_id="u", links={a: {}}, to_ltm=False)
    # the same text again is the same note: the links given replace its links
    assert store.add("the second note", user_id="u", links={}) == b
    assert get_links(store, b, user_id="u") == {}


def test_replacing_a_notes_links_keeps_every_link_paired(store):
    """A link and its reciprocal are one relation: replacing a note's links drops both halves
    of each pair it no longer has, including pairs another note made."""
    a, b, c, d = (store.add(f"paired note {k}", user_id="u") for k in "abcd")

    def pairs():
        with store.engine.connect() as conn:
            rows = conn.execute(text("SELECT source_id::text, target_id::text FROM cortex.note_links")).all()
        return {tuple(r) for r in rows}

    store.update(a, user_id="u", links={b: {}, d: {}})
    store.update(b, user_id="u", links={c: {}})  # b -> a (a's reciprocal) is dropped: a -> b goes too
    assert pairs() == {(a, d), (d, a), (b, c), (c, b)}
    store.update(a, user_id="u", links={})
    assert pairs() == {(b, c), (c, b)}
    for s, t in pairs():
        assert (t, s) in pairs()
