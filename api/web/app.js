// citewise's page: a client of the same HTTP API as curl, the Slack bot and the MCP server.
// No framework and no build step: the DOM is built with textContent only (never innerHTML), so
// nothing a document says can become markup or script on this page.
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);
  // A pasted key lives in this page's memory only: not in storage, where any other script
  // of this origin (the API reference at /docs runs Swagger UI's large bundle) could read it.
  const state = { me: null, key: null, conversation: null, turns: 0, controller: null, busy: false };

  // ---------- small helpers ----------

  function el(tag, props = {}, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(props)) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "class") node.className = v;
      else if (k === "text") node.textContent = v;
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, v === true ? "" : String(v));
    }
    for (const c of children.flat()) {
      if (c === undefined || c === null || c === false) continue;
      node.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return node;
  }

  class Problem extends Error {
    constructor(status, body, requestId, retryAfter) {
      super((body && (body.detail || body.title)) || `the server answered ${status}`);
      this.status = status;
      this.hint = body && body.hint;
      this.requestId = requestId || (body && body.request_id);
      this.retryAfter = retryAfter;
    }
  }

  function authHeaders() {
    return state.key ? { Authorization: `Bearer ${state.key}` } : {};
  }

  async function call(path, { method = "GET", body, headers = {}, signal } = {}) {
    let res;
    try {
      res = await fetch(path, {
        method, signal, credentials: "same-origin",
        headers: { ...authHeaders(), ...(body !== undefined ? { "Content-Type": "application/json" } : {}), ...headers },
        body: body !== undefined ? JSON.stringify(body) : undefined,
      });
    } catch (e) {
      if (e.name === "AbortError") throw e;
      throw new Problem(0, { detail: "the server did not answer", hint: "check your connection, or whether citewise is running" });
    }
    if (!res.ok) {
      let payload = {};
      try { payload = await res.json(); } catch (_) { /* not problem details */ }
      throw new Problem(res.status, payload, res.headers.get("x-request-id"), res.headers.get("retry-after"));
    }
    return res;
  }

  function problemNode(error) {
    const box = el("div", { class: "problem", role: "alert" }, el("strong", { text: error.message }));
    if (error.hint) box.append(el("div", { class: "hint", text: error.hint }));
    if (error.status === 429 && error.retryAfter) box.append(el("div", { class: "hint", text: `You can ask again in ${error.retryAfter} s.` }));
    if (error.requestId) box.append(el("div", { class: "hint", text: `request id ${error.requestId}` }));
    return box;
  }

  function setStatus(text) { $("status").replaceChildren(text ? document.createTextNode(text) : ""); }

  function showError(error) {
    $("status").replaceChildren(problemNode(error));
    if (error.status === 401) signIn(error);
  }

  // A server-sent event stream read from a fetch response (EventSource cannot POST or send
  // an Authorization header). Events are separated by a blank line; ": ping" lines are comments.
  async function* events(res) {
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      if (!buffer.endsWith("\r")) buffer = buffer.replace(/\r\n?/g, "\n");
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const raw = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        let name = "message";
        const data = [];
        for (const line of raw.split("\n")) {
          if (line.startsWith(":")) continue;
          const colon = line.indexOf(":");
          const field = colon < 0 ? line : line.slice(0, colon);
          const val = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
          if (field === "event") name = val;
          else if (field === "data") data.push(val);
        }
        if (data.length) yield { event: name, data: JSON.parse(data.join("\n")) };
      }
    }
  }

  // ---------- who you are ----------

  async function loadMe() {
    // The key this answer is about: a slow answer to an earlier sign-in (a mistyped key) must
    // neither sign out nor sign in the key pasted after it.
    const key = state.key;
    try {
      const me = await (await call("/v1/me")).json();
      if (state.key !== key) return false;
      state.me = me;
      const name = me.user || me.key || (me.method === "local" ? "this machine (local mode)" : me.principal);
      const parts = [el("span", {}, "Signed in as ", el("strong", { text: name }))];
      if (me.groups.length) parts.push(` · groups ${me.groups.join(", ")}`);
      if (me.key && me.user) parts.push(` · via key ${me.key}`);
      parts.push(` · ${me.scopes.join(", ") || "no scopes"}`);
      if (state.key) {
        parts.push(el("button", { type: "button", class: "link", id: "signout", onclick: signOut, text: "Sign out" }));
      }
      $("who").replaceChildren(...parts);
      $("signin").hidden = true;
      document.dispatchEvent(new CustomEvent("citewise:me", { detail: me }));
      $("answer-btn").disabled = !me.scopes.includes("answer");
      $("search-btn").disabled = !me.scopes.includes("search");
      if ($("answer-btn").disabled) $("answer-btn").title = "your key lacks the answer scope";
      if ($("search-btn").disabled) $("search-btn").title = "your key lacks the search scope";
      return true;
    } catch (e) {
      if (state.key !== key) return false;
      state.me = null;
      document.dispatchEvent(new CustomEvent("citewise:me", { detail: null }));
      $("who").textContent = "Not signed in";
      if (e.status === 401) signIn(e); else showError(e);
      return false;
    }
  }

  function signIn(error) {
    $("signin").hidden = false;
    $("signin-why").textContent = error && error.message
      ? `The server says: ${error.message}.` : "This server needs to know who you are before it shows any knowledge.";
    if (state.key && error && error.status === 401) state.key = null;
    $("key").focus();
  }

  function signOut() {
    // Forget the key and everything shown with it: the next person sees none of it.
    state.key = null;
    state.me = null;
    state.conversation = null;
    $("thread").replaceChildren();
    $("results").replaceChildren();
    $("results").hidden = true;
    $("new-btn").hidden = true;
    $("who").textContent = "Not signed in";
    document.dispatchEvent(new CustomEvent("citewise:me", { detail: null }));
    signIn(null);
  }

  // ---------- filters ----------

  async function loadSources() {
    for (const id of ["f-sources", "f-services", "f-tags"]) {
      $(id).replaceChildren($(id).querySelector("legend"));
    }
    countFilters();
    let sources = [];
    try {
      sources = (await (await call("/v1/sources")).json()).sources;
    } catch (e) {
      $("f-sources").append(el("p", { class: "none", text: e.message }));
      return;
    }
    const services = new Map(), tags = new Map();
    for (const s of sources) {
      for (const v of s.services || []) services.set(v, (services.get(v) || 0) + 1);
      for (const v of s.tags || []) tags.set(v, (tags.get(v) || 0) + 1);
    }
    const box = (fieldset, name, values) => {
      if (!values.length) fieldset.append(el("p", { class: "none", text: "none" }));
      for (const [value, extra] of values) {
        fieldset.append(el("label", {}, el("input", { type: "checkbox", name, value, onchange: countFilters }), ` ${value} `,
          extra !== undefined ? el("span", { class: "n", text: extra }) : null));
      }
    };
    box($("f-sources"), "source", sources.filter((s) => s.documents > 0).map((s) => [s.name, `${s.documents} docs`]));
    box($("f-services"), "service", [...services.keys()].sort().map((v) => [v]));
    box($("f-tags"), "tag", [...tags.keys()].slice(0, 60).sort().map((v) => [v]));
  }

  function checked(name) {
    return [...document.querySelectorAll(`input[name="${name}"]:checked`)].map((i) => i.value);
  }

  function filters() {
    return { sources: checked("source"), services: checked("service"), tags: checked("tag") };
  }

  function countFilters() {
    const n = document.querySelectorAll(".facets input:checked").length;
    $("filter-count").textContent = n ? `(${n})` : "";
  }

  // ---------- answers ----------

  // Inline Markdown of an answer: `code`, **bold** and the [n] markers that cite passages.
  function inline(text, turn) {
    const out = document.createDocumentFragment();
    const pattern = /`([^`]+)`|\*\*([^*]+)\*\*|\[(\d+)\]/g;
    let last = 0, m;
    while ((m = pattern.exec(text))) {
      out.append(text.slice(last, m.index));
      if (m[1] !== undefined) out.append(el("code", { text: m[1] }));
      else if (m[2] !== undefined) out.append(el("strong", { text: m[2] }));
      else out.append(turn.marker(Number(m[3])) || m[0]);
      last = pattern.lastIndex;
    }
    out.append(text.slice(last));
    return out;
  }

  async function copy(text, button) {
    try {
      await navigator.clipboard.writeText(text);
    } catch (_) { // http:// on another host has no clipboard API: the old way
      const area = el("textarea", { class: "sr-only" });
      area.value = text;
      document.body.append(area);
      area.select();
      document.execCommand("copy");
      area.remove();
    }
    button.textContent = "Copied";
    setTimeout(() => { button.textContent = "Copy"; }, 1500);
  }

  function codeBlock(text, language) {
    const code = el("code", { text });
    const button = el("button", { type: "button", class: "copy", "aria-label": "Copy to clipboard", text: "Copy" });
    button.addEventListener("click", () => copy(text, button));
    return el("div", { class: "code", "data-language": language }, el("pre", { title: language }, code), button);
  }

  function location_(p) {
    let where = p.path ? `${p.source}/${p.path}` : p.source;
    if (p.start_line) where += p.end_line && p.end_line !== p.start_line ? `:${p.start_line}-${p.end_line}` : `:${p.start_line}`;
    if (p.symbol) where += ` · ${p.symbol}`;
    return where;
  }

  function safeUrl(url) {
    try {
      const u = new URL(url, location.href);
      return u.protocol === "https:" || u.protocol === "http:" ? u.href : null;
    } catch (_) { return null; }
  }

  class Turn {
    constructor(question) {
      this.id = ++state.turns;
      this.question = question;
      this.citations = new Map();
      this.blocks = el("div", { class: "blocks" });
      this.draft = el("div", { class: "draft" });
      this.list = el("ol");
      this.sources = el("section", { class: "sources", hidden: true, "aria-label": "Sources" }, el("h3", { text: "Sources" }), this.list);
      this.meta = el("div", { class: "meta" });
      this.box = el("div", { class: "answer streaming", "aria-live": "polite", "aria-busy": "true" }, this.blocks, this.draft, this.sources, this.meta);
      this.rewritten = el("p", { class: "rewritten", hidden: true });
      this.node = el("article", { class: "turn", id: `t-${this.id}` }, el("h2", { class: "question", text: question }), this.rewritten, this.box);
      $("thread").append(this.node);
    }

    marker(n) {
      if (!this.citations.has(n)) return null;
      return el("a", { class: "cite", href: `#c-${this.id}-${n}`, "aria-label": `source ${n}`,
        onclick: (e) => { e.preventDefault(); this.open(n); } }, `[${n}]`);
    }

    open(n) {
      const item = $(`c-${this.id}-${n}`);
      if (!item) return;
      item.open = true;
      item.scrollIntoView({ block: "nearest", behavior: "smooth" });
      item.querySelector("summary").focus();
      item.classList.add("flash");
      setTimeout(() => item.classList.remove("flash"), 1200);
    }

    setCitations(citations) {
      this.citations = new Map(citations.map((c) => [c.n, c]));
      this.list.replaceChildren(...citations.map((c) => {
        const url = c.url && safeUrl(c.url);
        return el("li", {}, el("details", { class: "citation", id: `c-${this.id}-${c.n}` },
          el("summary", {}, el("span", { class: "n", text: `[${c.n}]` }), c.title,
            c.heading && c.heading !== c.title ? ` › ${c.heading}` : "", el("span", { class: "where", text: location_(c) })),
          el("div", { class: "body" }, el("blockquote", { text: c.quote }),
            el("div", { class: "links" },
              url ? el("a", { href: url, target: "_blank", rel: "noopener noreferrer", text: "Open the source ↗" }) : null,
              el("button", { type: "button", class: "link", text: "Show in the document", onclick: () => showDocument(c) })))));
      }));
      this.sources.hidden = citations.length === 0;
    }

    delta(text) { this.draft.textContent += text; }

    renderBlock(block) {
      let node;
      if (block.type === "paragraph") node = el("p", {}, inline(block.text || "", this));
      else if (block.type === "code") node = codeBlock(block.text || "", block.language);
      else if (block.type === "fact") {
        node = el("div", { class: "fact" }, el("span", { class: "label", text: block.label || "" }),
          el("span", { class: "value" }, inline(block.value || "", this)));
      } else if (block.type === "steps") {
        node = el(block.ordered ? "ol" : "ul", block.ordered && block.start !== 1 ? { start: block.start } : {},
          (block.steps || []).map((s) => el("li", {}, inline(s.text, this),
            (s.code || []).map((c) => codeBlock(c.text, c.language)),
            (s.notes || []).map((note) => el("p", { class: "note" }, inline(note, this))))));
      } else node = el("p", { text: block.text || "" });
      // A block whose text names none of its sources still shows them.
      if (block.citations && block.citations.length && !node.querySelector("a.cite")) {
        const marks = block.citations.map((n) => this.marker(n)).filter(Boolean);
        if (marks.length) {
          const host = node.classList.contains("code") ? el("p", { class: "note" }) : node;
          host.append(" ", ...marks);
          if (host !== node) node = el("div", {}, node, host);
        }
      }
      return node;
    }

    block(block) {
      this.blocks.append(this.renderBlock(block));
      this.draft.textContent = "";
    }

    done(answer) {
      // The done event is authoritative: it may replace what streamed in.
      this.setCitations(answer.citations || []);
      this.blocks.replaceChildren(...(answer.blocks || []).map((b) => this.renderBlock(b)));
      this.draft.textContent = answer.blocks && answer.blocks.length ? "" : answer.answer;
      this.finish();
      this.box.classList.toggle("abstained", !!answer.abstained);
      if (answer.question && answer.question !== this.question) {
        this.rewritten.hidden = false;
        this.rewritten.textContent = `Searched as: ${answer.question}`;
      }
      const facts = [answer.mode === "llm" ? `written by ${answer.model || answer.provider || "a model"}` : "extractive answer",
        `evidence ${Number(answer.evidence || 0).toFixed(2)}`];
      if (answer.took_ms !== undefined) facts.push(`${Math.round(answer.took_ms)} ms`);
      if (answer.cached) facts.push("from the cache");
      if (answer.reason) facts.push(answer.reason);
      this.meta.textContent = facts.join(" · ");
      if (answer.answer_id) this.box.append(this.feedback(answer));
    }

    finish() {
      this.box.classList.remove("streaming");
      this.box.removeAttribute("aria-busy");
    }

    fail(error) {
      this.finish();
      this.box.append(problemNode(error));
      if (error.status === 401) signIn(error);
    }

    feedback(answer) {
      const row = el("div", { class: "feedback" }, el("span", { class: "label", text: "Was this helpful?" }));
      const send = async (body) => {
        try {
          await call(`/v1/answers/${answer.answer_id}/feedback`, { method: "POST", body });
          row.replaceChildren(el("span", { class: "thanks", role: "status", text: "Thanks — your feedback is recorded." }));
        } catch (e) { row.append(problemNode(e)); }
      };
      const yes = el("button", { type: "button", text: "Helpful", onclick: () => send({ helpful: true }) });
      const no = el("button", { type: "button", text: "Not helpful", onclick: () => {
        const comment = el("textarea", { rows: 2, maxlength: 2000, "aria-label": "What was wrong?", placeholder: "What was wrong or missing? (optional)" });
        const wrong = el("select", { "aria-label": "Which source was wrong?" }, el("option", { value: "", text: "No source was wrong" }),
          (answer.citations || []).map((c) => el("option", { value: c.n, text: `[${c.n}] points at the wrong place` })));
        // What teaches search (`citewise feedback export --golden`): where the answer really was.
        const right = el("input", { type: "text", maxlength: 1000, "aria-label": "The right document",
          placeholder: "The right document was… (a path or link, optional)" });
        const form = el("form", { onsubmit: (e) => {
          e.preventDefault();
          const body = { helpful: false };
          if (comment.value.trim()) body.comment = comment.value.trim();
          if (wrong.value) body.wrong_citation = Number(wrong.value);
          if (right.value.trim()) body.right_document = right.value.trim();
          send(body);
        } }, comment, wrong, right, el("button", { type: "submit", text: "Send" }));
        row.replaceChildren(form);
        comment.focus();
      } });
      row.append(yes, no);
      return row;
    }
  }

  async function ask(question) {
    if (state.busy) return;
    const turn = new Turn(question);
    $("results").hidden = true;
    busy(true);
    setStatus("");
    const body = { question, filters: filters(), stream: true };
    if (state.conversation) body.conversation_id = state.conversation;
    state.controller = new AbortController();
    let finished = false;
    try {
      const res = await call("/v1/answer", { method: "POST", body, headers: { Accept: "text/event-stream" }, signal: state.controller.signal });
      for await (const ev of events(res)) {
        if (ev.event === "citations") turn.setCitations(ev.data.citations);
        else if (ev.event === "delta") turn.delta(ev.data.text);
        else if (ev.event === "block") turn.block(ev.data.block);
        else if (ev.event === "done") {
          turn.done(ev.data.answer);
          finished = true;
          state.conversation = ev.data.answer.conversation_id;
          $("new-btn").hidden = false;
          $("q").placeholder = "Ask a follow-up — or start a new conversation";
        } else if (ev.event === "error") {
          turn.fail(new Problem(ev.data.status || 500, ev.data));
          finished = true;
        }
      }
      if (!finished) turn.fail(new Problem(0, { detail: "the answer stopped before it was complete", hint: "ask again" }));
    } catch (e) {
      if (e.name === "AbortError") {
        turn.finish();
        turn.meta.textContent = "Stopped.";
      } else turn.fail(e);
    } finally {
      busy(false);
      turn.node.scrollIntoView({ block: "nearest" });
    }
  }

  function busy(on) {
    state.busy = on;
    $("stop-btn").hidden = !on;
    $("answer-btn").disabled = on || !(state.me && state.me.scopes.includes("answer"));
  }

  function newConversation() {
    state.conversation = null;
    $("thread").replaceChildren();
    $("new-btn").hidden = true;
    $("q").placeholder = "Ask a question — e.g. how do I fail over the Redis cache?";
    $("q").focus();
  }

  // ---------- search ----------

  async function search(query) {
    const params = new URLSearchParams({ q: query, top_k: "10" });
    const f = filters();
    f.sources.forEach((v) => params.append("source", v));
    f.tags.forEach((v) => params.append("tag", v));
    f.services.forEach((v) => params.append("service", v));
    setStatus("Searching…");
    try {
      const found = await (await call(`/v1/search?${params}`)).json();
      setStatus("");
      const box = $("results");
      box.replaceChildren(el("h2", { text: `${found.results.length} passages for “${query}” (${Math.round(found.took_ms)} ms)` }),
        ...found.results.map((r) => {
          const url = r.url && safeUrl(r.url);
          return el("article", { class: "result" },
            el("h3", {}, r.title, r.heading && r.heading !== r.title ? ` › ${r.heading}` : ""),
            el("div", { class: "where" }, el("span", { class: "badge", text: r.source }),
              r.service ? el("span", { class: "badge", text: r.service }) : null,
              (r.tags || []).slice(0, 4).map((t) => el("span", { class: "badge", text: t })), location_(r)),
            el("div", { class: "snippet", text: r.text }),
            el("div", { class: "links" },
              url ? el("a", { href: url, target: "_blank", rel: "noopener noreferrer", text: "Open the source ↗" }) : null,
              el("button", { type: "button", class: "link", text: "Show in the document", onclick: () => showDocument(r) })));
        }));
      box.hidden = false;
      box.scrollIntoView({ block: "nearest" });
    } catch (e) { showError(e); }
  }

  // ---------- the document viewer: the cited lines (or section) in their document ----------

  async function showDocument(passage) {
    const dialog = $("viewer");
    $("viewer-title").textContent = passage.title;
    $("viewer-where").textContent = location_(passage);
    const body = $("viewer-body");
    body.replaceChildren(el("p", { class: "hint", text: "Loading…" }));
    if (!dialog.open) dialog.showModal();
    let doc;
    try {
      doc = await (await call(`/v1/documents/${encodeURIComponent(passage.document_id)}?include_content=true`)).json();
    } catch (e) { body.replaceChildren(problemNode(e)); return; }
    let target = null;
    const lined = passage.start_line && doc.content && !/html/.test(doc.media_type);
    if (lined) {
      const end = passage.end_line || passage.start_line;
      body.replaceChildren(...doc.content.split("\n").map((text, i) => {
        const no = i + 1;
        const cited = no >= passage.start_line && no <= end;
        const line = el("div", { class: cited ? "line cited" : "line" }, el("span", { class: "no", text: no }), el("span", { text: text || " " }));
        if (no === passage.start_line) target = line;
        return line;
      }));
    } else { // no line numbers (wiki pages): its sections, the cited one marked
      body.replaceChildren(...doc.chunks.map((c) => {
        const cited = c.heading === passage.heading;
        const node = el("div", { class: cited ? "line cited" : "line" }, el("span", { class: "no", text: "§" }),
          el("span", {}, el("strong", { text: c.heading }), "\n", c.text));
        if (cited && !target) target = node;
        return node;
      }));
    }
    if (target) target.scrollIntoView({ block: "center" });
    body.focus();
  }

  // What the console (console.js) shares with this script: calls go out with the signed-in
  // key, which stays in this closure. It learns who is signed in from "citewise:me" events.
  window.citewise = Object.freeze({ el, call, problemNode, copy });

  // ---------- wiring ----------

  function question() { return $("q").value.trim(); }

  function remember(query, mode) {
    const url = new URL(location.href);
    url.searchParams.set("q", query);
    if (mode === "search") url.searchParams.set("mode", "search"); else url.searchParams.delete("mode");
    history.replaceState(null, "", url);
  }

  function submit(mode) {
    const q = question();
    if (!q) { $("q").focus(); return; }
    remember(q, mode);
    if (mode === "search") search(q);
    else { $("q").value = ""; ask(q); }
  }

  document.addEventListener("DOMContentLoaded", async () => {
    $("ask").addEventListener("submit", (e) => { e.preventDefault(); submit("answer"); });
    $("search-btn").addEventListener("click", () => submit("search"));
    $("stop-btn").addEventListener("click", () => state.controller && state.controller.abort());
    $("new-btn").addEventListener("click", newConversation);
    $("clear-filters").addEventListener("click", () => {
      document.querySelectorAll(".facets input:checked").forEach((i) => { i.checked = false; });
      countFilters();
    });
    $("viewer-close").addEventListener("click", () => $("viewer").close());
    $("q").addEventListener("keydown", (e) => {
      if (e.key !== "Enter" || e.isComposing || e.shiftKey) return;
      e.preventDefault();
      submit(e.ctrlKey || e.metaKey ? "search" : "answer");
    });
    document.addEventListener("keydown", (e) => {
      const typing = /^(INPUT|TEXTAREA|SELECT)$/.test(document.activeElement.tagName);
      if (e.key === "/" && !typing && !$("viewer").open) { e.preventDefault(); $("q").focus(); }
      if (e.key === "Escape" && state.busy && state.controller) state.controller.abort();
    });
    $("signin-form").addEventListener("submit", async (e) => {
      e.preventDefault();
      state.key = $("key").value.trim();
      $("key").value = "";
      if (await loadMe()) start();
    });
    if (await loadMe()) start();
  });

  let started = false;
  function start() {
    loadSources(); // again after each sign-in: the filters offer what this caller may read
    if (started) return;
    started = true;
    const params = new URLSearchParams(location.search);
    const q = params.get("q");
    $("q").focus();
    if (q) {
      // A shared link fills the question in; only a search runs by itself. An answer waits
      // for Enter: a link must not make the page ask something in your name unseen.
      $("q").value = q;
      if (params.get("mode") === "search") submit("search");
      else setStatus("Press Enter to ask this question.");
    }
  }
})();
