// trioproxy admin UI: nine pages over the admin JSON API (/api/*) and /debug/trace; the Keys, Spend
// and Logs pages are in keys_ui.js, the Requests page in requests_ui.js.
// Plain modern JS, no build step; trace_model.js holds the trace viewer's state.
"use strict";

const TOKEN_KEY = "trioproxy.adminToken";
const $ = (id) => document.getElementById(id);

// -- small DOM helpers ---------------------------------------------------------------------------
function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("data-") || k === "title" || k === "role" || k === "aria-label") node.setAttribute(k, v);
    else node[k] = v;
  }
  for (const c of children.flat()) if (c !== null && c !== undefined) node.append(c instanceof Node ? c : String(c));
  return node;
}
const SVG_NS = "http://www.w3.org/2000/svg";
function svg(tag, attrs = {}, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  for (const c of children.flat()) if (c !== null && c !== undefined) node.append(c instanceof Node ? c : String(c));
  return node;
}

function showError(text) {
  const banner = $("error-banner");
  banner.textContent = text || "";
  banner.hidden = !text;
}

// -- API with the admin token --------------------------------------------------------------------
let tokenPrompt = null;

function authHeaders() {
  const token = sessionStorage.getItem(TOKEN_KEY);
  return token ? { Authorization: `Bearer ${token}` } : {};
}

/** Ask for the admin token once, however many requests are waiting for it. */
function askToken() {
  if (!tokenPrompt) {
    tokenPrompt = new Promise((resolve) => {
      const dialog = $("token-dialog");
      const form = $("token-form");
      form.onsubmit = (ev) => {
        ev.preventDefault();
        const value = $("token-input").value.trim();
        if (!value) return;
        sessionStorage.setItem(TOKEN_KEY, value);
        $("token-input").value = "";
        dialog.close();
        tokenPrompt = null;
        resolve();
      };
      dialog.addEventListener("cancel", (ev) => ev.preventDefault());
      if (!dialog.open) dialog.showModal();
    });
  }
  return tokenPrompt;
}

async function api(path, options = {}) {
  for (;;) {
    const response = await fetch(path, { ...options, headers: { ...(options.headers || {}), ...authHeaders() } });
    if (response.status === 401) {
      sessionStorage.removeItem(TOKEN_KEY);
      await askToken();
      continue;
    }
    if (!response.ok) throw new Error(`${path}: ${response.status} ${(await response.text()).trim()}`);
    return response;
  }
}
const getJSON = async (path) => (await api(path)).json();

/** A server-sent-events body, block by block (the text between blank lines), until it ends:
 *  the trace stream and the requests history read it alike. */
async function readSseBlocks(response, onBlock) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      onBlock(block);
    }
  }
}

// -- shared: config (route names) and the reload badge -------------------------------------------
let config = null;
const routeNames = new Map();

async function loadConfig() {
  config = await getJSON("/api/config");
  routeNames.clear();
  for (const bind of config.binds)
    for (const listener of bind.listeners)
      for (const route of listener.routes) routeNames.set(route.key, route.name || route.key);
  return config;
}
function routeLabel(key) {
  if (!key) return "(no route)";
  return routeNames.get(key) || key.split("/").pop();
}
function limiterLabel(key) {
  if (routeNames.has(key)) return `route ${routeNames.get(key)}`;
  if (config) {
    for (const bind of config.binds)
      for (const listener of bind.listeners)
        if (listener.key === key) return `listener ${listener.name || key}`;
  }
  return key;
}

function showReload(state) {
  const badge = $("reload-badge");
  const reload = state.reload;
  badge.textContent = reload.ok ? "config ok" : "reload rejected";
  badge.className = "badge " + (reload.ok ? "ok" : "bad");
  badge.title = reload.ok ? `reloads applied: ${reload.applied}` : reload.errors.join("\n");
}

// -- Overview --------------------------------------------------------------------------------------
function activePolicies(policies) {
  return Object.entries(policies || {}).filter(([, v]) => v !== null && v !== undefined);
}
function policyChips(policies) {
  const active = activePolicies(policies);
  if (!active.length) return el("span", { class: "muted", text: "none" });
  return el("span", {}, active.map(([kind, spec]) =>
    el("span", { class: "chip", title: JSON.stringify(spec, null, 2), text: kind })));
}
function describeMatch(match) {
  const parts = [];
  if (match.path) parts.push(`${match.path.kind} ${match.path.value}`);
  if (match.method) parts.push(`method ${match.method}`);
  for (const h of match.headers || []) parts.push(`header ${h.name} ${h.kind || "exact"} ${h.value}`);
  for (const q of match.query || []) parts.push(`query ${q.name} ${q.kind || "exact"} ${q.value}`);
  return parts.join(" · ") || JSON.stringify(match);
}

