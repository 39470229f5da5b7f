"use strict";
// The fleetwave console: one hash-routed page over the hub's API.
//
// Everything from the API is shown with textContent: object names, labels
// and reasons come from the config repository and are never parsed as HTML.
// Every second the console reads the summary (the cheap, live part) and the
// data of the page on screen, and redraws a part only when its data changed,
// so forms being edited and open details stay as they are.
(function () {
  const $ = (id) => document.getElementById(id);
  const TOKEN_KEY = "fleetwave.token";
  const RANK = { viewer: 1, operator: 2, admin: 3 };
  const MAX_LABELS = 16;
  const MAX_LABEL_LEN = 63;
  const counters = [["total", "total"], ["done", "done"], ["in-progress", "in_progress"],
    ["pending", "pending"], ["failed", "failed"], ["skipped", "skipped"]];

  const state = {
    me: null,           // {name, role} of the token, null when none is accepted
    route: { page: "overview", query: {} },
    summary: null,
    seen: {},           // part -> JSON of the data it was last drawn from
    laneUnsupported: false,
    laneCache: {},      // rollout id -> {updated, lanes: [...]}
    lanes: new Set(),
    openOutputs: new Set(),
  };

  // ---- small DOM helpers ----

  const show = (v) => (v === undefined || v === null || v === "") ? "-" : String(v);
  function text(el, v) { el.textContent = show(v); return el; }
  function el(tag, cls, v) {
    const e = document.createElement(tag);
    if (cls) { e.className = cls; }
    if (v !== undefined) { e.textContent = show(v); }
    return e;
  }
  function cell(row, v, cls) {
    const td = text(el("td", cls), v);
    row.appendChild(td);
    return td;
  }
  function link(href, v, cls) {
    const a = el("a", cls, v);
    a.href = href;
    return a;
  }
  function badge(status) {
    return el("span", "status status-" + (status || "none"), status || "-");
  }
  function chips(labels) {
    const span = el("span");
    const keys = Object.keys(labels || {}).sort();
    if (keys.length === 0) { span.textContent = "-"; }
    for (const k of keys) { span.appendChild(el("span", "chip", k + "=" + labels[k])); }
    return span;
  }
  // fill replaces tbody id's rows, one per entry, or one saying there is none.
  function fill(id, entries, cols, none, row) {
    const rows = entries.map((e) => { const tr = document.createElement("tr"); row(e, tr); return tr; });
    if (rows.length === 0) {
      const tr = document.createElement("tr");
      cell(tr, none, "empty").colSpan = cols;
      rows.push(tr);
    }
    $(id).replaceChildren(...rows);
  }
  // changed says whether part's data differs from when it was last drawn.
  function changed(part, data) {
    const j = JSON.stringify(data === undefined ? null : data);
    if (state.seen[part] === j) { return false; }
    state.seen[part] = j;
    return true;
  }
  function iso(t) {
    if (!t) { return ""; }
    const d = new Date(t);
    if (isNaN(d.getTime()) || d.getTime() <= 0) { return ""; }
    return d.toISOString().replace(/\.\d{3}Z$/, "Z");
  }
  function when(t) {
    const s = iso(t);
    return s ? new Date(t).toLocaleString() : "";
  }
  function span(ms) {
    const abs = Math.abs(ms) / 1000;
    const units = [[86400 * 30, "month"], [86400, "day"], [3600, "hour"], [60, "minute"], [1, "second"]];
    for (const [n, name] of units) {
      if (abs >= n) { const v = Math.floor(abs / n); return v + " " + name + (v === 1 ? "" : "s"); }
    }
    return "0 seconds";
  }
  function relative(t) {
    if (!iso(t)) { return ""; }
    const ms = new Date(t).getTime() - Date.now();
    return ms >= 0 ? "in " + span(ms) : span(ms) + " ago";
  }
  function short(commit) { return (commit || "").slice(0, 12); }
  function fileError(e) {
    let s = e.path || "";
    if (e.line) { s += ":" + e.line; if (e.col) { s += ":" + e.col; } }
    return s + ": " + (e.message || "");
  }
  function splitList(s) { return (s || "").split(/[\s,]+/).map((x) => x.trim()).filter(Boolean); }
  // parseLabels reads "key=value" lines (or comma-separated pairs).
  function parseLabels(s, errs) {
    const out = {};
    for (const part of (s || "").split(/[\n,]+/)) {
      const p = part.trim();
      if (!p) { continue; }
      const i = p.indexOf("=");
      if (i <= 0) { errs.push("selector: " + JSON.stringify(p) + " is not key=value"); continue; }
      out[p.slice(0, i).trim()] = p.slice(i + 1).trim();
    }
    return out;
  }
  function labelsText(labels) {
    return Object.keys(labels || {}).sort().map((k) => k + "=" + labels[k]).join("\n");
  }

  // ---- the API ----

  function token() { return sessionStorage.getItem(TOKEN_KEY) || ""; }

  // The reads this page repeats every second accept an answer up to two
  // seconds old when the hub's fresh read is slow (a Redis busy starting
  // a wave): the hub then answers from its last read at once, with its
  // Age, rather than make the page wait.
  function repeatedRead(method, path) {
    return method === "GET" && (path === "api/v1/summary" || path.startsWith("api/v1/rollouts/"));
  }

  async function api(method, path, body) {
    const headers = { "Accept": "application/json" };
    const tok = token();
    if (tok) { headers["Authorization"] = "Bearer " + tok; }
    if (repeatedRead(method, path)) { headers["Cache-Control"] = "max-stale=2"; }
    const init = { method: method, headers: headers, cache: "no-store" };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const resp = await fetch(path, init);
    const raw = await resp.text();
    let data = null;
    if (raw) { try { data = JSON.parse(raw); } catch (e) { data = null; } }
    if (!resp.ok) {
      const e = (data && data.error) || {};
      const err = new Error(e.message || ("HTTP " + resp.status));
      err.status = resp.status;
      err.code = e.code || "";
      err.details = e.details;
      throw err;
    }
    return data;
  }
  function errorText(err) { return (err.code ? err.code + ": " : "") + err.message; }

  // ---- identity ----

  // The API token: from a #token=... link (then dropped from the address
  // bar and kept for this tab only), or typed into the sign-in form when
  // the hub answers 401. It is sent as a bearer token, never in a URL.
  function takeTokenFromHash() {
    let h = location.hash.replace(/^#/, "");
    const m = /(^|[?&])token=([^&]*)/.exec(h);
    if (!m) { return; }
    try { sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(m[2])); } catch (e) { return; }
    h = h.slice(0, m.index) + (m[1] === "?" ? "?" : "") + h.slice(m.index + m[0].length);
    h = h.replace("?&", "?").replace(/[?&]$/, "");
    history.replaceState(null, "", location.pathname + location.search + (h ? "#" + h : ""));
  }

  function can(role) { return !!state.me && (RANK[state.me.role] || 0) >= RANK[role]; }

  function applyRole() {
    for (const e of document.querySelectorAll("[data-min-role]")) { e.hidden = !can(e.dataset.minRole); }
    $("new-forbidden").hidden = can("operator");
    const id = $("identity");
    if (state.me) {
      id.hidden = false;
      $("whoami-name").textContent = state.me.name || "(anonymous)";
      $("whoami-role").textContent = state.me.role;
      $("signout").hidden = false;
    } else if (!token() && state.summary) {
      // reads are open: a hub without identities
      id.hidden = false;
      $("whoami-name").textContent = "read-only";
      $("whoami-role").textContent = "no identity";
      $("signout").hidden = true;
    } else {
      id.hidden = true;
    }
    // the row actions depend on the role too
    state.seen["approvals-list"] = null;
  }

  async function loadIdentity() {
    if (!token()) { state.me = null; applyRole(); return; }
    try {
      const me = await api("GET", "api/v1/whoami");
      state.me = { name: me.name || "", role: me.role || "viewer" };
    } catch (err) {
      state.me = null;
      if (err.status === 401) {
        sessionStorage.removeItem(TOKEN_KEY);
        flash("the hub refused the token: sign in with an API token");
      }
    }
    applyRole();
  }

  function showLogin(show) {
    const was = !$("login").hidden;
    $("login").hidden = !show;
    if (show && !was) { $("token").focus(); }
  }

  $("login").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const tok = $("token").value.trim();
    $("token").value = "";
    if (!tok) { return; }
    sessionStorage.setItem(TOKEN_KEY, tok);
    flash("");
    await loadIdentity();
    if (state.me) { showLogin(false); }
    kick();
  });
  $("signout").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    location.hash = "#/";
    location.reload();
  });

  function flash(msg) {
    const f = $("flash");
    f.textContent = msg || "";
    f.hidden = !msg;
  }

  // ---- routing ----

  function parseRoute() {
    let h = location.hash.replace(/^#\/?/, "");
    const query = {};
    const qi = h.indexOf("?");
    if (qi >= 0) {
      new URLSearchParams(h.slice(qi + 1)).forEach((v, k) => { query[k] = v; });
      h = h.slice(0, qi);
    }
    let parts;
    try { parts = h.split("/").filter(Boolean).map(decodeURIComponent); } catch (e) { parts = []; }
    const r = { page: "overview", query: query };
    if (parts[0] === "rollouts" && parts.length > 1) { r.page = "rollout"; r.id = parts.slice(1).join("/"); }
    else if (parts[0] === "nodes" && parts.length > 1) { r.page = "node"; r.id = parts.slice(1).join("/"); }
    else if (parts[0] === "nodes") { r.page = "nodes"; }
    else if (parts[0] === "new") { r.page = "new"; }
    else if (parts[0] === "approvals") { r.page = "approvals"; }
    return r;
  }

  const pages = {};

  function route() {
    takeTokenFromHash();
    const r = parseRoute();
    const prev = state.route;
    state.route = r;
    for (const s of document.querySelectorAll("section.page")) { s.hidden = s.id !== "page-" + r.page; }
    const nav = { overview: "overview", rollout: "overview", nodes: "nodes", node: "nodes", new: "new", approvals: "approvals" }[r.page];
    for (const a of document.querySelectorAll("nav a")) { a.classList.toggle("current", a.dataset.nav === nav); }
    flash("");
    if (prev.page !== r.page || prev.id !== r.id) {
      const p = pages[r.page];
      if (p && p.enter) { p.enter(r, prev); }
    }
    kick();
  }
  window.addEventListener("hashchange", route);

  // ---- the live loop ----

  let timer = 0, running = false, again = false;

  function kick() {
    if (running) { again = true; return; }
    clearTimeout(timer);
    tick();
  }

  async function tick() {
    running = true;
    try {
      let sum;
      try {
        sum = await api("GET", "api/v1/summary");
      } catch (err) {
        if (err.status === 401) {
          showLogin(true);
          throw new Error("sign in with an API token");
        }
        throw err;
      }
      const first = !state.summary;
      state.summary = sum;
      if (first) { applyRole(); }
      renderHeader(sum);
      const p = pages[state.route.page];
      if (p && p.refresh) { await p.refresh(sum); }
      $("conn").className = "ok";
      $("conn").textContent = "live";
    } catch (err) {
      $("conn").className = "down";
      $("conn").textContent = "hub unreachable (" + err.message + ")";
    } finally {
      running = false;
      if (again) { again = false; timer = setTimeout(tick, 0); }
      else { timer = setTimeout(tick, 1000); }
    }
  }

  function renderHeader(s) {
    $("nodes").textContent = (s.nodes || 0) + " nodes";
    const names = new Set();
    for (const r of (s.rollouts || [])) { const b = brcOf(r); if (b) { names.add(b); } }
    for (const k of Object.keys(s.waiting || {})) { names.add(k); }
    if (changed("brc-names", [...names].sort())) {
      $("brc-names").replaceChildren(...[...names].sort().map((n) => { const o = el("option"); o.value = n; return o; }));
    }
    if (changed("lane-names", [...state.lanes].sort())) {
      $("lane-names").replaceChildren(...[...state.lanes].sort().map((n) => { const o = el("option"); o.value = n; return o; }));
    }
  }

  // brcOf is the BRC a rollout of a trigger belongs to ("" for others).
  function brcOf(r) {
    const obj = (r.source && r.source.object) || "";
    return obj.startsWith("trigger/") ? obj.slice("trigger/".length) : "";
  }
  function sourceText(r) {
    const s = r.source || {};
    let t = s.object || "-";
    if (s.generation) { t += " g" + s.generation; }
    if (s.kind) { t += " (" + s.kind + ")"; }
    return t;
  }
  function countersText(c) {
    c = c || {};
    return "total " + (c.total || 0) + " = done " + (c.done || 0) + " + in progress " + (c.in_progress || 0) +
      " + pending " + (c.pending || 0) + " + failed " + (c.failed || 0) + " + skipped " + (c.skipped || 0);
  }

  // ---- overview ----

  pages.overview = {
    async refresh(s) {
      if (changed("counters", s.counters)) {
        const c = s.counters || {};
        for (const [id, key] of counters) { text($("count-" + id), c[key] || 0); }
      }
      if (changed("sync", s.sync)) {
        const sync = s.sync || {};
        text($("sync-commit"), short(sync.commit));
        text($("sync-applied"), short(sync.applied));
        const res = $("sync-result");
        text(res, sync.result);
        res.className = sync.result ? "result-" + sync.result : "";
        text($("sync-at"), when(sync.at));
        const lines = (sync.errors || []).map(fileError);
        if (sync.message) { lines.unshift(sync.message); }
        $("sync-errors").textContent = lines.join("\n");
      }
      await overviewRollouts(s);
      if (changed("waiting", s.waiting)) {
        fill("waiting-body", Object.entries(s.waiting || {}).sort(), 6, "nothing waits", ([name, w], tr) => {
          cell(tr, name, "mono");
          cell(tr, w.reason, "mono");
          cell(tr, w.target_version, "mono");
          cell(tr, w.nodes, "num");
          const reqs = cell(tr, "", "mono");
          reqs.textContent = "";
          for (const id of (w.approvals || [])) { reqs.appendChild(link("#/approvals", id)); reqs.appendChild(document.createTextNode(" ")); }
          if (w.reason === "approval_required" && can("operator")) {
            reqs.appendChild(link("#/approvals?" + new URLSearchParams({ brc: name, target_version: w.target_version || "" }), "request approval", "small"));
          }
          if (!reqs.textContent) { reqs.textContent = "-"; }
          cell(tr, w.until ? "until " + when(w.until) + " (" + relative(w.until) + ")" : w.message);
        });
      }
      if (changed("requests", s.requests)) {
        fill("requests-body", Object.entries(s.requests || {}).sort(), 5, "no requests", ([name, r], tr) => {
          cell(tr, name, "mono");
          cell(tr, r.state, "mono");
          const ro = cell(tr, "", "mono");
          if (r.rollout) { ro.replaceChildren(link("#/rollouts/" + encodeURIComponent(r.rollout), r.rollout)); }
          cell(tr, r.code, "mono");
          cell(tr, r.message);
        });
      }
      const ar = await api("GET", "api/v1/config-approvals");
      const list = (ar && ar.approvals) || [];
      if (changed("approvals-body", list)) {
        fill("approvals-body", list, 9, "no approval requests", (a, tr) => {
          cell(tr, a.id, "mono");
          cell(tr, a.brc, "mono");
          cell(tr, a.target_version, "mono");
          cell(tr, (a.nodes || []).length, "num");
          cell(tr, a.state, "mono");
          cell(tr, a.submitted_by);
          cell(tr, a.decided_by);
          const ro = cell(tr, "", "mono");
          if (a.rollout) { ro.replaceChildren(link("#/rollouts/" + encodeURIComponent(a.rollout), a.rollout)); }
          cell(tr, a.reason, "mono");
        });
      }
    },
  };

  for (const id of ["filter-state", "filter-brc", "filter-lane"]) {
    $(id).addEventListener("change", kick);
    $(id).addEventListener("input", () => { clearTimeout(filterTimer); filterTimer = setTimeout(kick, 300); });
  }
  let filterTimer = 0;
  $("rollout-filter").addEventListener("submit", (ev) => { ev.preventDefault(); kick(); });

  function newestFirst(list) {
    return [...list].sort((a, b) => String(b.created_at || "").localeCompare(String(a.created_at || "")));
  }

  async function overviewRollouts(s) {
    const st = $("filter-state").value;
    const brc = $("filter-brc").value.trim();
    const lane = $("filter-lane").value.trim();
    let list;
    let note = "";
    if (!st && !brc && !lane) {
      list = newestFirst(s.rollouts || []);
    } else {
      const q = new URLSearchParams();
      if (st) { q.set("state", st); }
      if (brc) { q.set("brc", brc); }
      q.set("limit", "200");
      if (lane && !state.laneUnsupported) { q.set("lane", lane); }
      try {
        list = (await api("GET", "api/v1/rollouts?" + q)).rollouts || [];
      } catch (err) {
        if (err.code !== "invalid_query") { throw err; }
        if (err.details && err.details.field === "lane" && !state.laneUnsupported) {
          // this hub does not filter by lane: the console does, from the items
          state.laneUnsupported = true;
          q.delete("lane");
          list = (await api("GET", "api/v1/rollouts?" + q)).rollouts || [];
        } else {
          note = err.message;
          list = [];
        }
      }
      if (lane && state.laneUnsupported) {
        list = await withLane(list, lane);
        note = note || "lane filtered by the console, from the rollouts' items";
      }
    }
    $("filter-note").textContent = note;
    if (!changed("rollouts-body", list)) { return; }
    fill("rollouts-body", list, 12, "no rollouts", (r, tr) => {
      tr.dataset.rollout = r.id;
      cell(tr, "", "mono").replaceChildren(link("#/rollouts/" + encodeURIComponent(r.id), r.id));
      cell(tr, sourceText(r), "mono small");
      cell(tr, "").replaceChildren(badge(r.status));
      cell(tr, r.wave, "num");
      const rc = r.counters || {};
      for (const [, key] of counters) { cell(tr, rc[key] || 0, "num"); }
      cell(tr, r.reason || r.hold, "mono");
      cell(tr, when(r.updated_at), "small");
    });
  }

  // withLane keeps the rollouts with an item in lane, reading the items
  // of a rollout again only when it changed.
  async function withLane(list, lane) {
    const out = [];
    for (const r of list.slice(0, 200)) {
      let c = state.laneCache[r.id];
      if (!c || c.updated !== r.updated_at) {
        const a = await api("GET", "api/v1/rollouts/" + encodeURIComponent(r.id));
        c = { updated: r.updated_at, lanes: [...new Set((a.items || []).map((it) => it.managed_by || ""))] };
        state.laneCache[r.id] = c;
        for (const l of c.lanes) { if (l) { state.lanes.add(l); } }
      }
      if (c.lanes.includes(lane)) { out.push(r); }
    }
    return out;
  }

  // ---- one rollout ----

  const waitingStates = ["pending", "retrying", "ambiguous", "in_progress"];

  // The rollout page reads the first page of items (the API's default,
  // or ?limit=N in the page's address) every second; "more items" adds
  // the next page to what it reads.
  let rolloutPages = 1;
  pages.rollout = {
    enter(r) {
      rolloutPages = 1;
      state.rolloutShown = null;
      state.seen["rollout"] = null;
      $("ro-id").textContent = r.id;
      $("ro-action-result").textContent = "";
      $("ro-lanes").replaceChildren();
      $("ro-why").replaceChildren();
      armCancel(false);
    },
    async refresh() {
      const id = state.route.id;
      const limit = state.route.query.limit || "";
      let a = null;
      let items = [];
      let cursor = "";
      for (let i = 0; i < rolloutPages; i++) {
        const q = new URLSearchParams();
        if (limit) { q.set("limit", limit); }
        if (cursor) { q.set("cursor", cursor); }
        const qs = q.toString();
        try {
          a = await api("GET", "api/v1/rollouts/" + encodeURIComponent(id) + (qs ? "?" + qs : ""));
        } catch (err) {
          if (err.status === 404) { flash("no rollout " + id); return; }
          throw err;
        }
        items = items.concat(a.items || []);
        cursor = a.next || "";
        if (!cursor) { break; }
      }
      if (state.route.page !== "rollout" || state.route.id !== id) { return; }
      // the rollout as the last page read tells it: its counters cover
      // every item, not only those shown
      state.rolloutShown = { rollout: a.rollout, items: items, next: cursor };
      renderRollout(state.rolloutShown);
    },
  };
  $("ro-more").addEventListener("click", () => { rolloutPages++; kick(); });

  function renderRollout(a) {
    if (!changed("rollout", a)) { return; }
    const r = a.rollout || {};
    const items = a.items || [];
    $("ro-id").textContent = r.id;
    const st = $("ro-status");
    st.className = "status status-" + r.status;
    st.textContent = r.status;
    text($("ro-reason"), r.reason || r.hold);
    const src = r.source || {};
    text($("ro-source"), sourceText(r));
    text($("ro-commit"), short(src.commit));
    text($("ro-actor"), src.actor);
    text($("ro-wave"), r.wave);
    text($("ro-max"), r.max_concurrent);
    const thr = [];
    if (r.failure_threshold_percent) { thr.push(r.failure_threshold_percent + "%"); }
    if (r.failure_threshold) { thr.push(r.failure_threshold + " items"); }
    text($("ro-threshold"), thr.join(" or "));
    text($("ro-counters"), countersText(r.counters));
    text($("ro-created"), when(r.created_at));
    text($("ro-updated"), when(r.updated_at));
    const s = r.status;
    $("ro-pause").disabled = !(s === "active" || s === "blocked");
    $("ro-resume").disabled = !(s === "paused" || s === "blocked");
    $("ro-cancel").disabled = !(s === "active" || s === "paused" || s === "blocked");

    // why not progressing: the rollout's own reason, then the waiting
    // items grouped by reason
    const why = [];
    if (r.status && r.status !== "active") {
      why.push(["rollout " + r.status + (r.reason ? ": " + r.reason : ""), "rollout"]);
    }
    if (r.hold) { why.push(["held: " + r.hold + " (nothing is dispatched until it is released)", "hold"]); }
    const groups = {};
    for (const it of items) {
      if (!waitingStates.includes(it.status) && it.status !== "blocked") { continue; }
      if (it.status === "in_progress") { continue; }
      const key = it.reason || it.status;
      (groups[key] = groups[key] || []).push(it);
    }
    for (const key of Object.keys(groups).sort()) {
      const g = groups[key];
      let line = key + ": " + g.length + " item" + (g.length === 1 ? "" : "s") + " (" + g.map((it) => it.node).join(", ") + ")";
      const next = g.map((it) => it.retry_after).filter((t) => iso(t)).sort()[0];
      if (key === "maintenance_window") {
        line += next ? "; next opening " + iso(next) + " (" + relative(next) + ")" : "; next opening unknown";
      } else if (next) {
        line += "; next try " + iso(next) + " (" + relative(next) + ")";
      }
      why.push([line, key]);
    }
    if (why.length === 0) { why.push([r.status === "completed" ? "completed: nothing left to do" : "progressing", "none"]); }
    const total = (r.counters || {}).total || 0;
    if (a.next) {
      why.push(["items counted among the " + items.length + " shown of " + total + "; more items below adds the next page", "partial"]);
    }
    text($("ro-shown"), a.next ? items.length + " of " + total + " items shown" : items.length + " items");
    $("ro-more").hidden = !a.next;
    $("ro-why").replaceChildren(...why.map(([t, k]) => { const li = el("li", "", t); li.dataset.reason = k; return li; }));

    // lanes, then waves in each lane
    const lanes = {};
    for (const it of items) {
      const l = it.managed_by || "";
      if (l) { state.lanes.add(l); }
      (lanes[l] = lanes[l] || []).push(it);
    }
    const blocks = [];
    for (const l of Object.keys(lanes).sort()) {
      const box = el("section", "lane");
      box.dataset.lane = l;
      box.appendChild(el("h3", "", l ? "Lane " + l : "Default lane"));
      const table = el("table");
      const head = el("tr");
      for (const h of ["Wave", "Node", "Block", "Action", "Version", "State", "Attempts", "Reason", "Next opening / retry", "Output"]) {
        head.appendChild(el("th", "", h));
      }
      table.appendChild(el("thead")).appendChild(head);
      const tbody = el("tbody");
      const its = lanes[l].slice().sort((x, y) => ((x.wave || 1e9) - (y.wave || 1e9)) || x.node.localeCompare(y.node));
      for (const it of its) {
        const tr = el("tr");
        tr.dataset.item = it.id;
        tr.dataset.node = it.node;
        cell(tr, it.wave ? "wave " + it.wave : "not yet", "wave");
        cell(tr, "", "node mono").replaceChildren(link("#/nodes/" + encodeURIComponent(it.node), it.node));
        cell(tr, it.block, "mono");
        cell(tr, it.action, "action mono");
        cell(tr, it.target_version, "mono");
        cell(tr, "", "state").replaceChildren(badge(it.status));
        cell(tr, it.attempts + (it.retry_count ? " (" + it.retry_count + " retries)" : "") + (it.last_failure_class ? ", last " + it.last_failure_class : ""), "attempts num");
        cell(tr, it.reason, "reason mono");
        let next = "";
        if (iso(it.retry_after)) { next = iso(it.retry_after) + " (" + relative(it.retry_after) + ")"; }
        else if (it.reason === "maintenance_window") { next = "unknown"; }
        cell(tr, next, "next mono small");
        const out = cell(tr, "", "output");
        out.textContent = "";
        if (it.message) { out.appendChild(el("div", "warn small", it.message)); }
        if (it.output) {
          const d = el("details");
          d.open = state.openOutputs.has(it.id);
          d.addEventListener("toggle", () => { if (d.open) { state.openOutputs.add(it.id); } else { state.openOutputs.delete(it.id); } });
          d.appendChild(el("summary", "small", "output tail"));
          d.appendChild(el("pre", "output", it.output));
          out.appendChild(d);
        }
        if (!out.firstChild) { out.textContent = "-"; }
        tbody.appendChild(tr);
      }
      table.appendChild(tbody);
      box.appendChild(table);
      blocks.push(box);
    }
    if (blocks.length === 0) { blocks.push(el("p", "muted", "no items")); }
    $("ro-lanes").replaceChildren(...blocks);
  }

  const pastTense = { pause: "paused", resume: "resumed", cancel: "cancelled" };
  let cancelArmed = 0;
  function armCancel(on) {
    clearTimeout(cancelArmed);
    cancelArmed = 0;
    $("ro-cancel").textContent = on ? "Really cancel?" : "Cancel";
    if (on) { cancelArmed = setTimeout(() => armCancel(false), 5000); }
  }
  for (const id of ["ro-pause", "ro-resume", "ro-cancel"]) {
    $(id).addEventListener("click", async (ev) => {
      const action = ev.currentTarget.dataset.action;
      if (action === "cancel" && !cancelArmed) { armCancel(true); return; }
      armCancel(false);
      const rid = state.route.id;
      const out = $("ro-action-result");
      out.className = "result";
      out.textContent = action + "...";
      try {
        const a = await api("POST", "api/v1/rollouts/" + encodeURIComponent(rid) + "/" + action, {});
        out.textContent = pastTense[action] + " by " + (state.me ? state.me.name : "?") + " at " + new Date().toLocaleTimeString();
        out.dataset.actor = state.me ? state.me.name : "";
        // the answer holds the first page only: keep the items shown
        if (state.route.id === rid) { renderRollout(state.rolloutShown ? Object.assign({}, state.rolloutShown, { rollout: a.rollout }) : a); }
      } catch (err) {
        out.className = "result errors";
        out.textContent = errorText(err);
      }
      kick();
    });
  }

  // ---- nodes ----

  let nodesPages = 1;
  pages.nodes = {
    enter() { nodesPages = 1; state.seen["nodes"] = null; },
    async refresh() {
      let list = [];
      let cursor = "";
      let more = false;
      for (let i = 0; i < nodesPages; i++) {
        const a = await api("GET", "api/v1/nodes?limit=200" + (cursor ? "&cursor=" + encodeURIComponent(cursor) : ""));
        list = list.concat(a.nodes || []);
        cursor = a.next;
        more = !!cursor;
        if (!cursor) { break; }
      }
      $("nodes-more").hidden = !more;
      if (!changed("nodes", list)) { return; }
      fill("nodes-body", list, 9, "no nodes", (n, tr) => {
        tr.dataset.node = n.id;
        cell(tr, "", "mono").replaceChildren(link("#/nodes/" + encodeURIComponent(n.id), n.id));
        cell(tr, n.organization, "mono");
        cell(tr, n.workspace, "mono");
        cell(tr, n.criticality);
        cell(tr, "").replaceChildren(chips(n.labels));
        const d = cell(tr, n.drain ? "draining" : "-", "drain");
        if (n.drain) { d.className = "drain warn"; }
        cell(tr, reportText(n), "small");
        const drift = n.drift || [];
        cell(tr, drift.length ? drift.length + " (" + [...new Set(drift.map((x) => x.block || x.kind))].join(", ") + ")" : "-", "small");
        cell(tr, (n.waiting || []).length || "-", "num");
      });
    },
  };
  $("nodes-more").addEventListener("click", () => { nodesPages++; kick(); });

  function reportText(n) {
    if (!n.reported) { return "never" + (n.stale ? " (stale)" : ""); }
    return when(n.last_report_at) + " (" + relative(n.last_report_at) + (n.stale ? ", stale" : "") + ")";
  }

  // ---- one node ----

  const editor = { node: "", base: null, dirty: false };

  pages.node = {
    enter(r) {
      state.seen["node"] = null;
      editor.node = r.id;
      editor.base = null;
      editor.dirty = false;
      $("node-id").textContent = r.id;
      $("labels-rows").replaceChildren();
      $("labels-errors").replaceChildren();
      $("node-write-result").hidden = true;
    },
    async refresh() {
      const id = state.route.id;
      let n;
      try {
        n = await api("GET", "api/v1/nodes/" + encodeURIComponent(id));
      } catch (err) {
        if (err.status === 404) { flash("no node " + id); return; }
        throw err;
      }
      if (state.route.page === "node" && state.route.id === id) { renderNode(n); }
    },
  };

  function renderNode(n) {
    if (!editor.dirty && JSON.stringify(editor.base) !== JSON.stringify(n.labels || {})) { resetEditor(n.labels || {}); }
    $("node-drain-btn").disabled = n.drain;
    $("node-undrain-btn").disabled = !n.drain;
    if (!changed("node", n)) { return; }
    $("node-id").textContent = n.id;
    $("node-drain").hidden = !n.drain;
    $("node-stale").hidden = !n.stale;
    $("node-unknown").hidden = !n.unknown_node;
    text($("node-org"), n.organization);
    text($("node-ws"), n.workspace);
    text($("node-crit"), n.criticality);
    $("node-labels").replaceChildren(chips(n.labels));
    text($("node-windows"), (n.maintenance_windows || []).join(", ") || "none: always open");
    text($("node-report"), reportText(n));
    text($("node-agent"), n.agent_version);
    text($("node-caps"), (n.capabilities || []).join(", "));

    // drift, per block
    const byBlock = {};
    for (const d of (n.drift || [])) { (byBlock[d.block || ""] = byBlock[d.block || ""] || []).push(d); }
    const parts = [];
    for (const b of Object.keys(byBlock).sort()) {
      const box = el("section", "lane");
      box.dataset.block = b;
      box.appendChild(el("h3", "mono", b || "(node)"));
      const t = el("table");
      const head = el("tr");
      for (const h of ["Kind", "BRC", "Desired", "Observed"]) { head.appendChild(el("th", "", h)); }
      t.appendChild(el("thead")).appendChild(head);
      const tb = el("tbody");
      for (const d of byBlock[b]) {
        const tr = el("tr");
        cell(tr, d.kind, "mono");
        cell(tr, d.trigger, "mono");
        cell(tr, d.desired, "mono");
        cell(tr, d.observed, "mono");
        tb.appendChild(tr);
      }
      t.appendChild(tb);
      box.appendChild(t);
      parts.push(box);
    }
    if (parts.length === 0) { parts.push(el("p", "muted", "no drift: observed is as desired")); }
    $("node-drift").replaceChildren(...parts);

    fill("node-waiting", n.waiting || [], 6, "nothing waits on this node", (w, tr) => {
      tr.dataset.rollout = w.rollout;
      cell(tr, "", "mono").replaceChildren(link("#/rollouts/" + encodeURIComponent(w.rollout), w.rollout));
      cell(tr, w.item, "mono small");
      cell(tr, w.block, "mono");
      cell(tr, w.action, "mono");
      cell(tr, "").replaceChildren(badge(w.status));
      cell(tr, w.reason, "reason mono");
    });
    fill("node-held", n.held || [], 4, "nothing held", (h, tr) => {
      cell(tr, h.block, "mono");
      cell(tr, h.brc, "mono");
      cell(tr, h.reason, "mono");
      cell(tr, h.message);
    });
    const seen = n.observed_versions || {};
    fill("node-instances", n.instances || [], 7, "no instances reported", (i, tr) => {
      cell(tr, i.block, "mono");
      cell(tr, i.version, "mono");
      cell(tr, i.state, "mono");
      cell(tr, i.generation, "num");
      cell(tr, (i.config_hash || "").slice(0, 12), "mono");
      cell(tr, i.managed_by, "mono");
      cell(tr, (seen[i.block] || []).join(", "), "mono small");
    });
  }

  // The label editor: the whole set, one row per label.
  function labelRow(k, v) {
    const tr = el("tr");
    const key = el("input", "label-key");
    key.value = k || "";
    key.placeholder = "key";
    key.setAttribute("aria-label", "label key");
    const val = el("input", "label-value");
    val.value = v || "";
    val.placeholder = "value";
    val.setAttribute("aria-label", "label value");
    const rm = el("button", "link", "remove");
    rm.type = "button";
    rm.addEventListener("click", () => { tr.remove(); editor.dirty = true; });
    for (const x of [key, val, rm]) { const td = el("td"); td.appendChild(x); tr.appendChild(td); }
    return tr;
  }
  function resetEditor(labels) {
    editor.base = Object.assign({}, labels);
    editor.dirty = false;
    $("labels-rows").replaceChildren(...Object.keys(labels).sort().map((k) => labelRow(k, labels[k])));
  }
  $("labels-rows").addEventListener("input", () => { editor.dirty = true; });
  $("labels-add").addEventListener("click", () => {
    editor.dirty = true;
    const row = labelRow("", "");
    $("labels-rows").appendChild(row);
    row.querySelector("input").focus();
  });
  $("labels-reset").addEventListener("click", () => {
    resetEditor(editor.base || {});
    $("labels-errors").replaceChildren();
  });

  // checkLabels applies the simple rules in the browser (count, lengths,
  // duplicates); the hub checks everything again, with the characters.
  function checkLabels() {
    const labels = {};
    const errs = [];
    let n = 0;
    for (const tr of $("labels-rows").querySelectorAll("tr")) {
      const [ki, vi] = tr.querySelectorAll("input");
      const k = ki.value.trim();
      const v = vi.value.trim();
      ki.classList.remove("bad");
      vi.classList.remove("bad");
      if (!k && !v) { continue; }
      n++;
      const name = k.includes("/") ? k.slice(k.indexOf("/") + 1) : k;
      if (!k) { errs.push("a label without a key (value " + JSON.stringify(v) + ")"); ki.classList.add("bad"); continue; }
      if (name.length < 1 || name.length > MAX_LABEL_LEN) {
        errs.push("key " + JSON.stringify(k) + ": " + name.length + " characters; 1-" + MAX_LABEL_LEN + " (after an optional prefix/)");
        ki.classList.add("bad");
      }
      if (v.length < 1 || v.length > MAX_LABEL_LEN) {
        errs.push("value of " + JSON.stringify(k) + ": " + v.length + " characters; 1-" + MAX_LABEL_LEN);
        vi.classList.add("bad");
      }
      if (Object.prototype.hasOwnProperty.call(labels, k)) { errs.push("key " + JSON.stringify(k) + " appears twice"); ki.classList.add("bad"); }
      labels[k] = v;
    }
    if (n > MAX_LABELS) { errs.unshift(n + " labels; at most " + MAX_LABELS); }
    return { labels: labels, errs: errs };
  }

  function showErrors(id, lines) {
    $(id).replaceChildren(...lines.map((l) => el("li", "", l)));
  }

  function wrote(w, what) {
    $("node-write-result").hidden = false;
    const c = $("node-write-commit");
    c.textContent = w.commit || "none";
    c.dataset.commit = w.commit || "";
    $("node-write-what").textContent = w.commit ? what + " by " + (state.me ? state.me.name : "?") :
      what + ": nothing to commit, the file already said so";
  }

  $("labels-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const { labels, errs } = checkLabels();
    if (errs.length) { showErrors("labels-errors", errs); return; }
    showErrors("labels-errors", []);
    const id = editor.node;
    $("labels-save").disabled = true;
    try {
      const w = await api("PUT", "api/v1/nodes/" + encodeURIComponent(id) + "/labels", { labels: labels, reason: $("labels-reason").value.trim() });
      wrote(w, "labels of " + id);
      resetEditor((w.node && w.node.labels) || labels);
      state.seen["node"] = null;
      if (w.node) { renderNode(w.node); }
    } catch (err) {
      const lines = [errorText(err)];
      const probs = err.details && err.details.labels;
      if (err.code === "invalid_labels" && Array.isArray(probs)) {
        for (const p of probs) { lines.push((p.key ? p.key + ": " : "") + p.problem); }
      }
      showErrors("labels-errors", lines);
    } finally {
      $("labels-save").disabled = false;
    }
    kick();
  });

  for (const [btn, action] of [["node-drain-btn", "drain"], ["node-undrain-btn", "undrain"]]) {
    $(btn).addEventListener("click", async () => {
      const id = editor.node;
      $(btn).disabled = true;
      try {
        const w = await api("POST", "api/v1/nodes/" + encodeURIComponent(id) + "/" + action, { reason: $("drain-reason").value.trim() });
        wrote(w, action + " " + id);
        state.seen["node"] = null;
        if (w.node) { renderNode(w.node); }
      } catch (err) {
        flash(errorText(err));
        $(btn).disabled = false;
      }
      kick();
    });
  }

  // ---- new rollout ----

  let previewed = "";

  function newBody(errs) {
    const body = { brc: $("new-brc").value.trim() };
    if (!body.brc) { errs.push("brc: required"); }
    const action = $("new-action").value.trim();
    if (action) { body.action_name = action; }
    const version = $("new-version").value.trim();
    if (version) { body.target_version = version; }
    if ($("new-mode-nodes").checked) {
      body.nodes = splitList($("new-nodes").value);
      if (body.nodes.length === 0) { errs.push("nodes: name at least one node"); }
    } else {
      const ml = parseLabels($("new-selector").value, errs);
      if (Object.keys(ml).length === 0) { errs.push("selector: give at least one key=value"); }
      body.selector = { match_labels: ml };
    }
    const batch = $("new-batch").value.trim();
    if (batch) {
      const b = Number(batch);
      if (!Number.isInteger(b) || b < 0) { errs.push("batch size: a whole number, 0 for the BRC's concurrency"); }
      else if (b > 0) { body.batch_size = b; }
    }
    const name = $("new-name").value.trim();
    if (name) {
      if (!/^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/.test(name)) { errs.push("name: 1-63 of a-z, 0-9 and '-', alphanumeric at both ends"); }
      body.name = name;
    }
    const reason = $("new-reason").value.trim();
    if (reason) { body.reason = reason; }
    return body;
  }

  function syncMode() {
    const nodes = $("new-mode-nodes").checked;
    $("new-nodes").disabled = !nodes;
    $("new-selector").disabled = nodes;
  }
  for (const id of ["new-mode-nodes", "new-mode-selector"]) { $(id).addEventListener("change", syncMode); }
  $("new-form").addEventListener("input", () => {
    const body = newBody([]);
    $("new-submit").disabled = !previewed || JSON.stringify(body) !== previewed;
  });
  $("new-form").addEventListener("change", () => {
    const body = newBody([]);
    $("new-submit").disabled = !previewed || JSON.stringify(body) !== previewed;
  });

  $("new-preview-btn").addEventListener("click", async () => {
    const errs = [];
    const body = newBody(errs);
    previewed = "";
    $("new-submit").disabled = true;
    $("new-result").hidden = true;
    if (errs.length) { showErrors("new-errors", errs); return; }
    showErrors("new-errors", []);
    try {
      const plan = await api("POST", "api/v1/rollouts", Object.assign({}, body, { dry_run: true }));
      $("new-preview").hidden = false;
      $("new-preview-rollout").textContent = plan.rollout;
      $("new-preview-count").textContent = String((plan.targets || []).length);
      $("new-preview-targets").textContent = (plan.targets || []).join(", ");
      $("new-preview-approval").hidden = !plan.approval_required;
      $("new-preview-approval-link").href = approvalLink(body);
      fill("new-preview-items", plan.items || [], 7, "no items", (it, tr) => {
        tr.dataset.node = it.node;
        cell(tr, it.node, "mono");
        cell(tr, it.block, "mono");
        cell(tr, it.action, "mono");
        cell(tr, it.target_version, "mono");
        cell(tr, it.skipped, "mono");
        cell(tr, it.blocked, "mono");
        cell(tr, it.message);
      });
      if (!plan.approval_required) {
        previewed = JSON.stringify(body);
        $("new-submit").disabled = false;
      }
    } catch (err) {
      $("new-preview").hidden = true;
      showErrors("new-errors", [errorText(err)]);
    }
  });

  function approvalLink(body) {
    const q = { brc: body.brc || "", target_version: body.target_version || "" };
    if (body.nodes) { q.nodes = body.nodes.join(","); }
    if (body.selector) { q.selector = labelsText(body.selector.match_labels).replace(/\n/g, ","); }
    return "#/approvals?" + new URLSearchParams(q);
  }

  $("new-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const errs = [];
    const body = newBody(errs);
    if (errs.length || JSON.stringify(body) !== previewed) {
      showErrors("new-errors", errs.length ? errs : ["preview the request first"]);
      return;
    }
    $("new-submit").disabled = true;
    try {
      const res = await api("POST", "api/v1/rollouts", body);
      previewed = "";
      $("new-result").hidden = false;
      $("new-commit").textContent = res.commit;
      $("new-commit").dataset.commit = res.commit;
      $("new-request").textContent = res.name;
      const a = $("new-rollout-link");
      a.textContent = res.rollout;
      a.href = "#/rollouts/" + encodeURIComponent(res.rollout);
      $("new-targets").textContent = (res.targets || []).join(", ");
      showErrors("new-errors", []);
    } catch (err) {
      const lines = [errorText(err)];
      if (err.code === "approval_required") { lines.push("submit it as an approval request: " + approvalLink(body)); }
      showErrors("new-errors", lines);
      $("new-submit").disabled = false;
    }
    kick();
  });

  pages.new = {
    enter(r) {
      syncMode();
      const q = r.query || {};
      if (q.brc) { $("new-brc").value = q.brc; }
      if (q.action) { $("new-action").value = q.action; }
      if (q.selector) { $("new-mode-selector").checked = true; $("new-selector").value = q.selector.replace(/,/g, "\n"); syncMode(); }
      if (q.nodes) { $("new-mode-nodes").checked = true; $("new-nodes").value = q.nodes; syncMode(); }
    },
    async refresh() {},
  };

  // ---- approvals ----

  pages.approvals = {
    enter(r) {
      state.seen["approvals-list"] = null;
      const q = r.query || {};
      if (q.brc || q.target_version || q.nodes || q.selector) {
        prefillApproval({ brc: q.brc, target_version: q.target_version, nodes: splitList(q.nodes), selector: q.selector });
      }
    },
    async refresh() {
      const ar = await api("GET", "api/v1/config-approvals");
      const list = ((ar && ar.approvals) || []).slice().sort((a, b) => String(b.submitted_at || "").localeCompare(String(a.submitted_at || "")));
      if (!changed("approvals-list", list)) { return; }
      fill("approvals-list", list, 11, "no approval requests", (a, tr) => {
        tr.dataset.approval = a.id;
        cell(tr, a.id, "mono");
        cell(tr, a.brc, "mono");
        cell(tr, a.target_version, "mono");
        cell(tr, (a.nodes || []).join(", "), "mono small");
        cell(tr, a.selector, "mono small");
        cell(tr, "", "state").replaceChildren(badge(a.state));
        cell(tr, a.submitted_by);
        cell(tr, a.decided_by);
        const ro = cell(tr, "", "mono");
        if (a.rollout) { ro.replaceChildren(link("#/rollouts/" + encodeURIComponent(a.rollout), a.rollout)); }
        cell(tr, [a.reason, a.message].filter(Boolean).join(": "), "small");
        const act = cell(tr, "", "row-actions");
        act.textContent = "";
        if (a.state === "pending" && can("admin")) {
          if (state.me && a.submitted_by === state.me.name) {
            act.appendChild(el("span", "muted small", "yours: another admin decides"));
          } else {
            act.appendChild(decideButton(a.id, "approve", "Approve"));
            act.appendChild(document.createTextNode(" "));
            act.appendChild(decideButton(a.id, "reject", "Reject"));
          }
        }
        if (["rejected", "expired", "stale", "refused"].includes(a.state) && can("operator")) {
          const b = el("button", "again", "Request again");
          b.type = "button";
          b.addEventListener("click", () => prefillApproval({ brc: a.brc, target_version: a.target_version, nodes: a.nodes || [], batch_size: a.batch_size }));
          act.appendChild(b);
        }
      });
    },
  };

  function decideButton(id, decision, label) {
    const b = el("button", decision === "reject" ? "danger" : "", label);
    b.type = "button";
    b.dataset.decision = decision;
    b.addEventListener("click", async () => {
      b.disabled = true;
      const out = $("approvals-result");
      out.hidden = false;
      try {
        const a = await api("POST", "api/v1/config-approvals/" + encodeURIComponent(id) + "/" + decision, {});
        out.className = "result";
        out.textContent = id + " " + a.state + " by " + (a.decided_by || (state.me && state.me.name) || "?");
      } catch (err) {
        out.className = "result errors";
        out.textContent = id + ": " + errorText(err);
        b.disabled = false;
      }
      state.seen["approvals-list"] = null;
      kick();
    });
    return b;
  }

  function prefillApproval(p) {
    $("ap-id").value = "";
    $("ap-brc").value = p.brc || "";
    $("ap-version").value = p.target_version || "";
    $("ap-nodes").value = (p.nodes || []).join(", ");
    $("ap-selector").value = (p.selector || "").replace(/,/g, "\n");
    $("ap-batch").value = p.batch_size ? String(p.batch_size) : "";
    showErrors("ap-errors", []);
    $("ap-brc").focus();
  }

  $("approval-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const errs = [];
    const body = { brc: $("ap-brc").value.trim(), target_version: $("ap-version").value.trim() };
    const id = $("ap-id").value.trim();
    if (id) { body.id = id; }
    if (!body.brc) { errs.push("brc: required"); }
    if (!body.target_version) { errs.push("target version: required"); }
    const nodes = splitList($("ap-nodes").value);
    const ml = parseLabels($("ap-selector").value, errs);
    if (nodes.length && Object.keys(ml).length) { errs.push("give nodes or a selector, not both"); }
    else if (nodes.length) { body.nodes = nodes; }
    else if (Object.keys(ml).length) { body.selector = { match_labels: ml }; }
    else { errs.push("nodes or selector: required"); }
    const batch = $("ap-batch").value.trim();
    if (batch) {
      const b = Number(batch);
      if (!Number.isInteger(b) || b < 0) { errs.push("batch size: a whole number"); }
      else if (b > 0) { body.batch_size = b; }
    }
    if (errs.length) { showErrors("ap-errors", errs); return; }
    showErrors("ap-errors", []);
    try {
      const res = await api("POST", "api/v1/config-approvals", body);
      const out = $("approvals-result");
      out.hidden = false;
      out.className = "result";
      out.textContent = "submitted " + res.id + ": pending until an admin other than you approves it";
      state.seen["approvals-list"] = null;
    } catch (err) {
      showErrors("ap-errors", [errorText(err)]);
    }
    kick();
  });

  // ---- start ----

  takeTokenFromHash();
  syncMode();
  loadIdentity().then(() => {
    if (!state.me && token()) { showLogin(true); }
    route();
  });
})();
