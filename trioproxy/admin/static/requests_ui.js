// The Requests page: the gateway's always-on request history (GET /api/requests, docs/history.md)
// read as one ``?follow=true`` stream — the last N summaries first, then each new one as it finishes —
// in a table with a CEL filter, and charts over time computed here from the entries: request rate,
// errors, latency percentiles and tokens by model. Uses ui.js's helpers (el, svg, api, legend ...).
"use strict";

const history_ = {
  entries: [], // oldest first, at most ``limit``
  controller: null,
  running: false,
  expression: "",
  limit: 500,
  open: new Set(), // keys of the rows whose details are shown
  renderPending: false,
  chartTimer: null,
  generation: 0,
};

const MAX_ROWS = 1000;
const entryKey = (e) => `${e.time}|${e.method}|${e.path}|${e.status}|${e.durationMs}`;

function setRequestsStatus(text, state) {
  const node = $("requests-status");
  node.textContent = text;
  node.dataset.state = state;
}

/** Start (or restart) the stream for the current filter and limit; the backlog replaces the entries. */
async function startHistory() {
  stopHistory();
  const mine = ++history_.generation;
  const controller = new AbortController();
  history_.controller = controller;
  history_.running = true;
  history_.entries = [];
  scheduleHistoryRender();
  const params = new URLSearchParams({ follow: "true", limit: String(history_.limit) });
  if (history_.expression) params.set("expression", history_.expression);
  const box = $("requests-expression-state");
  if (history_.expression) {
    // Compiled by the server's CEL engine first (as the trace page does): a bad one is said, not fetched.
    const check = await getJSON("/api/cel/validate?expression=" + encodeURIComponent(history_.expression));
    if (mine !== history_.generation) return;
    if (!check.valid) {
      history_.running = false;
      $("requests-expression").classList.add("invalid");
      box.textContent = `invalid expression: ${check.error}`;
      box.dataset.valid = "false";
      setRequestsStatus("fix the filter", "error");
      return;
    }
  }
  let response;
  try {
    response = await api(`/api/requests?${params}`, { signal: controller.signal });
  } catch (error) {
    if (error.name === "AbortError") return;
    history_.running = false;
    throw error;
  }
  $("requests-expression").classList.remove("invalid");
  box.textContent = history_.expression ? `filter: ${history_.expression}` : "";
  box.dataset.valid = "true";
  setRequestsStatus("live: new requests appear as they finish", "waiting");
  readHistory(response, controller, mine); // runs until stopped or the server ends the stream
}

async function readHistory(response, controller, mine) {
  try {
    await readSseBlocks(response, (block) => {
      const data = block.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).replace(/^ /, ""));
      if (data.length) addHistoryEntry(JSON.parse(data.join("\n")));
    });
  } catch (error) {
    if (error.name === "AbortError" || mine !== history_.generation) return;
    setRequestsStatus(`stream broken: ${error.message || error}`, "error");
  }
  if (mine !== history_.generation || controller.signal.aborted) return;
  // The gateway ended the stream (a restart, a reload): read again after a pause, backlog included.
  setRequestsStatus("stream ended: reconnecting", "warn");
  setTimeout(() => {
    if (mine === history_.generation && currentPage() === "requests" && $("requests-live").checked)
      startHistory().catch((error) => setRequestsStatus(String(error.message || error), "error"));
  }, 1000);
}

function stopHistory() {
  history_.generation++;
  history_.running = false;
  if (history_.controller) history_.controller.abort();
  history_.controller = null;
}

function addHistoryEntry(entry) {
  history_.entries.push(entry);
  if (history_.entries.length > history_.limit) history_.entries.splice(0, history_.entries.length - history_.limit);
  scheduleHistoryRender();
}

function scheduleHistoryRender() {
  if (history_.renderPending) return;
  history_.renderPending = true;
  requestAnimationFrame(() => { history_.renderPending = false; renderHistory(); });
}

// -- formatting --------------------------------------------------------------------------------------
const two = (n) => String(n).padStart(2, "0");
function clock(t, millis = true) {
  const d = new Date(t * 1000);
  const base = `${two(d.getUTCHours())}:${two(d.getUTCMinutes())}:${two(d.getUTCSeconds())}`;
  return millis ? `${base}.${String(d.getUTCMilliseconds()).padStart(3, "0")}` : base;
}
const fmtMs = (v) => (v === null || v === undefined ? "" : v < 10 ? `${v.toFixed(2)} ms` : v < 1000 ? `${v.toFixed(1)} ms` : `${(v / 1000).toFixed(2)} s`);
const fmtUsd = (v) => (v === null || v === undefined ? "" : v === 0 ? "$0" : v < 0.01 ? `$${v.toPrecision(2)}` : `$${v.toFixed(4)}`);
const tokensOf = (e) => (e.inputTokens ?? 0) + (e.outputTokens ?? 0);
const hasTokens = (e) => e.inputTokens !== null && e.inputTokens !== undefined || e.outputTokens !== null && e.outputTokens !== undefined;

