// trioproxy admin UI: the Keys, Spend and Logs pages (runtime keys, teams, spend, request log).
// Loaded before ui.js, which owns navigation, polling and the admin token; these functions use its
// helpers (el, svg, barChart, legend, authHeaders, askToken) only when called. Every name, model and
// metadata value is user input: it reaches the page only as text (textContent, SVG text nodes,
// attributes set with setAttribute), never as markup.
"use strict";

const LIMIT_METRICS = ["requests", "tokens", "cost"];
const LIMIT_WINDOWS = ["minute", "hour", "day", "week", "month", "total"];
const MODEL_CLASSES = 8; // m0..m7 in ui.css

const keysPage = { teams: [], keys: [], teamNames: new Map(), formsReady: false };

/** JSON to and from the keys API; errors carry the server's message (``{"error": ...}``). */
async function keysApi(path, method = "GET", body = undefined) {
  const options = { method, headers: {} };
  if (body !== undefined) {
    options.body = JSON.stringify(body);
    options.headers["content-type"] = "application/json";
  }
  for (;;) {
    const response = await fetch(path, { ...options, headers: { ...options.headers, ...authHeaders() } });
    if (response.status === 401) {
      sessionStorage.removeItem(TOKEN_KEY);
      await askToken();
      continue;
    }
    const text = await response.text();
    let data = null;
    try { data = text ? JSON.parse(text) : null; } catch (error) { data = null; }
    if (!response.ok) {
      const message = data && typeof data.error === "string" ? data.error : text.trim() || response.statusText;
      const error = new Error(message);
      error.status = response.status;
      throw error;
    }
    return data;
  }
}

// -- formatting ------------------------------------------------------------------------------------
function fmtNumber(value) {
  if (value === null || value === undefined) return "–";
  if (Math.abs(value) >= 1e6) return `${+(value / 1e6).toFixed(2)}M`;
  if (Math.abs(value) >= 1e4) return `${+(value / 1e3).toFixed(1)}k`;
  return Number.isInteger(value) ? String(value) : String(+value.toFixed(4));
}
function fmtCost(value) {
  if (value === null || value === undefined) return "–";
  return value >= 100 ? `$${value.toFixed(0)}` : value >= 1 ? `$${value.toFixed(2)}` : `$${+value.toFixed(4)}`;
}
function fmtMetric(metric, value) { return metric === "cost" ? fmtCost(value) : fmtNumber(value); }
function fmtTime(iso) {
  if (!iso) return "–";
  return String(iso).replace("T", " ").replace(/(\.\d+)?Z$/, "");
}
const utcDay = (date) => date.toISOString().slice(0, 10);

// -- limits grids and forms ------------------------------------------------------------------------
function buildLimitsGrid(table) {
  table.tBodies[0].replaceChildren(...LIMIT_METRICS.map((metric) => el("tr", {},
    el("th", { text: metric === "cost" ? "cost (USD)" : metric }),
    ...LIMIT_WINDOWS.map((window) => el("td", {}, el("input", {
      type: "number", min: "0", step: metric === "cost" ? "0.01" : "1", inputMode: "decimal",
      "aria-label": `${metric} per ${window}`, "data-metric": metric, "data-window": window,
    }))))));
}

/** The limits a grid holds, in the wire shape; a bad cell throws, naming ``limits.METRIC.WINDOW``. */
function readLimits(table) {
  const limits = {};
  for (const input of table.querySelectorAll("input[data-metric]")) {
    const text = input.value.trim();
    if (!text) continue;
    const value = Number(text);
    const field = `limits.${input.dataset.metric}.${input.dataset.window}`;
    if (!Number.isFinite(value) || value < 0) throw new Error(`${field}: expected a number of 0 or more`);
    if (input.dataset.metric !== "cost" && !Number.isInteger(value)) throw new Error(`${field}: expected a whole number`);
    (limits[input.dataset.metric] ||= {})[input.dataset.window] = value;
  }
  return limits;
}

function parseMetadata(text) {
  const metadata = {};
  for (const part of text.split(",").map((p) => p.trim()).filter(Boolean)) {
    const at = part.indexOf("=");
    if (at <= 0) throw new Error(`metadata: expected key=value, got "${part}"`);
    metadata[part.slice(0, at).trim()] = part.slice(at + 1).trim();
  }
  return metadata;
}