async function renderOverview() {
  const [cfg, state] = await Promise.all([loadConfig(), getJSON("/api/statuses")]);
  showReload(state);
  const servers = $("servers");
  servers.replaceChildren(...settingEntries(cfg.config));

  const reload = state.reload;
  $("reload").replaceChildren(
    el("p", { class: reload.ok ? "ok" : "bad", "data-reload": reload.ok ? "ok" : "rejected",
      text: !reload.ok ? "last reload rejected: the previous config keeps serving"
        : reload.file ? `serving ${reload.file}` : "serving a built-in config (no file is watched)" }),
    el("p", { class: "muted", text: `reloads applied: ${reload.applied}, rejected: ${reload.rejected}` }),
    ...(reload.errors.length ? [el("ul", { class: "problems" }, reload.errors.map((p) => el("li", { text: p })))] : []),
  );

  $("statuses").replaceChildren(renderStatuses(state.statuses));

  $("binds").replaceChildren(...cfg.binds.map((bind) => el("div", { class: "card bind", "data-bind": bind.port },
    el("h2", { text: `Bind ${bind.port}` }),
    ...bind.listeners.map((listener) => el("div", { class: "listener" },
      el("h3", {}, `Listener ${listener.name || listener.key}`,
        el("span", { class: "muted" }, ` ${listener.protocol} · hostname ${listener.hostname || "*"}`)),
      el("p", {}, "Policies: ", policyChips(listener.policies)),
      el("div", { class: "scroll-x" }, el("table", { class: "grid" },
        el("thead", {}, el("tr", {}, ["Route", "Hostnames", "Matches", "Policies", "Backends"].map((h) => el("th", { text: h })))),
        el("tbody", {}, listener.routes.map((route) => el("tr", { "data-route": route.name },
          el("td", {}, el("strong", { text: route.name }), el("div", { class: "muted small", text: route.key })),
          el("td", { text: route.hostnames.length ? route.hostnames.join(", ") : "*" }),
          el("td", {}, el("ul", { class: "plain" }, route.matches.map((m) => el("li", { class: "mono", text: describeMatch(m) })))),
          el("td", {}, policyChips(route.policies)),
          el("td", {}, route.backends.length ? el("ul", { class: "plain" }, route.backends.map((b) => el("li", {},
            el("span", { class: "mono", text: b.target }),
            el("span", { class: "muted", text: ` ${b.type} · weight ${b.weight}` }),
            activePolicies(b.policies).length ? el("div", {}, policyChips(b.policies)) : null))) : el("span", { class: "muted", text: "none" })),
        ))),
      )),
    )),
  )));
}
/** dt/dd pairs of a settings object; a nested object (``backend``) is a nested list, never "[object Object]". */
function settingEntries(settings) {
  return Object.entries(settings || {}).flatMap(([k, v]) => [el("dt", { text: k }), el("dd", { "data-setting": k }, settingValue(v))]);
}
function settingValue(value) {
  if (value === null || value === undefined) return el("span", { class: "muted", text: "default" });
  if (Array.isArray(value)) return value.length ? value.map((v) => (typeof v === "object" ? JSON.stringify(v) : String(v))).join(", ")
    : el("span", { class: "muted", text: "none" });
  if (typeof value === "object") {
    const entries = Object.entries(value).filter(([, v]) => v !== null && v !== undefined);
    return entries.length ? el("dl", { class: "kv nested" }, settingEntries(Object.fromEntries(entries)))
      : el("span", { class: "muted", text: "defaults" });
  }
  return String(value);
}
/** Resource statuses: {kind, metadata, status: {conditions | parents[] | ancestors[]}} → a table. */
function renderStatuses(statuses) {
  const list = Array.isArray(statuses) ? statuses : statuses && typeof statuses === "object" ? Object.values(statuses) : [];
  if (!list.length) return el("p", { class: "muted", "data-statuses": "none", text: "none" });
  const conditionsOf = (status) => {
    const s = (status && status.status) || {};
    const groups = [...(s.parents || []), ...(s.ancestors || [])];
    return [...(s.conditions || []), ...groups.flatMap((g) => g.conditions || [])];
  };
  return el("ul", { class: "plain statuses", "data-statuses": list.length }, list.map((status) => {
    if (!status || typeof status !== "object" || !status.kind) return el("li", { text: statusText(status) });
    const meta = status.metadata || {};
    const conditions = conditionsOf(status);
    return el("li", { "data-status": `${status.kind}/${meta.name}` },
      el("strong", { text: `${status.kind} ` }), el("span", { class: "mono", text: `${meta.namespace ? meta.namespace + "/" : ""}${meta.name || ""}` }),
      el("div", {}, conditions.length ? conditions.map((c) => el("span", {
        class: "chip " + (c.status === "True" ? "cond-ok" : "cond-bad"),
        title: [c.reason, c.message].filter(Boolean).join(": ") || c.type,
        text: `${c.type}${c.status === "True" ? "" : " " + c.status}${c.reason && c.status !== "True" ? " (" + c.reason + ")" : ""}`,
      })) : el("span", { class: "muted", text: "no conditions" })));
  }));
}

function statusText(status) {
  if (status && typeof status === "object") {
    const name = status.name || status.resource || status.key || "";
    const rest = Object.entries(status).filter(([k]) => !["name", "resource", "key"].includes(k))
      .map(([k, v]) => `${k}=${typeof v === "object" ? JSON.stringify(v) : v}`).join(" ");
    return `${name} ${rest}`.trim();
  }
  return String(status);
}