// -- the table ---------------------------------------------------------------------------------------
function historyRow(e) {
  const key = entryKey(e);
  const open = history_.open.has(key);
  const row = el("tr", { class: `status-${statusClass(e.status)}` + (open ? " open" : ""), "data-key": key, "data-status": e.status,
    "data-path": e.path, title: "click for the details" },
  el("td", { class: "num", text: clock(e.time), title: new Date(e.time * 1000).toISOString() }),
  el("td", { text: e.method }),
  el("td", { class: "mono path", text: e.path, title: e.host ? `${e.host}${e.path}` : e.path }),
  el("td", { text: e.route ? routeLabel(e.route) : "", title: e.route || "no route matched" }),
  el("td", { class: "mono", text: e.backend || "" }),
  el("td", { class: `num status ${statusClass(e.status)}-text`, text: e.status }),
  el("td", { class: "num", text: fmtMs(e.durationMs) }),
  el("td", { class: "num", text: hasTokens(e) ? `${e.inputTokens ?? 0} / ${e.outputTokens ?? 0}` : "",
    title: hasTokens(e) ? `input / output tokens${e.model ? " of " + e.model : ""}` : null }),
  el("td", { class: "num", text: fmtUsd(e.cost) }),
  el("td", { text: e.subject || "" }),
  el("td", { class: "reason", text: e.reason || "" }, e.why ? el("span", { class: "chip why", title: "this entry says why: click", text: "why" }) : null));
  if (!open) return [row];
  const detail = el("tr", { class: "detail" }, el("td", { colSpan: 11 },
    e.why ? el("div", { class: "why" }, el("h3", { text: "Why" }), el("pre", { class: "mono why-json", text: JSON.stringify(e.why, null, 2) })) : null,
    el("h3", { text: "Entry" }),
    el("pre", { class: "mono entry-json", text: JSON.stringify(e, null, 2) })));
  return [row, detail];
}

function renderHistory() {
  if (currentPage() !== "requests") return;
  // The table shows the newest MAX_ROWS (a burst redraws it each frame); the charts use every entry.
  const newest = history_.entries.slice(-MAX_ROWS).reverse();
  $("history-rows").replaceChildren(...(newest.length ? newest.flatMap(historyRow)
    : [el("tr", {}, el("td", { colSpan: 11, class: "muted", text: history_.expression ? "no request matches the filter yet" : "no requests yet" }))]));
  const n = history_.entries.length;
  const count = `${n} request${n === 1 ? "" : "s"}` + (n > MAX_ROWS ? ` (the table shows the newest ${MAX_ROWS})` : "");
  if (history_.running) setRequestsStatus(`${count} · live`, "waiting");
  else if ($("requests-status").dataset.state !== "error") setRequestsStatus(`${count} · paused`, "done");
  renderHistoryCharts();
}

// -- charts over time --------------------------------------------------------------------------------
const BUCKETS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 43200, 86400];

/** Time buckets over the entries (up to now), at most ~60: {width, buckets: [{start, entries}]}. */
function bucketize(entries, now = Date.now() / 1000) {
  if (!entries.length) return { width: 1, buckets: [] };
  const first = Math.min(...entries.map((e) => e.time));
  const last = Math.max(now, ...entries.map((e) => e.time));
  const width = BUCKETS.find((w) => (last - first) / w <= 60) || 86400;
  const start = Math.floor(first / width) * width;
  const count = Math.max(1, Math.floor((last - start) / width) + 1);
  const buckets = Array.from({ length: count }, (_, i) => ({ start: start + i * width, entries: [] }));
  for (const e of entries) buckets[Math.min(count - 1, Math.floor((e.time - start) / width))].entries.push(e);
  return { width, buckets };
}

function percentile(sorted, p) {
  if (!sorted.length) return null;
  const rank = (p / 100) * (sorted.length - 1);
  const lo = Math.floor(rank), hi = Math.ceil(rank);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - lo);
}

function niceMax(v) {
  if (!(v > 0)) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  return [1, 2, 2.5, 5, 10].map((m) => m * p).find((m) => m >= v);
}