function fillTeamSelects() {
  const teams = keysPage.teams;
  for (const [id, first] of [["key-team", "none"], ["keys-team-filter", "all"], ["logs-team", "any"]]) {
    const select = $(id);
    if (!select) continue;
    const chosen = select.value;
    select.replaceChildren(el("option", { value: "", text: first }),
      ...teams.map((t) => el("option", { value: t.id, text: t.name })));
    if ([...select.options].some((o) => o.value === chosen)) select.value = chosen;
  }
}

function setupKeysForms() {
  if (keysPage.formsReady) return;
  keysPage.formsReady = true;
  for (const table of document.querySelectorAll("table.limits-grid")) buildLimitsGrid(table);
  const toggle = (form, show) => {
    form.hidden = !show;
    if (show) form.querySelector("input").focus();
  };
  $("key-new").addEventListener("click", () => { toggle($("team-form"), false); toggle($("key-form"), $("key-form").hidden); });
  $("team-new").addEventListener("click", () => { toggle($("key-form"), false); toggle($("team-form"), $("team-form").hidden); });
  for (const form of [$("key-form"), $("team-form")])
    form.querySelector("[data-cancel]").addEventListener("click", () => { form.reset(); form.hidden = true; });
  $("keys-team-filter").addEventListener("change", () => renderKeys().catch(showKeysError));
  $("keys-show-revoked").addEventListener("change", () => renderKeys().catch(showKeysError));

  $("key-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    createKey().catch((error) => { $("key-form-error").textContent = error.message || String(error); });
  });
  $("team-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    createTeam().catch((error) => { $("team-form-error").textContent = error.message || String(error); });
  });
  $("key-secret-copy").addEventListener("click", copySecret);
  $("key-secret-done").addEventListener("click", hideSecret);
  // Delegated: the rows are rebuilt on each refresh.
  $("key-rows").addEventListener("click", (ev) => {
    const button = ev.target.closest("button[data-action]");
    if (!button) return;
    const key = keysPage.keys.find((k) => k.id === button.closest("tr").dataset.key);
    if (!key) return;
    const action = button.dataset.action === "rotate" ? rotateKey(key) : revokeKey(key);
    action.catch(showKeysError);
  });
  $("team-rows").addEventListener("click", (ev) => {
    const button = ev.target.closest("button[data-action='delete']");
    if (!button) return;
    const team = keysPage.teams.find((t) => t.id === button.closest("tr").dataset.team);
    if (team) deleteTeam(team).catch(showKeysError);
  });
}

function showKeysError(error) { showError(error.message || String(error)); }

async function createKey() {
  $("key-form-error").textContent = "";
  const body = {
    name: $("key-name").value.trim(),
    models: $("key-models").value.split(",").map((m) => m.trim()).filter(Boolean),
    limits: readLimits(document.querySelector("table[data-limits='key']")),
    metadata: parseMetadata($("key-metadata").value),
  };
  if (!body.name) throw new Error("name: a key needs a name");
  if ($("key-team").value) body.team = $("key-team").value;
  if ($("key-expires").value) body.expiresAt = `${$("key-expires").value}T00:00:00Z`;
  const created = await keysApi("/api/keys", "POST", body);
  $("key-form").reset();
  $("key-form").hidden = true;
  showSecret(created);
  await renderKeys();
}

async function createTeam() {
  $("team-form-error").textContent = "";
  const body = {
    name: $("team-name").value.trim(),
    limits: readLimits(document.querySelector("table[data-limits='team']")),
    metadata: parseMetadata($("team-metadata").value),
  };
  if (!body.name) throw new Error("name: a team needs a name");
  await keysApi("/api/teams", "POST", body);
  $("team-form").reset();
  $("team-form").hidden = true;
  await renderKeys();
}

/** The secret of a created or rotated key: on screen until Done, never stored, never fetched again. */
function showSecret(record) {
  $("key-secret-name").textContent = `${record.name} (${record.id})`;
  $("key-secret-value").value = record.key;
  $("key-secret-state").textContent = "";
  $("key-secret").hidden = false;
  $("key-secret-value").select();
}
function hideSecret() {
  $("key-secret-value").value = "";
  $("key-secret-name").textContent = "";
  $("key-secret").hidden = true;
}
function copySecret() {
  const input = $("key-secret-value");
  const done = (ok) => { $("key-secret-state").textContent = ok ? "copied to the clipboard" : "select the key and copy it (the browser refused the clipboard)"; };
  if (navigator.clipboard) navigator.clipboard.writeText(input.value).then(() => done(true), () => {
    input.select();
    done(document.execCommand && document.execCommand("copy"));
  });
  else { input.select(); done(document.execCommand && document.execCommand("copy")); }
}