// -- Trace -----------------------------------------------------------------------------------------
const trace = {
  view: new TraceModel.TraceView(),
  running: false,
  controller: null,
  renderPending: false,
  validateTimer: null,
  validation: 0,
};

function setTraceStatus(text, state) {
  const node = $("trace-status");
  node.textContent = text;
  if (state) node.dataset.state = state;
}

function scheduleValidate() {
  clearTimeout(trace.validateTimer);
  trace.validateTimer = setTimeout(() => validateExpression().catch((error) => {
    $("trace-expression-state").textContent = `cannot check the expression: ${error.message || error}`;
  }), 200);
}

/** Compile the expression on the server (the same CEL engine the trace uses) and say why not. */
async function validateExpression() {
  const input = $("trace-expression");
  const expression = input.value;
  const ticket = ++trace.validation;
  const box = $("trace-expression-state");
  if (!expression.trim()) {
    input.classList.remove("invalid", "valid");
    box.textContent = "no expression: the next request is traced";
    box.dataset.valid = "true";
    return true;
  }
  const result = await getJSON("/api/cel/validate?expression=" + encodeURIComponent(expression));
  if (ticket !== trace.validation) return result.valid;
  input.classList.toggle("invalid", !result.valid);
  input.classList.toggle("valid", result.valid);
  box.textContent = result.valid ? "expression ok" : `invalid expression: ${result.error}`;
  box.dataset.valid = String(result.valid);
  return result.valid;
}

async function startTrace() {
  if (trace.running) { stopTrace(); return; }
  const expression = $("trace-expression").value.trim();
  if (!(await validateExpression())) { setTraceStatus("fix the expression first", "error"); return; }
  trace.running = true;
  if ($("trace-follow").checked) trace.view.showRequests = true; // as the text UI's --follow
  renderTrace();
  $("trace-start").textContent = "Stop";
  try {
    // Follow: one stream of every request (?follow=true), so none is missed between two streams;
    // a gateway that ends it anyway gets a new one.
    do {
      await traceOnce(expression, $("trace-follow").checked);
    } while (trace.running && $("trace-follow").checked);
  } catch (error) {
    if (error.name !== "AbortError") setTraceStatus(String(error.message || error), "error");
  } finally {
    const wasStopped = !trace.running;
    trace.running = false;
    trace.controller = null;
    $("trace-start").textContent = "Start trace";
    if ($("trace-status").dataset.state !== "error")
      setTraceStatus(statusLine(wasStopped ? "stopped" : "stream complete"), "done");
    renderTrace();
  }
}

function stopTrace() {
  trace.running = false;
  if (trace.controller) trace.controller.abort();
}

function statusLine(prefix) {
  const view = trace.view;
  const n = view.eventCount;
  let text = `${n} events`;
  if (view.showRequests) text += ` in ${view.requests.length} requests`;
  return prefix ? `${prefix}: ${text}` : text;
}

/** One /debug/trace stream (POST, read with fetch so the token goes in a header). */
async function traceOnce(expression, follow) {
  const controller = new AbortController();
  trace.controller = controller;
  const params = new URLSearchParams();
  if (expression) params.set("expression", expression);
  if (follow) params.set("follow", "true");
  const query = params.toString();
  const url = "/debug/trace" + (query ? "?" + query : "");
  const response = await api(url, { method: "POST", signal: controller.signal });
  await readSseBlocks(response, handleSseBlock);
}

function handleSseBlock(block) {
  const data = [];
  for (const line of block.split("\n")) {
    if (line.startsWith(":")) {
      const comment = line.slice(1).trim();
      if (comment === "ready") setTraceStatus(statusLine("") + " · waiting for a request", "waiting");
      else if (comment.startsWith("dropped")) setTraceStatus(comment, "warn");
    } else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
  }
  if (!data.length) return;
  const event = JSON.parse(data.join("\n"));
  trace.view.addEvent(event);
  const finished = ((event && event.message) || {}).type === "requestFinished";
  if (finished) setTraceStatus(statusLine("") + " · waiting for a request", "waiting");
  else setTraceStatus(statusLine("") + " · receiving", "receiving");
  scheduleRender();
}

/** Redraw once per frame, not once per event: a burst of requests must not stall the reader. */
function scheduleRender() {
  if (trace.renderPending) return;
  trace.renderPending = true;
  requestAnimationFrame(() => { trace.renderPending = false; renderTrace(); });
}