/** An SVG frame: y gridlines with labels and time labels under it; ``plot(x, y)`` draws inside. */
function timeFrame(buckets, width, max, yText, name) {
  const W = 560, H = 200, left = 56, right = 8, top = 8, bottom = 20;
  const plotW = W - left - right, plotH = H - top - bottom;
  const chart = svg("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", class: "timechart", "aria-label": name, "data-buckets": buckets.length });
  for (const f of [0, 0.5, 1]) {
    const y = top + plotH * (1 - f);
    chart.append(svg("line", { x1: left, x2: W - right, y1: y, y2: y, class: "gridline" }),
      svg("text", { x: left - 6, y: y + 4, "text-anchor": "end", class: "value" }, yText(max * f)));
  }
  const step = plotW / Math.max(1, buckets.length);
  const every = Math.max(1, Math.ceil(buckets.length / 5));
  buckets.forEach((b, i) => {
    if (i % every === 0) chart.append(svg("text", { x: left + i * step + step / 2, y: H - 5, "text-anchor": "middle", class: "label" },
      clock(b.start, false).slice(0, width >= 60 ? 5 : 8)));
  });
  return { chart, x: (i) => left + i * step, step, y: (v) => top + plotH * (1 - Math.min(1, v / max)), base: top + plotH };
}

/** Stacked columns: ``series(bucket)`` → [{value, cls, title}]. */
function columnChart(buckets, width, series, { yText = (v) => String(Math.round(v * 100) / 100), name = "", maxValue = null } = {}) {
  const stacks = buckets.map(series);
  const max = maxValue ?? niceMax(Math.max(0, ...stacks.map((s) => s.reduce((n, p) => n + p.value, 0))));
  const frame = timeFrame(buckets, width, max, yText, name);
  const barW = Math.max(1, frame.step * 0.78);
  stacks.forEach((stack, i) => {
    let y = frame.base;
    for (const part of stack) {
      if (!(part.value > 0)) continue;
      const height = Math.max(0.5, frame.base - frame.y(part.value));
      y -= height;
      frame.chart.append(svg("rect", { x: frame.x(i) + (frame.step - barW) / 2, y, width: barW, height, class: part.cls, "data-value": part.value },
        svg("title", {}, part.title)));
    }
  });
  return frame.chart;
}

/** Lines (one per series) with a dot per bucket that has a value: ``lines`` [{name, cls, value(bucket)}]. */
function lineChart(buckets, width, lines, { yText, name }) {
  const values = lines.map((l) => buckets.map(l.value));
  const max = niceMax(Math.max(0, ...values.flat().filter((v) => v !== null)));
  const frame = timeFrame(buckets, width, max, yText, name);
  lines.forEach((line, li) => {
    const points = [];
    values[li].forEach((v, i) => {
      if (v === null) return;
      const x = frame.x(i) + frame.step / 2, y = frame.y(v);
      points.push(`${x.toFixed(1)},${y.toFixed(1)}`);
      frame.chart.append(svg("circle", { cx: x, cy: y, r: 2.4, class: line.cls, "data-series": line.name, "data-value": v },
        svg("title", {}, `${clock(buckets[i].start, false)} ${line.name}: ${yText(v)}`)));
    });
    if (points.length > 1) frame.chart.insertBefore(svg("polyline", { points: points.join(" "), class: `line ${line.cls}` }), frame.chart.firstChild.nextSibling);
  });
  return frame.chart;
}

function bucketLabel(width) {
  return width < 60 ? `${width}s` : width < 3600 ? `${width / 60}min` : `${width / 3600}h`;
}