/** A small modal: resolves to null (cancelled) or {grace} (confirmed). */
function confirmDialog({ title, text, action, grace = false }) {
  return new Promise((resolve) => {
    const dialog = $("confirm-dialog");
    $("confirm-title").textContent = title;
    $("confirm-text").textContent = text;
    $("confirm-ok").textContent = action;
    $("confirm-grace-label").hidden = !grace;
    $("confirm-grace").value = "1h";
    $("confirm-form").onsubmit = (ev) => {
      ev.preventDefault();
      const ok = ev.submitter && ev.submitter.value === "ok";
      dialog.close();
      resolve(ok ? { grace: $("confirm-grace").value.trim() || "0s" } : null);
    };
    dialog.oncancel = () => resolve(null);
    dialog.showModal();
  });
}

async function rotateKey(key) {
  const answer = await confirmDialog({ title: `Rotate ${key.name}`, action: "Rotate", grace: true,
    text: "The key gets a new secret, shown once. The old secret keeps working for the grace period (0s: stops at once)." });
  if (!answer) return;
  const rotated = await keysApi(`/api/keys/${encodeURIComponent(key.id)}/rotate`, "POST", { gracePeriod: answer.grace });
  showSecret(rotated);
  await renderKeys();
}

async function revokeKey(key) {
  const answer = await confirmDialog({ title: `Revoke ${key.name}`, action: "Revoke",
    text: "Every gateway on this store refuses the key from now on. This cannot be undone." });
  if (!answer) return;
  await keysApi(`/api/keys/${encodeURIComponent(key.id)}`, "DELETE");
  await renderKeys();
}

async function deleteTeam(team) {
  const answer = await confirmDialog({ title: `Delete team ${team.name}`, action: "Delete",
    text: "Only a team without active keys can be deleted: move or revoke its keys first." });
  if (!answer) return;
  await keysApi(`/api/teams/${encodeURIComponent(team.id)}`, "DELETE");
  await renderKeys();
}

// -- Keys page -------------------------------------------------------------------------------------
/** One line per limited window: ``tokens/day 1234 / 100000`` and a bar of the share used. */
function usageList(limits, usage) {
  const items = [];
  for (const metric of LIMIT_METRICS)
    for (const window of LIMIT_WINDOWS) {
      const limit = ((limits || {})[metric] || {})[window];
      if (limit === undefined || limit === null) continue;
      const entry = ((usage || {})[metric] || {})[window] || {};
      const used = entry.used || 0;
      const reserved = entry.reserved || 0;
      const share = limit > 0 ? Math.max(0, Math.min(1, (used + reserved) / limit)) : 1;
      const fill = el("span", { class: share >= 0.9 ? "fill high" : share >= 0.7 ? "fill mid" : "fill" });
      fill.style.width = `${(share * 100).toFixed(1)}%`;
      const title = `${metric} per ${window}: ${fmtMetric(metric, used)} used` + (reserved ? `, ${fmtMetric(metric, reserved)} reserved` : "")
        + ` of ${fmtMetric(metric, limit)}` + (entry.resetsAt ? `; resets ${fmtTime(entry.resetsAt)} UTC` : "");
      items.push(el("li", { "data-usage": `${metric}/${window}`, "data-used": used, title },
        el("span", { class: "usage-name", text: `${metric}/${window}` }),
        el("span", { class: "num", text: ` ${fmtMetric(metric, used)} / ${fmtMetric(metric, limit)}` }),
        el("span", { class: "meter usage" }, fill)));
    }
  return items.length ? el("ul", { class: "plain usage-list" }, items) : el("span", { class: "muted", text: "no limits" });
}

function statusChip(key) {
  const chip = el("span", { class: `chip status-${key.status}`, "data-status": key.status, text: key.status });
  const now = Date.now();
  if (key.previousValidUntil && Date.parse(key.previousValidUntil) > now)
    return el("span", {}, chip, el("div", { class: "muted small", text: `rotated; old secret valid until ${fmtTime(key.previousValidUntil)}` }));
  return chip;
}