function renderTrace() {
  const view = trace.view;
  $("trace-download").disabled = view.eventCount === 0;
  const done = !!(view.trace && view.trace.finished);
  for (const id of ["trace-har", "trace-curl"]) $(id).disabled = !done;
  // The replay's fresh trace joins the list: not while this page's trace stream is adding to it.
  const replay = $("trace-replay");
  if (!replay.matches("[data-busy]")) replay.disabled = !done || trace.running;
  replay.title = trace.running ? "stop the trace first: the replay's fresh trace joins the list"
    : "send the selected request again through the gateway, with a fresh trace";
  $("pane-requests").hidden = !view.showRequests;
  $("trace-panes").classList.toggle("with-requests", view.showRequests);
  for (const pane of document.querySelectorAll("#trace-panes .pane"))
    pane.classList.toggle("focused", pane.dataset.pane === view.focus);

  const query = view.search;
  const matches = view.requests.map((r) => new Set(r.matching(query)));
  $("request-rows").replaceChildren(...view.requests.map((r, i) => el("tr", {
    class: (i === view.selectedRequest ? "selected" : "") + (query && matches[i].size ? " match" : ""), "data-index": i,
  }, el("td", { text: i + 1 }), el("td", { text: r.method }), el("td", { class: "mono", text: r.path, title: r.path }),
    el("td", { text: r.status }), el("td", { text: r.duration }))));

  const current = view.trace;
  const mine = matches[view.selectedRequest] || new Set();
  const only = query && $("trace-search-filter").checked;
  $("event-rows").replaceChildren(...(current ? current.rows : []).flatMap((row, i) => (only && !mine.has(i) && i !== view.selectedRow ? [] : [el("tr", {
    class: `sev-${row.severity}` + (i === view.selectedRow ? " selected" : "") + (query && mine.has(i) ? " match" : ""),
    "data-kind": row.kind, "data-index": i,
  }, el("td", { text: row.number }), el("td", { text: row.kind }), el("td", { text: row.summary }))])));
  renderSearchState(matches);

  $("details-title").textContent = view.detailsTitle();
  $("details-format").firstChild.textContent = view.fmt + " ";
  for (const b of document.querySelectorAll(".modes [data-mode]")) b.classList.toggle("active", b.dataset.mode === view.mode);
  const details = $("details");
  details.dataset.mode = view.mode;
  const bodies = view.mode === "bodies";
  details.hidden = bodies;
  $("bodies").hidden = !bodies;
  if (bodies) renderBodies(current, query);
  else details.replaceChildren(...view.detailsLines().map(([style, line]) => el("span", { class: style ? `line ${style}` : "line" }, highlighted(line, query))));

  for (const row of document.querySelectorAll("#event-rows tr.selected, #request-rows tr.selected"))
    row.scrollIntoView({ block: "nearest" });
}

/** ``text`` as nodes, each case-insensitive occurrence of ``query`` in a <mark>. */
function highlighted(text, query) {
  if (!query) return [text];
  const lower = text.toLowerCase(), q = query.toLowerCase();
  const out = [];
  let at = 0;
  for (let i = lower.indexOf(q); i >= 0; i = lower.indexOf(q, at)) {
    if (i > at) out.push(text.slice(at, i));
    out.push(el("mark", { text: text.slice(i, i + q.length) }));
    at = i + q.length;
  }
  if (at < text.length) out.push(text.slice(at));
  return out;
}

function renderSearchState(matches) {
  const box = $("trace-search-state");
  const query = trace.view.search;
  if (!query) { box.textContent = ""; delete box.dataset.count; return; }
  const events = matches.reduce((n, m) => n + m.size, 0);
  const requests = matches.filter((m) => m.size).length;
  box.dataset.count = events;
  box.textContent = events ? `${events} matching event${events === 1 ? "" : "s"}` + (trace.view.showRequests ? ` in ${requests} request${requests === 1 ? "" : "s"}` : "")
    : "no match";
}

const SIDE_NAMES = { request: "Request body", response: "Response body" };
const ORIGINAL_NAMES = { request: "as the client sent it", response: "as the provider sent it" };

/** The Bodies view: request and response side by side; JSON pretty-printed, SSE streams reassembled. */
function renderBodies(current, query) {
  const box = $("bodies");
  if (!current) { box.replaceChildren(el("p", { class: "muted", text: "waiting for trace data" })); return; }
  const found = current.bodies();
  const open = new Set([...box.querySelectorAll("details[open] > summary")].map((n) => n.textContent));
  box.replaceChildren(...["request", "response"].map((side) => {
    const body = found[side];
    const head = el("h3", {}, SIDE_NAMES[side], body ? el("span", { class: "muted small",
      text: ` ${body.stage}${body.contentType ? " · " + body.contentType : ""} · ${body.text.length} chars${body.truncated ? " · truncated" : ""}` }) : null);
    if (!body) return el("div", { class: "body-side", "data-side": side }, head, el("p", { class: "muted", text: "no body in this trace" }));
    const parts = [head, ...bodyView(body, query)];
    if (body.original) parts.push(el("details", { class: "original" }, el("summary", { text: `${ORIGINAL_NAMES[side]} (${body.original.stage})` }),
      ...bodyView(body.original, query)));
    return el("div", { class: "body-side", "data-side": side }, parts);
  }));
  for (const summary of box.querySelectorAll("details > summary")) if (open.has(summary.textContent)) summary.parentNode.open = true;
}

