// cortex-pg inspector: a read-only view of one user's memory through the JSON API.
// Reads only: GET routes and POST /search with touch=false. Text from the API is always set
// with textContent (never parsed as HTML). The API key lives in this tab's sessionStorage.
"use strict";

(function () {
  const KEY_STORAGE = "cortex-pg-api-key";
  // bookkeeping columns a history entry carries that say nothing to a reader
  const HIDDEN_HISTORY_KEYS = new Set(["id", "user_id", "seq", "content_hash"]);
  const state = { graphs: {}, lastError: null };
  window.cortexInspector = state; // for tests and the console: state.graphs.note / .entity

  const $ = (id) => document.getElementById(id);

  function el(tag, text, cls) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    if (cls) node.className = cls;
    return node;
  }

  function fmt(x) {
    return x === null || x === undefined ? "–" : Number(x).toFixed(3);
  }

  function short(text, n) {
    const t = String(text).replace(/\s+/g, " ").trim();
    return t.length > n ? t.slice(0, n - 1) + "…" : t;
  }

  function fold(name) {
    return String(name).split(/\s+/).filter(Boolean).join(" ").toLowerCase();
  }

  // data-state: busy while a search runs, then done or error (tests wait on it)
  function status(text, isError, busy) {
    const s = $("status");
    s.textContent = text;
    s.className = isError ? "error" : "muted";
    s.dataset.state = busy ? "busy" : isError ? "error" : "done";
  }

  async function api(path, options) {
    const key = sessionStorage.getItem(KEY_STORAGE);
    const headers = { Accept: "application/json" };
    if (key) headers.Authorization = "Bearer " + key;
    if (options && options.body) headers["Content-Type"] = "application/json";
    const response = await fetch(path, Object.assign({ headers }, options || {}));
    const body = response.status === 204 ? null : await response.json();
    if (!response.ok) {
      const message = body && body.error ? body.error.message : "HTTP " + response.status;
      state.lastError = body;
      throw new Error(message);
    }
    return body;
  }

  // ------------------------------------------------------------------ key
  function showKeyState() {
    const key = sessionStorage.getItem(KEY_STORAGE);
    $("key-state").textContent = key ? "key " + key.slice(0, 10) + "… in use" : "no key";
  }

  $("key-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const key = $("api-key").value.trim();
    if (key) sessionStorage.setItem(KEY_STORAGE, key);
    else sessionStorage.removeItem(KEY_STORAGE);
    $("api-key").value = "";
    showKeyState();
  });

  // ------------------------------------------------------------------ search
  function searchBody() {
    const body = { query: $("q").value, limit: Number($("f-limit").value || 10), touch: false };
    body.memory_source = $("f-source").value;
    body.temporal_weight = Number($("f-temporal").value || 0);
    const text = { session_id: "f-session", date_from: "f-from", date_to: "f-to", now: "f-now", context: "f-context" };
    for (const [field, id] of Object.entries(text)) {
      const value = $(id).value.trim();
      if (value) body[field] = value;
    }
    const where = $("f-where").value.trim();
    if (where) {
      try {
        body.where_filter = JSON.parse(where);
      } catch (err) {
        throw new Error("where_filter: not valid JSON (" + err.message + ")");
      }
    }
    if ($("f-entities").checked) body.entities = true;
    if ($("f-links").checked) body.include_links = true;
    return body;
  }

  function resultRow(r, i) {
    const tr = el("tr");
    if (r.is_linked) tr.className = "linked";
    tr.dataset.noteId = r.note.id;
    tr.appendChild(el("td", r.is_linked ? "↳" : i + 1, "num"));
    const cell = el("td", null, "note");
    const link = el("a", short(r.note.content, 140));
    link.href = "#note-" + r.note.id;
    link.addEventListener("click", (event) => {
      event.preventDefault();
      showNote(r.note.id);
    });
    cell.appendChild(link);
    if (r.is_linked) cell.appendChild(el("div", r.relationship_type + " link", "muted"));
    tr.appendChild(cell);
    for (const [name, value] of [
      ["score", r.score], ["vector", r.semantic_score], ["bm25", r.text_score],
      ["recency", r.recency_score], ["context", r.context_score], ["relevance", r.relevance_score],
    ]) {
      const td = el("td", fmt(value), "num");
      td.dataset.part = name;
      tr.appendChild(td);
    }
    tr.appendChild(el("td", r.note.memory_tier));
    tr.appendChild(el("td", r.note.created_at.slice(0, 19).replace("T", " "), "num"));
    return tr;
  }

  $("search-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const tbody = document.querySelector("#results tbody");
    try {
      const body = searchBody();
      status("searching…", false, true);
      const out = await api("/search", { method: "POST", body: JSON.stringify(body) });
      tbody.replaceChildren(...out.results.map(resultRow));
      status(out.results.length + " result" + (out.results.length === 1 ? "" : "s"));
    } catch (err) {
      tbody.replaceChildren();
      status(err.message, true);
    }
  });

  // ------------------------------------------------------------------ note
  function drawGraph(name, container, elements, root) {
    if (state.graphs[name]) state.graphs[name].destroy();
    const cy = cytoscape({
      container,
      elements,
      layout: { name: "breadthfirst", roots: root ? [root] : undefined, directed: true, padding: 20 },
      style: [
        { selector: "node", style: { label: "data(label)", "font-size": 9, "text-wrap": "ellipsis",
          "text-max-width": 120, "background-color": "#7d95bd", width: 16, height: 16 } },
        { selector: "node.root", style: { "background-color": "#2358a6", width: 22, height: 22 } },
        { selector: "edge", style: { label: "data(label)", "font-size": 8, width: 1.5, "line-color": "#b7c2d3",
          "target-arrow-shape": "triangle", "target-arrow-color": "#b7c2d3", "curve-style": "bezier" } },
      ],
    });
    state.graphs[name] = cy;
    return cy;
  }

  async function showNote(id) {
    const panel = $("note-panel");
    try {
      const depth = Number($("link-depth").value || 2);
      const [links, history] = await Promise.all([
        api("/notes/" + encodeURIComponent(id) + "/links?depth=" + depth),
        api("/notes/" + encodeURIComponent(id) + "/history"),
      ]);
      const note = links.note;
      panel.hidden = false;
      panel.dataset.noteId = note.id;
      $("note-content").textContent = note.content;
      const fields = $("note-fields");
      fields.replaceChildren();
      for (const key of ["id", "session_id", "memory_tier", "created_at", "updated_at", "importance",
                         "tags", "keywords", "context", "category", "access_count", "merged_into"]) {
        const value = note[key];
        fields.appendChild(el("dt", key));
        fields.appendChild(el("dd", Array.isArray(value) ? value.join(", ") : value ?? "–"));
      }
      fields.appendChild(el("dt", "metadata"));
      fields.appendChild(el("dd", JSON.stringify(note.metadata)));

      const list = $("note-links");
      list.replaceChildren();
      if (!links.links.length) list.appendChild(el("li", "no links", "muted"));
      for (const l of links.links) {
        const li = el("li");
        li.dataset.noteId = l.note.id;
        li.appendChild(el("span", l.link_type + " (" + fmt(l.link_strength) + ", " + l.hops + " hop"
          + (l.hops === 1 ? "" : "s") + ") "));
        const a = el("a", short(l.note.content, 100));
        a.addEventListener("click", () => showNote(l.note.id));
        li.appendChild(a);
        list.appendChild(li);
      }
      const nodes = [{ data: { id: note.id, label: short(note.content, 40) }, classes: "root" }];
      const seen = new Set([note.id]);
      const edges = [];
      for (const l of links.links) {
        if (!seen.has(l.note.id)) {
          seen.add(l.note.id);
          nodes.push({ data: { id: l.note.id, label: short(l.note.content, 40) } });
        }
        edges.push({ data: { id: l.via + ">" + l.note.id, source: l.via, target: l.note.id, label: l.link_type } });
      }
      const cy = drawGraph("note", $("note-graph"), nodes.concat(edges.filter((e) => seen.has(e.data.source))), note.id);
      cy.on("tap", "node", (evt) => { if (evt.target.id() !== note.id) showNote(evt.target.id()); });

      const hist = $("note-history");
      hist.replaceChildren();
      for (const h of history) {
        const li = el("li");
        li.appendChild(el("strong", h.op));
        li.appendChild(el("span", " " + h.changed_at.slice(0, 19).replace("T", " ")));
        const changed = Object.keys(h.new || h.old || {}).filter((k) => !HIDDEN_HISTORY_KEYS.has(k));
        for (const k of changed) {
          const before = h.old && k in h.old ? JSON.stringify(h.old[k]) : "";
          const after = h.new && k in h.new ? JSON.stringify(h.new[k]) : "";
          li.appendChild(el("pre", k + ": " + (h.op === "update" ? before + " → " + after : after || before)));
        }
        hist.appendChild(li);
      }
      panel.scrollIntoView({ block: "nearest" });
    } catch (err) {
      status(err.message, true);
    }
  }

  $("link-depth").addEventListener("change", () => {
    const id = $("note-panel").dataset.noteId;
    if (id) showNote(id);
  });

  // ------------------------------------------------------------------ entities
  async function showEntity(name) {
    try {
      const depth = Number($("entity-depth").value || 2);
      const hood = await api("/entities/" + encodeURIComponent(name) + "/related?depth=" + depth);
      $("entity-detail").hidden = false;
      $("entity-heading").textContent = hood.entity.name + " (" + hood.entity.kind + ", "
        + hood.entity.frequency + " note" + (hood.entity.frequency === 1 ? "" : "s") + ")";
      const facts = $("entity-facts");
      facts.replaceChildren(...hood.facts.map((f) => el("li", f.source + " —" + f.relation + "→ " + f.target)));
      const related = $("entity-related");
      related.replaceChildren(...hood.related.map((r) => {
        const li = el("li");
        const a = el("a", r.name);
        a.addEventListener("click", () => { $("entity-name").value = r.name; showEntity(r.name); });
        li.appendChild(a);
        li.appendChild(el("span", " " + r.kind + ", " + r.depth + " hop" + (r.depth === 1 ? "" : "s"), "muted"));
        return li;
      }));
      const root = fold(hood.entity.name);
      const nodes = [{ data: { id: root, label: hood.entity.name }, classes: "root" }];
      for (const r of hood.related) nodes.push({ data: { id: fold(r.name), label: r.name } });
      const ids = new Set(nodes.map((n) => n.data.id));
      const edges = hood.facts
        .filter((f) => ids.has(fold(f.source)) && ids.has(fold(f.target)))
        .map((f, i) => ({ data: { id: "f" + i, source: fold(f.source), target: fold(f.target), label: f.relation } }));
      const cy = drawGraph("entity", $("entity-graph"), nodes.concat(edges), root);
      cy.on("tap", "node", (evt) => {
        const label = evt.target.data("label");
        if (evt.target.id() !== root) { $("entity-name").value = label; showEntity(label); }
      });
    } catch (err) {
      status(err.message, true);
    }
  }

  $("entity-form").addEventListener("submit", (event) => {
    event.preventDefault();
    showEntity($("entity-name").value.trim());
  });

  $("entity-list-button").addEventListener("click", async () => {
    try {
      const found = await api("/entities?limit=50");
      $("entity-list").replaceChildren(...found.map((e) => {
        const li = el("li");
        const a = el("a", e.name + " ·" + e.frequency);
        a.addEventListener("click", () => { $("entity-name").value = e.name; showEntity(e.name); });
        li.appendChild(a);
        return li;
      }));
      if (!found.length) $("entity-list").replaceChildren(el("li", "no entities", "muted"));
    } catch (err) {
      status(err.message, true);
    }
  });

  showKeyState();
})();