async function renderKeys() {
  setupKeysForms();
  const [keysAnswer, teamsAnswer] = await Promise.all([keysApi("/api/keys"), keysApi("/api/teams")]);
  keysPage.teams = teamsAnswer.teams || [];
  keysPage.teamNames = new Map(keysPage.teams.map((t) => [t.id, t.name]));
  keysPage.keys = keysAnswer.keys || [];
  fillTeamSelects();
  const team = $("keys-team-filter").value;
  const showAll = $("keys-show-revoked").checked;
  const shown = keysPage.keys.filter((k) => (!team || k.team === team) && (showAll || k.status === "active"));
  $("key-rows").replaceChildren(...(shown.length ? shown.map((key) => el("tr", { "data-key": key.id, "data-name": key.name },
    el("td", {}, el("strong", { class: "key-name", text: key.name }),
      el("div", { class: "muted small mono", text: `${key.id} · ${key.prefix}…` }),
      Object.keys(key.metadata || {}).length ? el("div", { class: "small" }, Object.entries(key.metadata).map(([k, v]) =>
        el("span", { class: "chip meta", title: `${k}=${v}`, text: `${k}=${v}` }))) : null),
    el("td", {}, statusChip(key)),
    el("td", { text: key.team ? keysPage.teamNames.get(key.team) || key.team : "–" }),
    el("td", {}, (key.models || []).length ? (key.models || []).map((m) => el("span", { class: "chip", text: m }))
      : el("span", { class: "muted", text: "every model" })),
    el("td", {}, usageList(key.limits, key.usage)),
    el("td", { class: "num", text: key.expiresAt ? fmtTime(key.expiresAt) : "never" }),
    el("td", { class: "actions" },
      el("button", { type: "button", "data-action": "rotate", disabled: key.status !== "active", text: "Rotate" }),
      el("button", { type: "button", "data-action": "revoke", class: "danger", disabled: key.status === "revoked", text: "Revoke" })),
  )) : [el("tr", {}, el("td", { colSpan: 7, class: "muted", text: keysPage.keys.length ? "no key matches" : "no keys yet: New key creates one" }))]));

  const counts = new Map();
  for (const key of keysPage.keys) if (key.team && key.status === "active") counts.set(key.team, (counts.get(key.team) || 0) + 1);
  $("team-rows").replaceChildren(...(keysPage.teams.length ? keysPage.teams.map((t) => el("tr", { "data-team": t.id, "data-name": t.name },
    el("td", {}, el("strong", { text: t.name }), el("div", { class: "muted small mono", text: t.id })),
    el("td", { class: "num", text: counts.get(t.id) || 0 }),
    el("td", {}, usageList(t.limits, t.usage)),
    el("td", {}, Object.entries(t.metadata || {}).map(([k, v]) => el("span", { class: "chip meta", text: `${k}=${v}` }))),
    el("td", { class: "actions" }, el("button", { type: "button", "data-action": "delete", class: "danger", text: "Delete" })),
  )) : [el("tr", {}, el("td", { colSpan: 5, class: "muted", text: "no teams" }))]));
}

// -- Spend page ------------------------------------------------------------------------------------
let spendReady = false;

function spendQuery(extra) {
  const params = new URLSearchParams(extra);
  if ($("spend-from").value) params.set("from", $("spend-from").value);
  if ($("spend-to").value) params.set("to", `${$("spend-to").value}T23:59:59Z`);
  return params.toString();
}

function setupSpend() {
  if (spendReady) return;
  spendReady = true;
  const today = new Date();
  $("spend-to").value = utcDay(today);
  $("spend-from").value = utcDay(new Date(today.getTime() - 29 * 86400e3));
  for (const id of ["spend-from", "spend-to", "spend-group"])
    $(id).addEventListener("change", () => renderSpend().catch(showKeysError));
  $("spend-form").addEventListener("submit", (ev) => ev.preventDefault());
  $("spend-csv").addEventListener("click", (ev) => {
    // A link would not carry the admin token off loopback: fetch with it, save the answer.
    ev.preventDefault();
    downloadCsv().catch(showKeysError);
  });
}

async function downloadCsv() {
  const link = $("spend-csv");
  const response = await api(link.getAttribute("href"));
  const blob = await response.blob();
  const save = el("a", { href: URL.createObjectURL(blob), download: link.getAttribute("download") });
  document.body.append(save);
  save.click();
  save.remove();
  setTimeout(() => URL.revokeObjectURL(save.href), 1000);
}