function bodyView(body, query) {
  const shown = LlmStream.present(body.text, body.contentType);
  if (shown.kind === "empty") return [el("p", { class: "muted", text: "empty" })];
  if (shown.kind !== "sse") return [el("pre", { class: `body ${shown.kind}`, "data-kind": shown.kind }, highlighted(shown.text, query))];
  const stream = shown.stream;
  const facts = [["format", stream.format], ["model", stream.model], ["finish", stream.finishReason],
    ["events", String(stream.events) + (stream.done ? "" : " (no end marker)")]].filter(([, v]) => v);
  return [
    el("div", { class: "stream", "data-format": stream.format },
      el("div", { class: "muted small" }, facts.map(([k, v]) => el("span", { class: "fact" }, `${k}: `, el("strong", { text: v })))),
      el("h4", { text: "Reassembled text" }),
      el("pre", { class: "body generated", "data-kind": "generated" }, highlighted(stream.text || "(no text)", query)),
      stream.toolCalls.length ? el("h4", { text: "Tool calls" }) : null,
      stream.toolCalls.length ? el("pre", { class: "body tools" }, highlighted(stream.toolCalls.map((t) => `${t.name}(${t.arguments})`).join("\n"), query)) : null,
      el("h4", { text: "Usage" }),
      el("pre", { class: "body usage", "data-kind": "usage" }, highlighted(stream.usage ? JSON.stringify(stream.usage, null, 2) : "(the stream reported none)", query))),
    el("details", { class: "raw" }, el("summary", { text: "raw stream" }), el("pre", { class: "body raw" }, highlighted(shown.text, query))),
  ];
}

/** ``c`` as in the text UI: the details pane's text to the clipboard. */
function copyDetails() {
  const text = trace.view.detailsLines().map(([, line]) => line).join("\n");
  const done = (ok) => setTraceStatus(ok ? "details copied to the clipboard" : "the browser refused the clipboard",
    $("trace-status").dataset.state);
  if (!navigator.clipboard) { done(false); return; }
  navigator.clipboard.writeText(text).then(() => done(true), () => done(false));
}

/** Save ``text`` as a file named ``name`` (the admin token stays in headers: fetch, then a blob link). */
function saveFile(text, name, type) {
  const link = el("a", { href: URL.createObjectURL(new Blob([text], { type })), download: name });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(link.href), 1000);
}
const stamp = () => new Date().toISOString().replace(/[:.]/g, "-");

// -- export and replay of the selected request (POST /api/export, /api/replay: docs/export.md) --------
/** The ``name: value`` lines of the credentials box as an object (names lower-cased). */
function traceCredentials() {
  const headers = {};
  for (const line of $("trace-credentials").value.split("\n")) {
    const cut = line.indexOf(":");
    if (cut > 0 && line.slice(0, cut).trim()) headers[line.slice(0, cut).trim().toLowerCase()] = line.slice(cut + 1).trim();
  }
  return headers;
}

function showExport(title, text, state) {
  $("trace-export").hidden = false;
  $("trace-export").dataset.state = state;
  $("trace-export-title").textContent = title;
  $("trace-export-text").textContent = text;
}

