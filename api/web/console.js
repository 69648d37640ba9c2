// The operator's console: the admin part of the page, shown only to a caller whose /v1/me lists
// the admin scope (an admin key or group, or the operator on this machine in local mode). It only
// reads what the server reports (/v1/admin/..., /v1/keys, /v1/audit, /v1/ingest/...) and never
// computes figures the server could give; the server checks the admin scope on every call, so
// hiding the section is a convenience, not the protection.
"use strict";

(() => {
  const { el, call, problemNode, copy } = window.citewise;
  const charts = window.citewiseCharts;
  const $ = (id) => document.getElementById(id);
  const SECTIONS = [
    ["sources", "Sources"], ["usage", "Usage and cost"], ["models", "Models"],
    ["feedback", "Feedback"], ["keys", "Keys"], ["audit", "Audit"],
  ];
  const state = { admin: false, ingest: false, window: "24h", feedback: "open", job: null };
  // Run now, Verify and the runs are /v1/ingest/... routes: they need the ingest scope too.
  const NEEDS_INGEST = "needs the ingest scope as well as admin (the /v1/ingest routes)";

  // ---------- formatting (display only) ----------

  const num = (n) => (n == null ? "–" : Number(n).toLocaleString("en"));
  const ms = (n) => (n == null ? "–" : `${Math.round(n).toLocaleString("en")} ms`);
  const secs = (n) => (n == null ? "–" : n < 90 ? `${Number(n).toFixed(1)} s` : `${(n / 60).toFixed(1)} min`);
  const money = (n) => (n == null ? "–" : `$${Number(n).toFixed(n && n < 1 ? 4 : 2)}`);
  const pct = (n) => (n == null ? "–" : `${(100 * n).toFixed(1)} %`);
  const when = (iso) => (iso ? `${iso.slice(0, 16).replace("T", " ")} UTC` : "never");
  const badge = (text, kind) => el("span", { class: `badge ${kind || text}`, text });

  async function json(path, options) { return (await call(path, options)).json(); }

  // A table from rows and [heading, cell(row)] columns; a cell may be text or a node.
  function grid(caption, columns, rows, empty = "nothing yet") {
    if (!rows.length) return el("p", { class: "none", text: `${caption}: ${empty}.` });
    return el("div", { class: "scroll" }, el("table", { class: "data" },
      el("caption", { text: caption }),
      el("thead", {}, el("tr", {}, columns.map(([h]) => el("th", { scope: "col", text: h })))),
      el("tbody", {}, rows.map((r) => el("tr", {}, columns.map(([, cell]) => {
        const v = cell(r);
        return el("td", {}, v instanceof Node ? v : String(v ?? "–"));
      }))))));
  }

  function facts(pairs) {
    return el("dl", { class: "facts" }, pairs.map(([k, v]) => el("div", {}, el("dt", { text: k }), el("dd", {}, v))));
  }

  // A section the server refused or could not give: its problem details (what, and what to do).
  function failed(body, error) {
    body.replaceChildren(problemNode(error));
  }

  // ---------- the shell: visibility, navigation ----------

  function show(me) {
    state.admin = !!(me && me.scopes.includes("admin"));
    state.ingest = !!(me && me.scopes.includes("ingest"));
    $("views").hidden = !state.admin;
    if (!state.admin) { // signed out, or a key without admin: nothing of the console stays
      $("console").hidden = true;
      $("ask-view").hidden = false;
      $("console-body").replaceChildren();
      return;
    }
    route();
  }

  // #console/<section>[/<id>]: a link to a run's page or a section can be shared and reloaded.
  function route() {
    const parts = location.hash.replace(/^#/, "").split("/");
    const open = state.admin && parts[0] === "console";
    $("console").hidden = !open;
    $("ask-view").hidden = open;
    document.querySelectorAll("#views a").forEach((a) => a.setAttribute("aria-current", String((a.dataset.view === "console") === open)));
    if (!open) return;
    const name = SECTIONS.some(([id]) => id === parts[1]) || parts[1] === "runs" ? parts[1] : "sources";
    document.querySelectorAll("#console-nav a").forEach((a) => {
      if (a.dataset.section === (name === "runs" ? "sources" : name)) a.setAttribute("aria-current", "page");
      else a.removeAttribute("aria-current");
    });
    // A fresh container per visit: an answer that arrives after the operator moved on lands
    // in a container no longer shown, never in the section shown now.
    const body = el("div", { class: "view" }, el("p", { class: "hint", text: "Loading…" }));
    $("console-body").replaceChildren(body);
    $("console-body").dataset.section = name;
    const render = { sources, usage, models, feedback, keys, audit, runs: () => runPage(body, parts[2]) }[name];
    render(body).catch((e) => failed(body, e));
  }

  function heading(title, ...extra) {
    return el("div", { class: "section-head" }, el("h2", { text: title }), ...extra);
  }

  // ---------- Sources ----------

  async function sources(body) {
    const [found, recent] = await Promise.all([json("/v1/admin/sources"),
      state.ingest ? json("/v1/ingest/runs?limit=20") : null]);
    const verifyBox = el("div", { class: "verify", "aria-live": "polite" });
    const verifyBtn = el("button", { type: "button", text: "Verify the index", disabled: !state.ingest,
      title: state.ingest ? null : `Verify ${NEEDS_INGEST}`, onclick: () => verify(verifyBtn, verifyBox) });
    const list = el("div", { class: "source-list" });
    body.replaceChildren(heading("Sources", verifyBtn), verifyBox, list,
      el("h3", { text: "Recent runs" }),
      !recent ? el("p", { class: "none", text: `The list of runs ${NEEDS_INGEST}.` }) : grid("The last 20 ingest runs, newest first", [
        ["Run", (r) => el("a", { href: `#console/runs/${r.id}`, text: `#${r.id}` })],
        ["Source", (r) => r.source], ["Trigger", (r) => r.trigger], ["Status", (r) => badge(r.status)],
        ["Started", (r) => when(r.started_at)], ["Seen", (r) => num(r.seen)], ["Added", (r) => num(r.added)],
        ["Updated", (r) => num(r.updated)], ["Deleted", (r) => num(r.deleted)], ["Failed", (r) => num(r.failed)],
      ], recent.runs));
    if (!state.ingest) list.append(el("p", { class: "hint", text: `Run now and Verify: this key ${NEEDS_INGEST}.` }));
    for (const s of found.sources) list.append(await sourceCard(s));
    if (!found.sources.length) list.append(el("p", { class: "none", text: "No source is declared or indexed yet." }));
  }

  async function sourceCard(s) {
    const run = s.last_run;
    const progress = el("div", { class: "progress", "aria-live": "polite" });
    const runBtn = el("button", { type: "button", class: "primary", "data-runnable": s.declared !== false && state.ingest, text: "Run now", onclick: () => runNow(s.name, runBtn, progress) });
    // Only a declared source can be run by name; one job at a time (the server says 409 too).
    if (state.job || s.declared === false || !state.ingest) runBtn.disabled = true;
    if (!state.ingest) runBtn.title = `Run now ${NEEDS_INGEST}`;
    const sparks = el("div", { class: "sparks" });
    const card = el("article", { class: "card source", "data-source": s.name },
      el("div", { class: "source-head" }, el("h3", { text: s.name }), badge(s.kind, "kind"),
        run ? badge(run.status) : badge("never run", "none"),
        s.declared === false ? badge("not in the config file", "none") : "", runBtn),
      facts([
        ["Documents", num(s.documents)], ["Chunks", num(s.chunks)],
        // [] only for a source no longer (or never) in the config: nothing says who may read.
        ["Readers", s.readers.length ? s.readers.join(", ") : "– (not declared)"],
        ["Schedule", s.schedule || "none (runs on demand)"], ["Last success", when(s.last_success_at)],
        ["Last run", run ? el("a", { href: `#console/runs/${run.run_id}`, text: `#${run.run_id} · ${when(run.started_at)} · ${secs(run.duration_s)}` }) : "never"],
      ]), progress, sparks);
    const labels = s.history.map((r) => `#${r.run_id} ${when(r.started_at)}`);
    const last = s.history[s.history.length - 1];
    await charts.sparkline(sparks, { title: `${s.name}: run duration, last ${s.history.length} runs`, labels,
      caption: `Duration${last ? `, last ${secs(last.duration_s)}` : ""}`, values: s.history.map((r) => r.duration_s), format: secs });
    await charts.sparkline(sparks, { title: `${s.name}: documents seen per run, last ${s.history.length} runs`, labels,
      caption: `Documents seen${last ? `, last ${num(last.documents)}` : ""}`, values: s.history.map((r) => r.documents), format: num });
    if (s.failed_documents.length) {
      card.append(grid(`Documents that failed in the last run (${s.failed_documents.length})`, [
        ["Document", (f) => (f.uri ? el("code", { text: f.uri }) : "(the whole run)")], ["Error", (f) => f.error], ["What to do", (f) => f.hint || "–"],
      ], s.failed_documents));
    }
    return card;
  }

  // Run now: an ingest job, followed through GET /v1/ingest/jobs/{id} until it is done or failed.
  async function runNow(name, button, box) {
    document.querySelectorAll(".source button[data-runnable]").forEach((b) => { b.disabled = true; });
    box.replaceChildren(el("span", { text: "Starting…" }));
    let job;
    try {
      job = await json("/v1/ingest/jobs", { method: "POST", body: { source: name } });
    } catch (e) {
      box.replaceChildren(problemNode(e));
      document.querySelectorAll(".source button[data-runnable]").forEach((b) => { b.disabled = false; });
      return;
    }
    state.job = job.id;
    const bar = el("progress", { "aria-label": `ingest job ${job.id}` });
    const text = el("span", { class: "job-status" });
    box.replaceChildren(bar, text);
    box.dataset.job = job.id;
    for (;;) {
      const counts = Object.entries(job.counts || {}).map(([k, v]) => `${k} ${num(v)}`).join(" · ");
      text.textContent = `job ${job.id}: ${job.status}${job.current ? ` · reading ${job.current}` : ""}${counts ? ` · ${counts}` : ""}`;
      box.dataset.status = job.status;
      if (job.status === "done" || job.status === "failed") break;
      await new Promise((r) => setTimeout(r, 500));
      try { job = await json(`/v1/ingest/jobs/${encodeURIComponent(job.id)}`); } catch (e) { box.append(problemNode(e)); break; }
    }
    state.job = null;
    bar.max = 1; bar.value = 1;
    if (job.message) box.append(el("div", { class: "problem", text: job.message }));
    for (const report of job.reports || []) {
      box.append(el("div", { class: "hint" }, el("a", { href: `#console/runs/${report.run_id}`, text: `run #${report.run_id}` }), `: ${report.summary}`));
    }
    document.querySelectorAll(".source button[data-runnable]").forEach((b) => { b.disabled = false; });
    // The card again with the new run in its figures and sparklines, this job's progress kept.
    try {
      const fresh = (await json("/v1/admin/sources")).sources.find((s) => s.name === name);
      const card = box.closest("article.source");
      if (fresh && card && card.isConnected) {
        const next = await sourceCard(fresh);
        next.querySelector(".progress").replaceWith(box);
        card.replaceWith(next);
      }
    } catch (_) { /* the figures stay as they were; the progress above says what happened */ }
  }

  async function verify(button, box) {
    button.disabled = true;
    box.replaceChildren(el("span", { text: "Checking the index and the blob store against the catalog…" }));
    try {
      const found = await json("/v1/ingest/verify", { method: "POST", body: {} });
      box.dataset.ok = String(found.ok);
      box.replaceChildren(el("p", { class: found.ok ? "ok" : "problem", text: found.ok
        ? "The index, the blob store and the catalog agree." : `${found.problems.length} problems found.` }),
      found.summary.length ? grid("What disagrees, by kind", [["Kind", (g) => g.kind], ["Count", (g) => num(g.count)],
        ["Documents", (g) => num(g.documents)], ["", (g) => g.headline]], found.summary) : "",
      found.plan.length ? el("details", {}, el("summary", { text: "What a repair would do (citewise verify --repair)" }),
        el("ul", {}, found.plan.map((p) => el("li", { text: p })))) : "");
    } catch (e) { box.replaceChildren(problemNode(e)); }
    button.disabled = false;
  }

  async function runPage(body, id) {
    const run = await json(`/v1/ingest/runs/${encodeURIComponent(id)}`);
    body.replaceChildren(heading(`Run #${run.id} of ${run.source}`, el("a", { href: "#console/sources", text: "← Sources" })),
      el("div", { class: "card" }, facts([
        ["Status", badge(run.status)], ["Trigger", run.trigger], ["Started", when(run.started_at)],
        ["Finished", run.finished_at ? when(run.finished_at) : "still running"], ["Seen", num(run.seen)],
        ["Added", num(run.added)], ["Updated", num(run.updated)], ["Unchanged", num(run.unchanged)],
        ["Deleted", num(run.deleted)], ["Failed", num(run.failed)], ["Chunks written", num(run.chunks_written)],
        ["Chunks embedded", num(run.chunks_embedded)], ["Where", run.host ? `${run.host} (pid ${run.pid})` : "–"],
      ]), run.message ? el("p", { class: "problem", text: run.message }) : ""),
      el("h3", { text: "Errors" }),
      grid(`Errors of run #${run.id}, in the order they happened`, [
        ["Document", (e) => (e.external_id ? el("code", { text: e.external_id }) : "(the run)")], ["Error", (e) => e.error],
      ], run.errors, "none"));
  }

  // ---------- Usage and cost ----------

  async function usage(body) {
    const report = await json(`/v1/admin/usage?window=${state.window}`);
    const switcher = el("div", { class: "switch", role: "group", "aria-label": "Window" },
      ["24h", "7d", "30d"].map((w) => el("button", { type: "button", "aria-pressed": String(w === state.window), "data-window": w, text: w,
        onclick: () => { state.window = w; usage(body).catch((e) => failed(body, e)); } })));
    const t = report.totals;
    const times = report.series.map((p) => p.at);
    const column = (key) => report.series.map((p) => p[key]);
    const hourly = report.bucket === "hour";
    const chartsBox = el("div", { class: "charts" });
    body.replaceChildren(heading("Usage and cost", switcher),
      el("p", { class: "hint", text: `${when(report.since)} – ${when(report.until)}, one point per ${report.bucket}: the same figures as citewise usage --since ${report.window}.` }),
      facts([
        ["Requests", num(t.requests)], ["Errors", num(t.errors)], ["Refused (401/403/429)", num(t.denied)],
        ["p50 / p95", `${ms(t.p50_ms)} / ${ms(t.p95_ms)}`], ["Answers / abstentions", `${num(t.answers)} / ${num(t.abstentions)}`],
        ["Cache hits", `${num(t.cache_hits)}${t.answers ? ` (${pct(t.cache_hits / t.answers)} of answers)` : ""}`],
        ["Tokens in / out", `${num(t.tokens_in)} / ${num(t.tokens_out)}`], ["Cost", money(t.cost)],
      ]), chartsBox);
    const top = el("div", { class: "tops" });
    body.append(el("h3", { text: "Top 20, by requests" }), top);
    for (const [dim, title] of [["provider", "Per provider"], ["route", "Per route"], ["key", "Per key"], ["principal", "Per principal"]]) {
      top.append(el("section", { class: "top", "data-top": dim }, grid(title, [
        [dim[0].toUpperCase() + dim.slice(1), (r) => r.name ?? "(none)"], ["Requests", (r) => num(r.requests)],
        ["Errors", (r) => num(r.errors)], ["Refused", (r) => num(r.denied)], ["p50", (r) => ms(r.p50_ms)], ["p95", (r) => ms(r.p95_ms)],
        ["Tokens in/out", (r) => `${num(r.tokens_in)} / ${num(r.tokens_out)}`], ["Cache hits", (r) => num(r.cache_hits)], ["Cost", (r) => money(r.cost)],
      ], report.top[dim] || [], "no requests in this window")));
    }
    const draw = (title, series) => charts.timeChart(chartsBox, { title, times, hourly, series });
    await draw("Requests, errors and refusals", [
      { label: "requests", values: column("requests") }, { label: "errors", values: column("errors") },
      { label: "refused", values: column("denied") }]);
    await draw("Latency (ms)", [{ label: "p50", values: column("p50_ms"), format: ms }, { label: "p95", values: column("p95_ms"), format: ms }]);
    await draw("Answers, abstentions and cache hits", [
      { label: "answers", values: column("answers") }, { label: "abstentions", values: column("abstentions") },
      { label: "cache hits", values: column("cache_hits") }]);
    await draw("Model tokens", [{ label: "in", values: column("tokens_in"), format: num }, { label: "out", values: column("tokens_out"), format: num }]);
    await draw("Cost", [{ label: "cost", values: column("cost"), format: money }]);
  }

  // ---------- Models ----------

  async function models(body) {
    const found = await json("/v1/admin/models");
    body.replaceChildren(heading("Models"),
      el("p", { class: "hint", text: `From the model gateway's own records on this replica (${found.replica}); each replica keeps its own breakers.` }),
      grid("Providers", [
        ["Provider", (p) => p.name], ["Kind", (p) => p.kind], ["Model", (p) => p.model],
        ["Breaker", (p) => badge(p.breaker.replace("_", " "), `breaker-${p.breaker}`)], ["Requests", (p) => num(p.requests)],
        ["Errors", (p) => num(p.errors)], ["Error rate", (p) => pct(p.error_rate)], ["Time to first token p50", (p) => ms(p.ttft_p50_ms)],
        ["Failovers", (p) => num(p.failovers)], ["Tokens in/out", (p) => `${num(p.tokens_in)} / ${num(p.tokens_out)}`], ["Cost", (p) => money(p.cost)],
      ], found.providers, "no model provider is configured: answers are extractive"));
  }

  // ---------- Feedback triage ----------

  async function feedback(body) {
    const found = await json(`/v1/admin/feedback?status=${state.feedback}&limit=50`);
    const pick = el("select", { "aria-label": "Which feedback", onchange: () => { state.feedback = pick.value; feedback(body).catch((e) => failed(body, e)); } },
      [["open", "Open"], ["added", "Added to the golden set"], ["dismissed", "Dismissed"]].map(([v, t]) => el("option", { value: v, text: t, selected: v === state.feedback })));
    const chartBox = el("div", { class: "charts" });
    const items = el("div", { class: "feedback-items" });
    body.replaceChildren(heading("Feedback", pick), chartBox, items);
    await charts.timeChart(chartBox, { title: "Feedback per day, last 30 days", times: found.counts.map((c) => c.day),
      series: [{ label: "helpful", values: found.counts.map((c) => c.helpful) }, { label: "not helpful", values: found.counts.map((c) => c.not_helpful) }] });
    if (!found.items.length) items.append(el("p", { class: "none", text: "Nothing here." }));
    for (const item of found.items) items.append(feedbackItem(item));
  }

  function feedbackItem(item) {
    const outcome = el("div", { class: "outcome", "aria-live": "polite" });
    const act = (path, done) => async () => {
      try {
        const result = await json(`/v1/admin/feedback/${encodeURIComponent(item.id)}/${path}`, { method: "POST" });
        card.dataset.status = result.status;
        actions.remove();
        outcome.replaceChildren(el("span", { class: "ok", text: done(result) }));
      } catch (e) { outcome.replaceChildren(problemNode(e)); }
    };
    const actions = item.status === "open" ? el("div", { class: "actions" },
      el("button", { type: "button", class: "primary", text: "Add to golden set", onclick: act("golden", (r) => `Added to ${r.path}.`) }),
      el("button", { type: "button", text: "Dismiss", onclick: act("dismiss", () => "Dismissed.") })) : "";
    const card = el("article", { class: "card feedback-item", "data-id": item.id, "data-status": item.status },
      el("div", { class: "source-head" }, badge(item.helpful ? "helpful" : "not helpful", item.helpful ? "ok" : "bad"),
        el("span", { class: "hint", text: `${when(item.at)} · ${item.principal}` })),
      el("h3", { text: item.question }),
      el("blockquote", { text: item.answer }),
      item.citations.length ? el("ol", { class: "cited" }, item.citations.map((c) => el("li", {}, c.title, " ", el("code", { text: c.locator || c.uri })))) : "",
      facts([["Comment", item.comment || "–"], ["The right document", item.right_document || "not given"]]),
      actions, outcome);
    return card;
  }

  // ---------- Keys ----------

  async function keys(body) {
    const found = await json("/v1/keys");
    const secretBox = el("div", { class: "secret", "aria-live": "polite" });
    const scopes = ["search", "answer", "ingest", "admin"];
    const form = el("form", { class: "card key-form", "aria-label": "Create a key", onsubmit: async (e) => {
      e.preventDefault();
      const data = new FormData(form);
      const request = { name: data.get("name").trim(), scopes: data.getAll("scope") };
      if (data.get("principal").trim()) request.principal = data.get("principal").trim();
      if (data.get("expires").trim()) request.expires = data.get("expires").trim();
      try {
        const key = await json("/v1/keys", { method: "POST", body: request });
        await keys(body);
        $("key-secret").replaceChildren(el("p", {}, el("strong", { text: `The secret of ${key.name}, shown this once:` })),
          el("code", { id: "new-secret", text: key.secret }), " ",
          el("button", { type: "button", text: "Copy", onclick: (ev) => copy(key.secret, ev.currentTarget) }),
          el("p", { class: "hint", text: "Copy it now: the server keeps only its hash. Lost, it cannot be shown again; create another key." }));
      } catch (err) { secretBox.replaceChildren(problemNode(err)); }
    } },
    el("h3", { text: "Create a key" }),
    el("label", {}, "Name ", el("input", { name: "name", required: true, maxlength: 64, placeholder: "slack-bot" })),
    el("fieldset", {}, el("legend", { text: "Scopes" }), scopes.map((s) => el("label", {}, el("input", { type: "checkbox", name: "scope", value: s, checked: s === "search" || s === "answer" }), ` ${s} `))),
    el("label", {}, "Acts as ", el("input", { name: "principal", maxlength: 200, placeholder: "user:alice or group:sre (optional)" })),
    el("label", {}, "Expires ", el("input", { name: "expires", maxlength: 40, placeholder: "90d or 2027-06-30 (optional)" })),
    el("button", { type: "submit", class: "primary", text: "Create" }));
    secretBox.id = "key-secret";
    body.replaceChildren(heading("Keys"), form, secretBox,
      grid("API keys (never their secrets)", [
        ["Name", (k) => k.name], ["Id", (k) => el("code", { text: k.id })], ["Scopes", (k) => k.scopes.join(", ")],
        ["Acts as", (k) => k.principal || "–"], ["Limits", (k) => Object.entries(k.limits).map(([a, b]) => `${a} ${b}`).join(", ") || "defaults"],
        ["Status", (k) => badge(k.status)], ["Created", (k) => when(k.created_at)], ["Expires", (k) => (k.expires_at ? when(k.expires_at) : "–")],
        ["Last used", (k) => when(k.last_used_at)], ["", (k) => (k.status === "active" ? revokeButton(k, body) : "")],
      ], found.keys));
  }

  // Two clicks, no dialog: revoking is at once and for good.
  function revokeButton(key, body) {
    const button = el("button", { type: "button", class: "danger", text: "Revoke", "aria-label": `Revoke ${key.name}` });
    button.addEventListener("click", async () => {
      if (button.dataset.armed !== "yes") {
        button.dataset.armed = "yes";
        button.textContent = "Revoke for good?";
        return;
      }
      try {
        await call(`/v1/keys/${encodeURIComponent(key.name)}`, { method: "DELETE" });
        await keys(body);
      } catch (e) { button.replaceWith(problemNode(e)); }
    });
    return button;
  }

  // ---------- Audit ----------

  async function audit(body, filters = { since: "7d", action: "", actor: "", outcome: "", limit: "200" }) {
    const params = new URLSearchParams({ since: filters.since, limit: filters.limit });
    for (const name of ["action", "actor", "outcome"]) if (filters[name]) params.set(name, filters[name]);
    const found = await json(`/v1/audit?${params}`);
    const form = el("form", { class: "filters-row", "aria-label": "Filter the audit log", onsubmit: (e) => {
      e.preventDefault();
      const data = new FormData(form);
      audit(body, { since: data.get("since"), action: data.get("action").trim(), actor: data.get("actor").trim(),
        outcome: data.get("outcome"), limit: data.get("limit") }).catch((err) => failed(body, err));
    } },
    el("label", {}, "Since ", el("select", { name: "since" }, ["24h", "7d", "30d", "365d"].map((v) => el("option", { value: v, text: v, selected: v === filters.since })))),
    el("label", {}, "Action ", el("input", { name: "action", value: filters.action, placeholder: "key.create", maxlength: 64 })),
    el("label", {}, "Actor ", el("input", { name: "actor", value: filters.actor, placeholder: "user:dana or key:ci-bot", maxlength: 200 })),
    el("label", {}, "Outcome ", el("select", { name: "outcome" }, [["", "any"], ["ok", "ok"], ["denied", "denied"]].map(([v, t]) => el("option", { value: v, text: t, selected: v === filters.outcome })))),
    el("label", {}, "At most ", el("input", { name: "limit", type: "number", min: 1, max: 1000, value: filters.limit })),
    el("button", { type: "submit", text: "Filter" }));
    // Narrowing what is shown (a target, a client, a detail) needs no server round trip.
    const narrow = el("input", { type: "search", "aria-label": "Narrow the rows shown", placeholder: "Narrow the rows shown: a target, a client…" });
    const chosen = ["action", "actor", "outcome"].filter((n) => filters[n]).map((n) => `, ${n} ${filters[n]}`).join("");
    const table = grid(`Audit log since ${filters.since}${chosen}, newest first`, [
      ["When", (a) => when(a.at)], ["Actor", (a) => a.actor], ["Key", (a) => a.key || "–"], ["Action", (a) => el("code", { text: a.action })],
      ["Target", (a) => a.target || "–"], ["Outcome", (a) => badge(a.outcome, a.outcome === "ok" ? "ok" : "bad")],
      ["Client", (a) => a.client || "–"], ["Detail", (a) => (Object.keys(a.detail).length ? el("code", { text: JSON.stringify(a.detail) }) : "–")],
    ], found.entries, "no entries");
    narrow.addEventListener("input", () => {
      const q = narrow.value.trim().toLowerCase();
      table.querySelectorAll("tbody tr").forEach((tr) => { tr.hidden = q !== "" && !tr.textContent.toLowerCase().includes(q); });
    });
    body.replaceChildren(heading("Audit"), form, narrow, table);
  }

  // ---------- wiring ----------

  document.addEventListener("citewise:me", (e) => show(e.detail));
  window.addEventListener("hashchange", () => { if (state.admin) route(); });
  document.addEventListener("DOMContentLoaded", () => {
    $("console-nav").replaceChildren(...SECTIONS.map(([id, title]) => el("a", { href: `#console/${id}`, "data-section": id, text: title })));
  });
})();