/** Models in a stable order (most spend first) with their colour class. */
function modelColours(rows) {
  const totals = new Map();
  for (const row of rows) totals.set(row.model, (totals.get(row.model) || 0) + (row.cost || 0));
  const models = [...totals.keys()].sort((a, b) => totals.get(b) - totals.get(a) || String(a).localeCompare(String(b)));
  return new Map(models.map((m, i) => [m, `m${i % MODEL_CLASSES}`]));
}

function daysBetween(from, to) {
  const days = [];
  for (let t = Date.parse(`${from}T00:00:00Z`); t <= Date.parse(`${to}T00:00:00Z`) && days.length < 732; t += 86400e3)
    days.push(utcDay(new Date(t)));
  return days;
}

/** Vertical bars, one per day, stacked by model; the y axis in USD. */
function dayChart(days, rows, colours, { width = 720, height = 240 } = {}) {
  const left = 56, bottom = 22, top = 8, right = 8;
  const byDay = new Map(days.map((d) => [d, []]));
  for (const row of rows) if (byDay.has(row.day)) byDay.get(row.day).push(row);
  const totals = days.map((d) => byDay.get(d).reduce((n, r) => n + (r.cost || 0), 0));
  const max = Math.max(...totals, 0) || 1;
  const plotW = width - left - right, plotH = height - top - bottom;
  const step = plotW / Math.max(1, days.length);
  const barW = Math.max(1, step * 0.75);
  const chart = svg("svg", { viewBox: `0 0 ${width} ${height}`, role: "img", class: "columns", "aria-label": "spend by day and model" });
  for (const f of [0, 0.5, 1]) {
    const y = top + plotH * (1 - f);
    chart.append(svg("line", { x1: left, x2: width - right, y1: y, y2: y, class: "gridline" }),
      svg("text", { x: left - 6, y: y + 4, "text-anchor": "end", class: "value" }, fmtCost(max * f)));
  }
  const labelEvery = Math.ceil(days.length / 10);
  days.forEach((day, i) => {
    const x = left + i * step + (step - barW) / 2;
    let y = top + plotH;
    const sorted = byDay.get(day).slice().sort((a, b) => String(a.model).localeCompare(String(b.model)));
    for (const row of sorted) {
      const h = ((row.cost || 0) / max) * plotH;
      if (h <= 0) continue;
      y -= h;
      chart.append(svg("rect", { x, y, width: barW, height: Math.max(h, 0.5), class: colours.get(row.model) || "m0",
        "data-day": day, "data-model": row.model, "data-cost": row.cost },
      svg("title", {}, `${day} ${row.model}: ${fmtCost(row.cost)} (${fmtNumber(row.totalTokens)} tokens, ${row.requests} requests)`)));
    }
    if (i % labelEvery === 0)
      chart.append(svg("text", { x: x + barW / 2, y: height - 6, "text-anchor": "middle", class: "label" }, day.slice(5)));
  });
  return chart;
}

async function renderSpend() {
  setupSpend();
  const group = $("spend-group").value;
  $("spend-csv").setAttribute("href", `/api/spend?${spendQuery({ group_by: group, format: "csv" })}`);
  $("spend-csv").setAttribute("download", `spend-by-${group}.csv`);
  $("spend-group-head").textContent = group;
  const [byDayModel, byModel, grouped] = await Promise.all([
    keysApi(`/api/spend?${spendQuery({ group_by: "day,model" })}`),
    keysApi(`/api/spend?${spendQuery({ group_by: "model" })}`),
    keysApi(`/api/spend?${spendQuery({ group_by: group })}`),
  ]);
  const colours = modelColours(byModel.rows);
  const total = byModel.rows.reduce((n, r) => n + (r.cost || 0), 0);
  const requests = byModel.rows.reduce((n, r) => n + (r.requests || 0), 0);
  $("spend-total").textContent = `In this period: ${fmtCost(total)} over ${requests} requests.`;

  const days = daysBetween($("spend-from").value || (byDayModel.rows[0] || {}).day || utcDay(new Date()),
    $("spend-to").value || utcDay(new Date()));
  const dayBox = $("chart-spend-days");
  if (!byDayModel.rows.length) dayBox.replaceChildren(el("p", { class: "muted", text: "no spend in this period" }));
  else dayBox.replaceChildren(dayChart(days, byDayModel.rows, colours),
    legend([...colours.entries()].map(([model, cls]) => [model, cls])));

  const modelBox = $("chart-spend-models");
  if (!byModel.rows.length) modelBox.replaceChildren(el("p", { class: "muted", text: "no spend in this period" }));
  else modelBox.replaceChildren(barChart(byModel.rows.slice().sort((a, b) => (b.cost || 0) - (a.cost || 0)).map((r) => ({
    name: r.group, valueText: fmtCost(r.cost || 0),
    segments: [{ value: r.cost || 0, cls: colours.get(r.group) || "m0", title: `${r.group}: ${fmtCost(r.cost)} (${r.requests} requests)` }],
  })), { label: 160 }));

  const label = (row) => (group === "key" ? row.name || row.group : group === "team" ? row.name || keysPage.teamNames.get(row.group) || row.group : row.group);
  $("spend-rows").replaceChildren(...(grouped.rows.length ? grouped.rows.map((r) => el("tr", { "data-group": r.group ?? "" },
    el("td", {}, el("span", { text: label(r) ?? "(none)" }), group === "key" || group === "team" ? el("div", { class: "muted small mono", text: r.group ?? "" }) : null),
    el("td", { class: "num", text: r.requests }),
    el("td", { class: "num", text: r.inputTokens }),
    el("td", { class: "num", text: r.outputTokens }),
    el("td", { class: "num", text: r.totalTokens }),
    el("td", { class: "num", "data-cost": r.cost, text: fmtCost(r.cost || 0) }),
  )) : [el("tr", {}, el("td", { colSpan: 6, class: "muted", text: "no spend in this period" }))]));
}