async function postJSON(path, body) {
  return api(path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
}

async function exportSelected(format) {
  const current = trace.view.trace;
  if (!current || !current.finished) return;
  try {
    if (format === "har") {
      const response = await postJSON("/api/export?format=har", { traces: [current.events] });
      saveFile(await response.text(), `request-${stamp()}.har`, "application/json");
      setTraceStatus(`saved the request ${current.method} ${current.path} as HAR`, $("trace-status").dataset.state);
    } else {
      const response = await postJSON("/api/export?format=curl", { traces: [current.events], headers: traceCredentials() });
      showExport(`curl: ${current.method} ${current.path}`, (await response.text()).trim(), "curl");
    }
  } catch (error) {
    showExport(`${format} failed`, String(error.message || error), "error");
  }
}

async function replaySelected() {
  const current = trace.view.trace;
  if (!current || !current.finished) return;
  const button = $("trace-replay");
  button.disabled = true;
  button.dataset.busy = "1";
  try {
    const response = await postJSON("/api/replay", { trace: current.events, headers: traceCredentials() });
    const answer = await response.json();
    const head = answer.headers.map(([k, v]) => `${k}: ${v}`).join("\n");
    showExport(`Replayed ${current.method} ${current.path}: HTTP ${answer.status}`, `${head}\n\n${answer.body}`, "replay");
    $("trace-export").dataset.status = answer.status;
    // The fresh trace joins the list, selected.
    if (answer.trace.length) {
      const view = trace.view;
      view.followRequests = true;
      view.showRequests = true;
      for (const event of answer.trace) view.addEvent(event);
      view.selectRequest(view.requests.length - 1);
    }
    renderTrace();
  } catch (error) {
    showExport("replay failed", String(error.message || error), "error");
  } finally {
    delete button.dataset.busy;
    renderTrace();
  }
}

function downloadTrace() {
  const events = trace.view.allEvents();
  if (!events.length) return;
  const text = events.map((e) => JSON.stringify(e)).join("\n") + "\n";
  saveFile(text, `trace-${stamp()}.jsonl`, "application/x-ndjson");
}

// Keys as in the text UI (tui/keys.py): tab, arrows/j/k, PgUp/PgDn, Home/End/g/G, e/s/d, f.
function onTraceKey(ev) {
  if (currentPage() !== "trace" || ev.ctrlKey || ev.metaKey || ev.altKey) return;
  const target = ev.target;
  if (target && (target.tagName === "INPUT" || target.tagName === "TEXTAREA" || target.isContentEditable)) return;
  // Tab moves between the panes only when the focus is not on a control (keep keyboard navigation).
  if (ev.key === "Tab" && target && target !== document.body && !target.closest("#trace-panes")) return;
  const view = trace.view;
  const details = $("details");
  const page = view.focus === "details" ? Math.max(1, Math.floor(details.clientHeight / 18)) : 10;
  const scrollDetails = (lines) => { details.scrollTop += lines * 18; };
  const moves = { ArrowUp: -1, k: -1, ArrowDown: 1, j: 1, PageUp: -page, PageDown: page, Home: -1e9, g: -1e9, End: 1e9, G: 1e9 };
  if (ev.key in moves) {
    if (view.focus === "details") {
      if (Math.abs(moves[ev.key]) >= 1e9) details.scrollTop = moves[ev.key] < 0 ? 0 : details.scrollHeight;
      else scrollDetails(moves[ev.key]);
    } else view.move(moves[ev.key]);
  } else if (ev.key === "Tab") view.focusNext(ev.shiftKey ? -1 : 1);
  else if (ev.key === "e") view.setMode("event");
  else if (ev.key === "s") view.setMode("snapshot");
  else if (ev.key === "d") view.setMode("diff");
  else if (ev.key === "b") view.setMode("bodies");
  else if (ev.key === "/") { $("trace-search").focus(); ev.preventDefault(); return; }
  else if (ev.key === "n" || ev.key === "N") view.nextMatch(ev.key === "n" ? 1 : -1);
  else if (ev.key === "f") view.toggleFormat();
  else if (ev.key === "c") { copyDetails(); return; }
  else return;
  ev.preventDefault();
  renderTrace();
}

function setupTrace() {
  $("trace-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    startTrace().catch((error) => setTraceStatus(String(error.message || error), "error"));
  });
  $("trace-expression").addEventListener("input", scheduleValidate);
  $("trace-download").addEventListener("click", downloadTrace);
  $("trace-clear").addEventListener("click", () => {
    trace.view = new TraceModel.TraceView();
    if (!trace.running) setTraceStatus("press Start trace, then send a request to the gateway", "idle");
    renderTrace();
  });
  for (const b of document.querySelectorAll(".modes [data-mode]"))
    b.addEventListener("click", () => { trace.view.setMode(b.dataset.mode); renderTrace(); });
  $("details-format").addEventListener("click", () => { trace.view.toggleFormat(); renderTrace(); });
  // Delegated clicks: rows are rebuilt on every event, so handlers live on the table bodies.
  $("request-rows").addEventListener("click", (ev) => {
    const row = ev.target.closest("tr[data-index]");
    if (!row) return;
    const view = trace.view, i = Number(row.dataset.index);
    view.selectRequest(i);
    // A clicked request stays selected, even the newest: following on to the next one would show
    // that one's events and diffs under the user's next click. End (or G) follows again.
    view.followRequests = false;
    renderTrace();
  });
  $("event-rows").addEventListener("click", (ev) => {
    const row = ev.target.closest("tr[data-index]");
    if (!row) return;
    trace.view.selectRow(Number(row.dataset.index));
    trace.view.followRequests = false; // the request whose event was clicked stays on screen
    renderTrace();
  });
  for (const pane of document.querySelectorAll("#trace-panes .pane"))
    pane.addEventListener("mousedown", () => {
      trace.view.focus = pane.dataset.pane;
      for (const p of document.querySelectorAll("#trace-panes .pane")) p.classList.toggle("focused", p === pane);
    });
  $("trace-har").addEventListener("click", () => exportSelected("har"));
  $("trace-curl").addEventListener("click", () => exportSelected("curl"));
  $("trace-replay").addEventListener("click", replaySelected);
  $("trace-export-close").addEventListener("click", () => { $("trace-export").hidden = true; });
  $("trace-export-copy").addEventListener("click", () => {
    if (navigator.clipboard) navigator.clipboard.writeText($("trace-export-text").textContent).catch(() => {});
  });
  $("trace-search").addEventListener("input", () => { trace.view.search = $("trace-search").value; renderTrace(); });
  $("trace-search-filter").addEventListener("change", renderTrace);
  $("trace-search-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    trace.view.search = $("trace-search").value;
    trace.view.nextMatch(1);
    renderTrace();
  });
  document.addEventListener("keydown", onTraceKey);
  renderTrace();
}

// -- Rate limits -----------------------------------------------------------------------------------
function seconds(s) {
  if (s >= 3600 && s % 3600 === 0) return `${s / 3600}h`;
  if (s >= 60 && s % 60 === 0) return `${s / 60}m`;
  return `${s}s`;
}

function meterFill(share) {
  const fill = el("span", { class: share < 0.2 ? "fill low" : "fill" });
  fill.style.width = `${(share * 100).toFixed(1)}%`; // CSSOM: allowed by the page's CSP
  return fill;
}