function renderHistoryCharts() {
  const { width, buckets } = bucketize(history_.entries);
  $("requests-bucket").textContent = buckets.length ? `(${bucketLabel(width)} buckets)` : "";
  const empty = (id) => $(id).replaceChildren(el("p", { class: "muted", text: "no requests yet" }));
  if (!buckets.length) {
    for (const id of ["chart-history-rate", "chart-history-errors", "chart-history-latency", "chart-history-tokens"]) empty(id);
    return;
  }
  const at = (b) => clock(b.start, false);
  $("chart-history-rate").replaceChildren(columnChart(buckets, width, (b) => STATUS_CLASSES.map(([label, cls]) => {
    const n = b.entries.filter((e) => statusClass(e.status) === cls).length;
    return { value: n / width, cls, title: `${at(b)} ${label}: ${n} requests (${(n / width).toFixed(2)}/s)` };
  }), { name: "requests per second", yText: (v) => (v >= 10 ? v.toFixed(0) : v.toFixed(1)) }), legend(STATUS_CLASSES));

  $("chart-history-errors").replaceChildren(columnChart(buckets, width, (b) => [["4xx", "s4", 400, 500], ["5xx", "s5", 500, 600]].map(([label, cls, lo, hi]) => {
    const n = b.entries.filter((e) => e.status >= lo && e.status < hi).length;
    const share = b.entries.length ? (100 * n) / b.entries.length : 0;
    return { value: share, cls, title: `${at(b)} ${label}: ${n} of ${b.entries.length} (${share.toFixed(1)}%)` };
  }), { name: "errors in percent", yText: (v) => `${Math.round(v)}%`, maxValue: 100 }), legend([["4xx", "s4"], ["5xx", "s5"]]));

  const sortedDurations = buckets.map((b) => b.entries.map((e) => e.durationMs).filter((v) => typeof v === "number").sort((x, y) => x - y));
  const index = new Map(buckets.map((b, i) => [b, i]));
  $("chart-history-latency").replaceChildren(lineChart(buckets, width, [["p50", "q0", 50], ["p90", "q1", 90], ["p99", "q2", 99]].map(([name, cls, p]) => ({
    name, cls, value: (b) => percentile(sortedDurations[index.get(b)], p),
  })), { name: "latency percentiles", yText: fmtMs }), legend([["p50", "q0"], ["p90", "q1"], ["p99", "q2"]]));

  const tokenEntries = history_.entries.filter(hasTokens);
  const totals = new Map();
  for (const e of tokenEntries) totals.set(e.model || "(unknown)", (totals.get(e.model || "(unknown)") || 0) + tokensOf(e));
  if (!tokenEntries.length) {
    $("chart-history-tokens").replaceChildren(el("p", { class: "muted", text: "no LLM requests in these entries" }));
    return;
  }
  const models = [...totals.keys()].sort((a, b) => totals.get(b) - totals.get(a) || a.localeCompare(b));
  const colour = new Map(models.map((m, i) => [m, `m${i % 8}`]));
  $("chart-history-tokens").replaceChildren(columnChart(buckets, width, (b) => models.map((model) => {
    const n = b.entries.filter((e) => hasTokens(e) && (e.model || "(unknown)") === model).reduce((s, e) => s + tokensOf(e), 0);
    return { value: n, cls: colour.get(model), title: `${at(b)} ${model}: ${n} tokens` };
  }), { name: "tokens by model", yText: (v) => (v >= 1000 ? `${(v / 1000).toFixed(1)}k` : String(Math.round(v))) }),
  legend(models.map((m) => [`${m} (${totals.get(m)})`, colour.get(m)])));
}

// -- the page ----------------------------------------------------------------------------------------
let requestsSetUp = false;

function setupRequests() {
  if (requestsSetUp) return;
  requestsSetUp = true;
  const restart = () => startHistory().catch((error) => setRequestsStatus(String(error.message || error), "error"));
  $("requests-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    history_.expression = $("requests-expression").value.trim();
    history_.open.clear();
    if ($("requests-live").checked) restart();
  });
  $("requests-clear-filter").addEventListener("click", () => {
    $("requests-expression").value = "";
    history_.expression = "";
    if ($("requests-live").checked) restart();
  });
  $("requests-limit").addEventListener("change", () => {
    history_.limit = Number($("requests-limit").value);
    if ($("requests-live").checked) restart();
  });
  $("requests-live").addEventListener("change", () => {
    if ($("requests-live").checked) restart();
    else { stopHistory(); renderHistory(); }
  });
  $("requests-har").addEventListener("click", () => exportHistoryHar().catch((error) => setRequestsStatus(`export failed: ${error.message || error}`, "error")));
  $("history-rows").addEventListener("click", (ev) => {
    if (ev.target.closest("tr.detail")) return;
    const row = ev.target.closest("tr[data-key]");
    if (!row) return;
    const key = row.dataset.key;
    if (history_.open.has(key)) history_.open.delete(key);
    else history_.open.add(key);
    renderHistory();
  });
}

/** The entries the page shows (its filter and limit) as HAR 1.2, from the server (GET /api/requests?format=har). */
async function exportHistoryHar() {
  const params = new URLSearchParams({ format: "har", limit: String(history_.limit) });
  if (history_.expression) params.set("expression", history_.expression);
  const response = await api(`/api/requests?${params}`);
  saveFile(await response.text(), `requests-${stamp()}.har`, "application/json");
}

/** Shown: read the stream (once; it stays open while the page is shown) and redraw the charts as time passes. */
async function renderRequests() {
  setupRequests();
  if (!config) await loadConfig();
  if (!history_.running && $("requests-live").checked) await startHistory();
  clearInterval(history_.chartTimer);
  history_.chartTimer = setInterval(() => {
    if (currentPage() === "requests" && history_.running) renderHistoryCharts();
  }, 2000);
  renderHistory();
}

/** Left: close the stream (it would read for a page nobody sees). */
function leaveRequests() {
  clearInterval(history_.chartTimer);
  stopHistory();
}