// -- Logs page -------------------------------------------------------------------------------------
let logsReady = false;

function setupLogs() {
  if (logsReady) return;
  logsReady = true;
  for (const id of ["logs-key", "logs-team", "logs-limit", "logs-since"])
    $(id).addEventListener("change", () => renderLogs().catch(showKeysError));
  for (const id of ["logs-model", "logs-status"]) {
    let timer = null;
    $(id).addEventListener("input", () => { clearTimeout(timer); timer = setTimeout(() => renderLogs().catch(showKeysError), 300); });
  }
  $("logs-form").addEventListener("submit", (ev) => { ev.preventDefault(); renderLogs().catch(showKeysError); });
}

async function renderLogs() {
  setupLogs();
  const params = new URLSearchParams({ limit: $("logs-limit").value });
  for (const [name, id] of [["key", "logs-key"], ["team", "logs-team"], ["model", "logs-model"], ["status", "logs-status"]])
    if ($(id).value.trim()) params.set(name, $(id).value.trim());
  if ($("logs-since").value) params.set("since", `${$("logs-since").value}:00Z`);
  const [answer, keysAnswer, teamsAnswer] = await Promise.all([
    keysApi(`/api/logs?${params}`), keysApi("/api/keys"), keysApi("/api/teams")]);
  keysPage.teams = teamsAnswer.teams || [];
  keysPage.teamNames = new Map(keysPage.teams.map((t) => [t.id, t.name]));
  fillTeamSelects();
  const keyNames = new Map((keysAnswer.keys || []).map((k) => [k.id, k.name]));
  const select = $("logs-key");
  const chosen = select.value;
  select.replaceChildren(el("option", { value: "", text: "any" }),
    ...(keysAnswer.keys || []).map((k) => el("option", { value: k.id, text: k.name })));
  if ([...select.options].some((o) => o.value === chosen)) select.value = chosen;
  const entries = answer.entries || [];
  $("log-rows").replaceChildren(...(entries.length ? entries.map((e) => el("tr", { "data-status": e.status, "data-key": e.key ?? "" },
    el("td", { class: "num", text: fmtTime(e.time) }),
    el("td", { text: keyNames.get(e.key) || e.keyName || e.key || "–" }),
    el("td", { text: e.team ? keysPage.teamNames.get(e.team) || e.team : "–" }),
    el("td", { class: "mono", text: e.model || "–" }),
    el("td", { class: `num ${e.status >= 500 ? "bad" : e.status >= 400 ? "warn" : ""}`, text: e.status }),
    el("td", { class: "num", text: e.inputTokens ?? "–" }),
    el("td", { class: "num", text: e.outputTokens ?? "–" }),
    el("td", { class: "num", text: e.cost === null || e.cost === undefined ? "–" : fmtCost(e.cost) }),
    el("td", { class: "num", text: e.latencyMs === null || e.latencyMs === undefined ? "–" : `${Math.round(e.latencyMs)} ms` }),
  )) : [el("tr", {}, el("td", { colSpan: 9, class: "muted", text: "no requests logged (is config.keys.requestLog.enabled on?)" }))]));
}