async function renderLimiters() {
  if (!config) await loadConfig();
  const { limiters } = await getJSON("/api/limiters");
  const rows = limiters.flatMap((limiter) => limiter.entries.map((e, i) => {
    const share = e.limit ? Math.max(0, Math.min(1, e.remaining / e.limit)) : 0;
    return el("tr", { "data-limiter": limiter.key, "data-entry": i },
      el("td", {}, el("strong", { text: limiterLabel(limiter.key) }), el("div", { class: "muted small", text: limiter.key })),
      el("td", { text: limiter.scope }),
      el("td", { text: e.type }),
      el("td", { class: "num", text: e.limit }),
      el("td", { class: "remaining" },
        el("span", { class: "num", "data-remaining": e.remaining, text: `${e.remaining}` }),
        e.balance < 0 ? el("span", { class: "muted small", title: "LLM usage charged past the budget, paid back by refills",
          text: ` (${-e.balance} owed)` }) : null,
        el("span", { class: "meter", title: `${e.remaining} of ${e.limit}` }, meterFill(share))),
      el("td", { text: `+${e.tokensPerFill} every ${seconds(e.fillIntervalSeconds)}` }),
      el("td", { class: "num", text: `${e.resetSeconds}s` }));
  }));
  $("limiter-rows").replaceChildren(...(rows.length ? rows
    : [el("tr", {}, el("td", { colSpan: 7, class: "muted", text: "no local rate limits configured" }))]));
}

// -- Upstreams -------------------------------------------------------------------------------------
async function renderUpstreams() {
  const { upstreams } = await getJSON("/api/upstreams");
  const rows = upstreams.map((u) => el("tr", { "data-target": u.target, class: `state-${u.state}` },
    el("td", {}, el("strong", { text: u.backend }), el("div", { class: "muted small", text: u.address })),
    el("td", { class: "state", text: u.outlierDetection ? u.state : `${u.state} (no outlier detection)` }),
    el("td", { class: "num", text: u.ejectedFor == null ? "" : `${u.ejectedFor}s` }),
    el("td", { class: "num", text: u.ejections }),
    el("td", { class: "num", text: u.consecutiveFailures }),
    el("td", { class: "num", text: u.inFlight }),
    el("td", { class: "num", text: u.latencyMs == null ? "" : `${u.latencyMs} ms` }),
    el("td", { text: u.reason || "" })));
  $("upstream-rows").replaceChildren(...(rows.length ? rows
    : [el("tr", {}, el("td", { colSpan: 8, class: "muted", text: "no backends configured" }))]));
}

// -- Traffic ---------------------------------------------------------------------------------------
const STATUS_CLASSES = [["2xx", "s2"], ["3xx", "s3"], ["4xx", "s4"], ["5xx", "s5"]];
const statusClass = (status) => (status >= 500 ? "s5" : status >= 400 ? "s4" : status >= 300 ? "s3" : "s2");
const ms = (s) => (s === null || s === undefined ? "–" : s < 0.001 ? `${(s * 1000).toFixed(2)} ms` : `${(s * 1000).toFixed(1)} ms`);

function barChart(rows, { width = 560, label = 120, unit = "" } = {}) {
  // rows: [{name, segments: [{value, cls, title}]}]; horizontal stacked bars on one scale.
  const lineH = 22, top = 4;
  const max = Math.max(1, ...rows.map((r) => r.segments.reduce((n, s) => n + s.value, 0)));
  const plot = width - label - 110; // room for the value text after the longest bar
  const chart = svg("svg", { viewBox: `0 0 ${width} ${top + rows.length * lineH + 4}`, role: "img", class: "bars" });
  rows.forEach((row, i) => {
    const y = top + i * lineH;
    chart.append(svg("text", { x: label - 6, y: y + 14, "text-anchor": "end", class: "label" }, row.name));
    let x = label;
    let total = 0;
    for (const seg of row.segments) {
      const w = (seg.value / max) * plot;
      chart.append(svg("rect", { x, y: y + 3, width: Math.max(seg.value ? 1 : 0, w), height: lineH - 8, class: seg.cls },
        svg("title", {}, seg.title)));
      x += w;
      total += seg.value;
    }
    chart.append(svg("text", { x: x + 4, y: y + 14, class: "value" }, row.valueText ?? `${total}${unit}`));
  });
  return chart;
}

function legend(items) {
  return el("div", { class: "legend" }, items.map(([text, cls]) => el("span", {}, el("i", { class: cls }), text)));
}

