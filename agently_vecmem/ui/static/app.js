// agently-vecmem memory browser. Plain JavaScript, no dependencies. Every value from the store is put
// into the page with textContent (never innerHTML), so memories render as text.
"use strict";
(function () {
  const csrf = (document.querySelector('meta[name="csrf-token"]') || {}).content || "";

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "text") node.textContent = String(v);
      else node.setAttribute(k, String(v));
    }
    for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
    return node;
  }
  const fmt = (x) => (typeof x === "number" ? x.toFixed(3) : String(x ?? ""));

  async function getJSON(url) {
    const res = await fetch(url, { headers: { Accept: "application/json" }, credentials: "same-origin" });
    const data = await res.json().catch(() => ({ error: "the server sent no JSON (" + res.status + ")" }));
    if (!res.ok) throw new Error(data.error || "request failed (" + res.status + ")");
    return data;
  }

  // ---------------------------------------------------------------- session and tag suggestions
  function fillSuggestions() {
    const lists = document.querySelectorAll("#sessions-list, #tags-list");
    if (!lists.length) return;
    getJSON("/api/facets").then((f) => {
      const s = document.getElementById("sessions-list");
      const t = document.getElementById("tags-list");
      if (s) for (const x of f.sessions) s.append(el("option", { value: x.id }));
      if (t) for (const x of f.tags) t.append(el("option", { value: x }));
    }).catch(() => {});
  }

  // ---------------------------------------------------------------- forget with confirmation
  function setupForget() {
    const dialog = document.getElementById("confirm");
    if (!dialog) return;
    const yes = document.getElementById("confirm-yes");
    const no = document.getElementById("confirm-no");
    let pending = null;
    let opener = null;
    function close() { dialog.hidden = true; pending = null; if (opener) opener.focus(); }
    document.addEventListener("click", (ev) => {
      const btn = ev.target.closest("[data-forget]");
      if (!btn) return;
      pending = btn.getAttribute("data-forget");
      opener = btn;
      document.getElementById("confirm-text").textContent = "“" + (btn.getAttribute("data-summary") || pending) + "”";
      dialog.hidden = false;
      no.focus();
    });
    no.addEventListener("click", close);
    dialog.addEventListener("keydown", (ev) => {
      if (ev.key === "Escape") close();
      if (ev.key === "Tab") { ev.preventDefault(); (document.activeElement === yes ? no : yes).focus(); }
    });
    yes.addEventListener("click", async () => {
      const id = pending;
      if (!id) return;
      try {
        const res = await fetch("/api/forget", {
          method: "POST", credentials: "same-origin",
          headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf },
          body: JSON.stringify({ ids: [id] }),
        });
        const data = await res.json();
        if (!res.ok) throw new Error(data.error || "forget failed");
        opener = null;
        dialog.hidden = true;
        pending = null;
        const row = document.querySelector('tr[data-id="' + CSS.escape(id) + '"]');
        if (row) row.remove();
        const detail = document.querySelector('section.detail[data-id="' + CSS.escape(id) + '"]');
        if (detail) {
          const main = document.getElementById("main");
          main.replaceChildren(el("h1", { text: "Forgotten" }),
            el("p", { id: "forgotten", text: "The memory " + id + " was removed from the store." }),
            el("p", {}, el("a", { href: "/", text: "Back to the records" })));
        }
        announce("Forgot 1 memory.");
      } catch (err) {
        document.getElementById("confirm-text").textContent = String(err.message || err);
      }
    });
  }

  function announce(text) {
    let live = document.getElementById("live");
    if (!live) { live = el("p", { id: "live", role: "status", class: "live" }); document.getElementById("main").prepend(live); }
    live.textContent = text;
  }

  // ---------------------------------------------------------------- ask
  function scoreTable(rows) {
    const head = el("tr", {}, ...["#", "Score", "Dense", "Lexical", "Fused", "Injected", "Summary"].map((h) => el("th", { text: h })));
    const body = rows.map((c) => el("tr", { "data-id": c.record.id },
      el("td", { class: "num", text: c.rank }), el("td", { class: "num", text: fmt(c.score) }),
      el("td", { class: "num", text: fmt(c.dense) }), el("td", { class: "num", text: fmt(c.lexical) }),
      el("td", { class: "num", text: fmt(c.fused) }), el("td", { text: c.injected ? "yes" : "" }),
      el("td", {}, el("a", { href: "/record/" + encodeURIComponent(c.record.id), text: c.record.summary }))));
    return el("table", { class: "candidates" }, el("thead", {}, head), el("tbody", {}, ...body));
  }

  function renderTrace(box, t) {
    const plan = t.plan || {};
    const parts = [
      el("h2", { text: "Plan" }),
      el("dl", { id: "trace-plan" },
        el("dt", { text: "Query" }), el("dd", { id: "trace-query", text: plan.query }),
        el("dt", { text: "Tags" }), el("dd", { text: (plan.tags || []).join(", ") || "none" }),
        el("dt", { text: "Scopes" }), el("dd", { text: [plan.include_global ? "GLOBAL_MEMORY" : "", plan.include_session ? "SESSION_MEMORY" : ""].filter(Boolean).join(", ") || "none" }),
        el("dt", { text: "How" }), el("dd", { text: JSON.stringify((plan.diagnostics || {})) }),
        el("dt", { text: "Session" }), el("dd", { text: t.session_id }),
        el("dt", { text: "Model" }), el("dd", { text: t.model || "none (deterministic path)" })),
    ];
    for (const [name, s] of Object.entries(t.scopes)) {
      const pct = s.char_budget ? Math.round((100 * s.used_chars) / s.char_budget) : 0;
      const meter = el("meter", { min: 0, max: s.char_budget || 1, value: s.used_chars, "aria-label": name + " budget" });
      const sec = el("section", { class: "scope-trace", "data-scope": name },
        el("h2", { text: name + " — " + s.candidates.length + " candidates of " + s.scope_size + " records" }),
        el("p", { class: "budget" }, "Injected " + s.injected.length + " memories using ", el("b", { class: "used-chars", text: s.used_chars }),
          " of " + s.char_budget + " characters (" + pct + "%) ", meter),
        el("p", { class: "muted", text: "Rerank: " + JSON.stringify(s.rerank) }),
        s.candidates.length ? scoreTable(s.candidates) : el("p", { class: "muted", text: "No candidates." }),
        el("h3", { text: "What would be injected" }),
        el("ol", { class: "injected" }, ...s.injected.map((it) => el("li", { "data-id": it.source_ref.id },
          el("b", { text: it.summary }), " ", el("span", { class: "muted", text: "score " + fmt(it.score) + (it.date ? " · " + it.date : "") })))));
      parts.push(sec);
    }
    if (t.model_replies.length) {
      parts.push(el("h2", { text: "Model replies" }),
        el("ol", { id: "model-replies" }, ...t.model_replies.map((r) => el("li", {}, el("b", { text: r.phase }), " ",
          el("pre", { class: "json", text: JSON.stringify(r.reply || r.error, null, 2) })))));
    }
    parts.push(el("h2", { text: "Fallbacks taken" }), t.fallbacks.length
      ? el("ul", { id: "fallbacks" }, ...t.fallbacks.map((f) => el("li", { text: f.stage + ": " + f.reason + (f.detail ? " — " + f.detail : "") + (f.error_type ? " (" + f.error_type + ")" : "") })))
      : el("p", { id: "fallbacks", class: "muted", text: "None." }));
    parts.push(el("details", {}, el("summary", { text: "Raw diagnostics" }), el("pre", { class: "json", id: "raw-diagnostics", text: JSON.stringify(t.diagnostics, null, 2) })));
    box.replaceChildren(...parts);
  }

  function setupAsk() {
    const form = document.getElementById("ask-form");
    if (!form) return;
    const box = document.getElementById("ask-result");
    async function run() {
      const q = document.getElementById("ask-q").value.trim();
      const session = document.getElementById("ask-session").value.trim();
      if (!q) return;
      box.replaceChildren(el("p", { class: "muted", text: "Retrieving…" }));
      history.replaceState(null, "", "/ask?" + new URLSearchParams({ q, session }));
      try {
        renderTrace(box, await getJSON("/api/ask?" + new URLSearchParams({ q, session })));
      } catch (err) {
        box.replaceChildren(el("p", { class: "error", id: "ask-error", role: "alert", text: String(err.message || err) }));
      }
    }
    form.addEventListener("submit", (ev) => { ev.preventDefault(); run(); });
    if (document.getElementById("ask-q").value.trim()) run();
  }

  // ---------------------------------------------------------------- map
  const PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22"];
  function setupMap() {
    const form = document.getElementById("map-form");
    if (!form) return;
    const box = document.getElementById("map");
    const tip = document.getElementById("map-tip");
    const info = document.getElementById("map-info");
    const legend = document.getElementById("map-legend");
    const NS = "http://www.w3.org/2000/svg";
    async function draw() {
      const params = new URLSearchParams(new FormData(form));
      history.replaceState(null, "", "/map?" + params);
      info.textContent = "Projecting…";
      let data;
      try { data = await getJSON("/api/map?" + params); } catch (err) { info.textContent = String(err.message || err); box.replaceChildren(); return; }
      const W = 800, H = 500, pad = 24;
      const xs = data.points.map((p) => p.x), ys = data.points.map((p) => p.y);
      const [x0, x1] = [Math.min(...xs, 0), Math.max(...xs, 0)], [y0, y1] = [Math.min(...ys, 0), Math.max(...ys, 0)];
      const sx = (x) => pad + ((x - x0) / ((x1 - x0) || 1)) * (W - 2 * pad);
      const sy = (y) => H - pad - ((y - y0) / ((y1 - y0) || 1)) * (H - 2 * pad);
      const groups = [...new Set(data.points.map((p) => p.group))];
      const color = (g) => PALETTE[groups.indexOf(g) % PALETTE.length];
      const svg = document.createElementNS(NS, "svg");
      svg.setAttribute("viewBox", "0 0 " + W + " " + H);
      svg.setAttribute("role", "img");
      svg.setAttribute("aria-label", "PCA map of " + data.shown + " memories");
      for (const p of data.points) {
        const c = document.createElementNS(NS, "circle");
        c.setAttribute("cx", sx(p.x).toFixed(1)); c.setAttribute("cy", sy(p.y).toFixed(1)); c.setAttribute("r", 6);
        c.setAttribute("fill", color(p.group)); c.setAttribute("data-id", p.id); c.setAttribute("tabindex", "0");
        const title = document.createElementNS(NS, "title"); title.textContent = p.summary; c.append(title);
        const show = () => { tip.textContent = p.summary + " — " + p.group; tip.hidden = false; };
        c.addEventListener("mouseenter", show); c.addEventListener("focus", show);
        c.addEventListener("mouseleave", () => { tip.hidden = true; });
        c.addEventListener("click", () => { location.href = "/record/" + encodeURIComponent(p.id); });
        c.addEventListener("keydown", (ev) => { if (ev.key === "Enter") location.href = "/record/" + encodeURIComponent(p.id); });
        svg.append(c);
      }
      box.replaceChildren(svg);
      legend.replaceChildren(...groups.slice(0, 30).map((g) => { const sw = el("span", { class: "swatch" }); sw.style.background = color(g); return el("li", {}, sw, g); }));
      const ev = data.explained_variance.map((v) => Math.round(v * 100) + "%").join(" + ");
      info.textContent = data.shown + " of " + data.total + " memories; the two components explain " + ev + " of the variance.";
    }
    form.addEventListener("submit", (ev) => { ev.preventDefault(); draw(); });
    draw();
  }

  // ---------------------------------------------------------------- keyboard
  function setupKeys() {
    document.addEventListener("keydown", (ev) => {
      const typing = /^(INPUT|TEXTAREA|SELECT)$/.test((ev.target.tagName || "")) || ev.target.isContentEditable;
      if (typing || ev.ctrlKey || ev.metaKey || ev.altKey) return;
      if (ev.key === "/") { const q = document.getElementById("q") || document.getElementById("ask-q"); if (q) { ev.preventDefault(); q.focus(); } }
      if (ev.key === "j" || ev.key === "k") {
        const links = [...document.querySelectorAll("td.summary a")];
        if (!links.length) return;
        const i = links.indexOf(document.activeElement);
        const next = ev.key === "j" ? Math.min(links.length - 1, i + 1) : Math.max(0, i - 1);
        links[i < 0 ? 0 : next].focus();
        ev.preventDefault();
      }
    });
  }

  document.addEventListener("DOMContentLoaded", () => { fillSuggestions(); setupForget(); setupAsk(); setupMap(); setupKeys(); });
})();