async function renderTraffic() {
  if (!config) await loadConfig();
  const summary = await getJSON("/api/metrics");
  const byRoute = new Map();
  for (const r of summary.requests) {
    const entry = byRoute.get(r.route) || { total: 0, statuses: new Map() };
    entry.total += r.count;
    entry.statuses.set(r.status, (entry.statuses.get(r.status) || 0) + r.count);
    byRoute.set(r.route, entry);
  }
  const latency = new Map(summary.latency.map((l) => [l.route, l]));
  const routes = [...new Set([...byRoute.keys(), ...latency.keys()])].sort((a, b) => routeLabel(a).localeCompare(routeLabel(b)));

  const requestsBox = $("chart-requests");
  if (!routes.length) requestsBox.replaceChildren(el("p", { class: "muted", text: "no requests yet" }));
  else requestsBox.replaceChildren(barChart(routes.map((route) => {
    const entry = byRoute.get(route) || { statuses: new Map() };
    const segments = [...entry.statuses.entries()].sort((a, b) => a[0] - b[0])
      .map(([status, value]) => ({ value, cls: statusClass(status), title: `${routeLabel(route)} ${status}: ${value}` }));
    return { name: routeLabel(route), segments };
  })), legend(STATUS_CLASSES));

  const latencyBox = $("chart-latency");
  const withLatency = routes.filter((r) => latency.has(r) && latency.get(r).count);
  if (!withLatency.length) latencyBox.replaceChildren(el("p", { class: "muted", text: "no requests yet" }));
  else {
    const rows = withLatency.flatMap((route) => ["p50", "p90", "p99"].map((p, i) => {
      const value = latency.get(route).percentiles[p] || 0;
      return { name: i === 0 ? routeLabel(route) : "", segments: [{ value: value * 1000, cls: `q${i}`, title: `${routeLabel(route)} ${p}: ${ms(value)}` }], valueText: `${p} ${ms(value)}` };
    }));
    latencyBox.replaceChildren(barChart(rows), legend([["p50", "q0"], ["p90", "q1"], ["p99", "q2"]]));
  }

  $("traffic-rows").replaceChildren(...(routes.length ? routes.map((route) => {
    const entry = byRoute.get(route) || { total: 0, statuses: new Map() };
    const l = latency.get(route) || { percentiles: {} };
    return el("tr", { "data-route": routeLabel(route) },
      el("td", { text: routeLabel(route) }),
      el("td", { class: "num", "data-count": entry.total, text: entry.total }),
      el("td", { text: [...entry.statuses.entries()].sort((a, b) => a[0] - b[0]).map(([s, n]) => `${s}: ${n}`).join(", ") }),
      el("td", { class: "num", text: ms(l.percentiles.p50) }),
      el("td", { class: "num", text: ms(l.percentiles.p90) }),
      el("td", { class: "num", text: ms(l.percentiles.p99) }),
      el("td", { class: "num", text: ms(l.meanSeconds) }));
  }) : [el("tr", {}, el("td", { colSpan: 7, class: "muted", text: "no requests yet" }))]));
  const errors = summary.upstreamErrors.map((e) => `${routeLabel(e.route)} ${e.kind}: ${e.count}`);
  $("traffic-extra").textContent = `in flight: ${summary.inFlight}` + (errors.length ? ` · upstream errors: ${errors.join(", ")}` : "");
}

// -- pages and polling -----------------------------------------------------------------------------
const PAGES = {
  overview: { render: renderOverview, every: 5000 },
  requests: { render: renderRequests, every: 0, leave: leaveRequests }, // requests_ui.js
  trace: { render: async () => renderTrace(), every: 0 },
  ratelimits: { render: renderLimiters, every: 1000 },
  traffic: { render: renderTraffic, every: 2000 },
  keys: { render: renderKeys, every: 5000 }, // keys_ui.js
  spend: { render: renderSpend, every: 10000 },
  logs: { render: renderLogs, every: 5000 },
  upstreams: { render: renderUpstreams, every: 1000 },
};
let pollTimer = null;
let generation = 0;
let shownPage = null;

function currentPage() {
  const name = location.hash.replace(/^#\/?/, "");
  return name in PAGES ? name : "overview";
}

async function showPage() {
  const name = currentPage();
  const mine = ++generation;
  clearTimeout(pollTimer);
  if (shownPage && shownPage !== name && PAGES[shownPage].leave) PAGES[shownPage].leave();
  shownPage = name;
  for (const section of document.querySelectorAll(".page")) section.hidden = section.id !== `page-${name}`;
  for (const link of document.querySelectorAll("nav a")) {
    if (link.dataset.page === name) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  document.title = `${document.querySelector(`nav a[data-page="${name}"]`).textContent} · trioproxy admin`;
  const tick = async () => {
    if (mine !== generation) return;
    try {
      await PAGES[name].render();
      document.body.dataset.loaded = name;
      showError("");
    } catch (error) {
      showError(`could not load ${name}: ${error.message || error}`);
    }
    if (PAGES[name].every && mine === generation) pollTimer = setTimeout(tick, PAGES[name].every);
  };
  await tick();
}

async function refreshBadge() {
  try { showReload(await getJSON("/api/statuses")); } catch (error) { /* the page shows errors */ }
}

/** Before any data request: does this admin server want a token, and is the stored one right? */
async function ensureToken() {
  for (;;) {
    const response = await fetch("/api/auth", { headers: authHeaders() });
    const state = await response.json();
    if (!state.required || state.accepted) return;
    sessionStorage.removeItem(TOKEN_KEY);
    await askToken();
  }
}

async function main() {
  setupTrace();
  try { await ensureToken(); } catch (error) { showError(`admin server unreachable: ${error.message || error}`); }
  window.addEventListener("hashchange", showPage);
  if (!location.hash) history.replaceState(null, "", "#/overview");
  showPage();
  refreshBadge();
  setInterval(refreshBadge, 5000);
}

main();
