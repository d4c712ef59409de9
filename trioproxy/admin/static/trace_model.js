// Trace viewer state for the web UI: the same rows, snapshots and snapshot diffs as the text UI
// (tui/state.py), so a trace reads the same in the terminal and in the browser. No DOM here.
"use strict";

(function (global) {
  const KIND_BY_TYPE = {
    requestStarted: "Request Start",
    requestSnapshot: "Snapshot",
    responseSnapshot: "Snapshot",
    routeSelection: "Route",
    policySelection: "Policies",
    policy: "Policy",
    backendCallStart: "Backend Start",
    backendCallResult: "Backend Result",
    bodySnapshot: "Body Snapshot",
    mcp: "MCP Call",
    requestFinished: "Request Done",
  };
  const SNAPSHOT_TYPES = ["requestSnapshot", "responseSnapshot", "bodySnapshot"];
  const MODES = ["event", "snapshot", "diff", "bodies"];
  const MODE_TITLES = { event: "Raw Event", snapshot: "Snapshot", diff: "Snapshot Diff", bodies: "Bodies" };
  const FORMATS = ["yaml", "json"];
  const PANES = ["requests", "events", "details"];
  const MAX_REQUESTS = 500; // follow mode keeps the newest; a tab left open must not grow forever

  function message(event) {
    const msg = event && event.message;
    return msg && typeof msg === "object" && !Array.isArray(msg) ? msg : {};
  }

  function decodeBody(body) {
    if (typeof body !== "string") return new Uint8Array(0);
    try {
      const bin = atob(body);
      const out = new Uint8Array(bin.length);
      for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
      return out;
    } catch (e) {
      return new TextEncoder().encode(body);
    }
  }

  function bodyText(raw) {
    try {
      return new TextDecoder("utf-8", { fatal: true }).decode(raw);
    } catch (e) {
      const hex = Array.from(raw.slice(0, 64), (b) => b.toString(16).padStart(2, "0")).join("");
      return `<${raw.length} bytes binary> ${hex}`;
    }
  }

  /** [kind, summary] of one event, worded like the text UI. */
  function summarize(event) {
    const msg = message(event);
    const typ = String(msg.type ?? "?");
    const kind = KIND_BY_TYPE[typ] || typ;
    let summary = "";
    if (typ === "requestStarted") summary = "request started";
    else if (SNAPSHOT_TYPES.includes(typ)) {
      summary = String(msg.stage ?? "");
      if (typ === "bodySnapshot") summary += ` (${decodeBody(msg.body).length} bytes)`;
    } else if (typ === "routeSelection") {
      const evaluated = (msg.evaluatedRoutes || []).length;
      const head = msg.selectedRoute ? `selected "${msg.selectedRoute}"` : "no route matched";
      summary = `${head} (${evaluated} evaluated)`;
    } else if (typ === "policySelection") {
      const effective = msg.effectivePolicy || {};
      const active = Object.keys(effective).filter((k) => effective[k] !== null && effective[k] !== undefined);
      summary = String(msg.phase || "effective policy");
      if (active.length) summary += ` (${active.join(", ")})`;
    } else if (typ === "policy") summary = `${msg.kind ?? "?"}: ${msg.result ?? "?"}`;
    else if (typ === "backendCallStart") summary = `target=${msg.target}`;
    else if (typ === "backendCallResult") summary = msg.error ? `error=${msg.error}` : `status=${msg.status}`;
    else if (typ === "mcp") {
      summary = String(msg.method ?? "?");
      if (msg.tool) summary += ` ${msg.tool}` + (msg.target ? `@${msg.target}` : "");
      summary += `: ${msg.result ?? "?"}`;
      if (msg.error) summary += ` error=${msg.error}`;
    } else if (typ === "requestFinished") {
      summary = `request finished status=${msg.status}`;
      if (msg.error) summary += ` error=${msg.error}`;
    }
    return [kind, summary];
  }

  // -- rendering: YAML as PyYAML's safe_dump(sort_keys=False, width=120), or indented JSON --------
  // YAML 1.1 implicit types (PyYAML's resolver): a plain scalar matching one must be quoted.
  const IMPLICIT = [
    /^(?:yes|Yes|YES|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF)$/,
    /^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?|\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?|[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$/,
    /^(?:[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+|[-+]?[1-9][0-9_]*(?::[0-5]?[0-9])+)$/,
    /^(?:<<)$/,
    /^(?:~|null|Null|NULL|)$/,
    /^(?:[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]|[0-9][0-9][0-9][0-9]-[0-9][0-9]?-[0-9][0-9]?(?:[Tt]|[ \t]+)[0-9][0-9]?:[0-9][0-9]:[0-9][0-9](?:\.[0-9]*)?(?:[ \t]*(?:Z|[-+][0-9][0-9]?(?::[0-9][0-9])?))?)$/,
    /^(?:=)$/,
  ];
  const SPECIAL = /[^\x09\x0A\x0D\x20-\x7E\x85\xA0-\uD7FF\uE000-\uFFFD\u{10000}-\u{10FFFF}]|[\x85\u2028\u2029\uFEFF]/u;
  const ESCAPES = { "\0": "0", "\x07": "a", "\b": "b", "\t": "t", "\n": "n", "\x0B": "v", "\f": "f", "\r": "r",
    "\x1B": "e", '"': '"', "\\": "\\", "\x85": "N", "\xA0": "_", "\u2028": "L", "\u2029": "P" };

  /** PyYAML's analyze_scalar for block context: can ``s`` be written plain? */
  function plainAllowed(s) {
    if (!s || s.startsWith("---") || s.startsWith("...")) return false;
    if (s[0] === " " || s[s.length - 1] === " " || /[\n\t\r]/.test(s)) return false;
    for (let i = 0; i < s.length; i++) {
      const ch = s[i];
      const nextSpace = i + 1 >= s.length || s[i + 1] === " ";
      if (i === 0) {
        if ("#,[]{}&*!|>'\"%@`".includes(ch)) return false;
        if ((ch === "?" || ch === ":" || ch === "-") && nextSpace) return false;
      } else {
        if (ch === ":" && nextSpace) return false;
        if (ch === "#" && s[i - 1] === " ") return false;
      }
    }
    return !IMPLICIT.some((re) => re.test(s));
  }

  function doubleQuoted(s) {
    let out = '"';
    for (const ch of s) {
      if (ch in ESCAPES) out += "\\" + ESCAPES[ch];
      else if (SPECIAL.test(ch) || ch === "\t") {
        const code = ch.codePointAt(0);
        out += code <= 0xff ? "\\x" + code.toString(16).toUpperCase().padStart(2, "0")
          : code <= 0xffff ? "\\u" + code.toString(16).toUpperCase().padStart(4, "0")
            : "\\U" + code.toString(16).toUpperCase().padStart(8, "0");
      } else out += ch;
    }
    return out + '"';
  }

  const WIDTH = 120; // PyYAML's best_width, as the text UI renders (yaml.dump(width=120))

  /** How PyYAML writes a string: plain, single-quoted, or double-quoted (special characters). */
  function scalarStyle(s) {
    if (SPECIAL.test(s)) return "double";
    return plainAllowed(s) ? "plain" : "single";
  }

  function yamlScalar(value) {
    return foldScalar(value, 0, 0, false);
  }

  /**
   * A scalar written from ``column``, folded like PyYAML's emitter: a single space found past
   * the width becomes a line break indented to ``indent`` (write_plain / write_single_quoted).
   */
  function foldScalar(value, column, indent, fold = true) {
    if (value === null || value === undefined) return "null";
    if (typeof value === "boolean") return value ? "true" : "false";
    if (typeof value === "number") return String(value);
    const text = String(value);
    const style = scalarStyle(text);
    if (style === "double") return doubleQuoted(text);
    const quoted = style === "single";
    let out = quoted ? "'" : "";
    column += quoted ? 1 : 0;
    let spaces = false, start = 0;
    for (let end = 0; end <= text.length; end++) {
      const ch = end < text.length ? text[end] : null;
      if (spaces) {
        if (ch !== " ") {
          const edge = quoted && (start === 0 || end === text.length);
          if (fold && start + 1 === end && column > WIDTH && !edge) {
            out += "\n" + " ".repeat(indent);
            column = indent;
          } else {
            out += text.slice(start, end);
            column += end - start;
          }
          start = end;
        }
      } else if (ch === null || ch === " " || (quoted && ch === "'")) {
        if (start < end) { out += text.slice(start, end); column += end - start; start = end; }
      }
      if (quoted && ch === "'") { out += "''"; column += 2; start = end + 1; }
      if (ch !== null) spaces = ch === " ";
    }
    return out + (quoted ? "'" : "");
  }

  function yamlLines(value, indent, out) {
    const pad = " ".repeat(indent);
    if (Array.isArray(value)) {
      if (!value.length) { out.push(pad + "[]"); return; }
      for (const item of value) {
        if (item && typeof item === "object" && Object.keys(item).length) {
          const sub = [];
          yamlLines(item, indent + 2, sub);
          out.push(pad + "- " + sub[0].slice(indent + 2));
          out.push(...sub.slice(1));
        } else inlineScalar(item, indent + 2, out, pad + "- ");
      }
      return;
    }
    if (value && typeof value === "object") {
      const keys = Object.keys(value);
      if (!keys.length) { out.push(pad + "{}"); return; }
      for (const key of keys) {
        const item = value[key];
        const k = yamlScalar(key);
        if (Array.isArray(item) && item.length) {
          out.push(`${pad}${k}:`);
          yamlLines(item, indent, out); // PyYAML: block sequences are not indented under their key
        } else if (item && typeof item === "object" && !Array.isArray(item) && Object.keys(item).length) {
          out.push(`${pad}${k}:`);
          yamlLines(item, indent + 2, out);
        } else inlineScalar(item, indent + 2, out, `${pad}${k}: `);
      }
      return;
    }
    out.push(...(pad + foldScalar(value, indent, indent)).split("\n"));
  }

  // A scalar after ``line`` (its key or "- "); multi-line strings become "|" blocks like the text UI's.
  function inlineScalar(item, indent, out, line) {
    if (Array.isArray(item)) { out.push(line + "[]"); return; }
    if (item && typeof item === "object") { out.push(line + "{}"); return; }
    if (typeof item === "string" && item.includes("\n")) {
      const chomp = item.endsWith("\n") ? "" : "-";
      const body = item.endsWith("\n") ? item.slice(0, -1) : item;
      const pad = " ".repeat(indent);
      out.push(line + "|" + chomp);
      for (const part of body.split("\n")) out.push(part ? pad + part : "");
      return;
    }
    out.push(...(line + foldScalar(item, line.length, indent)).split("\n"));
  }

  function render(doc, fmt) {
    if (doc === null || doc === undefined) return [];
    if (fmt === "json") return JSON.stringify(doc, null, 2).split("\n");
    const out = [];
    yamlLines(doc, 0, out);
    return out;
  }

  // -- unified diff of lines (difflib.unified_diff's shape, n lines of context) ------------------
  function lcsOps(a, b) {
    // Trim the common ends, then an LCS table on the middle; a huge middle is shown replaced.
    let start = 0;
    while (start < a.length && start < b.length && a[start] === b[start]) start++;
    let endA = a.length, endB = b.length;
    while (endA > start && endB > start && a[endA - 1] === b[endB - 1]) { endA--; endB--; }
    const ops = [];
    for (let i = 0; i < start; i++) ops.push([" ", a[i]]);
    const ma = a.slice(start, endA), mb = b.slice(start, endB);
    if (ma.length * mb.length > 4e6) {
      for (const l of ma) ops.push(["-", l]);
      for (const l of mb) ops.push(["+", l]);
    } else {
      const n = ma.length, m = mb.length;
      const table = Array.from({ length: n + 1 }, () => new Uint32Array(m + 1));
      for (let i = n - 1; i >= 0; i--)
        for (let j = m - 1; j >= 0; j--)
          table[i][j] = ma[i] === mb[j] ? table[i + 1][j + 1] + 1 : Math.max(table[i + 1][j], table[i][j + 1]);
      let i = 0, j = 0;
      while (i < n || j < m) {
        if (i < n && j < m && ma[i] === mb[j]) { ops.push([" ", ma[i]]); i++; j++; }
        else if (i < n && (j >= m || table[i + 1][j] >= table[i][j + 1])) { ops.push(["-", ma[i]]); i++; }
        else { ops.push(["+", mb[j]]); j++; }
      }
    }
    for (let i = endA; i < a.length; i++) ops.push([" ", a[i]]);
    return ops;
  }

  function unifiedDiff(a, b, context = 3) {
    const ops = lcsOps(a, b);
    const changed = ops.map((op, i) => (op[0] !== " " ? i : -1)).filter((i) => i >= 0);
    if (!changed.length) return [];
    const groups = [];
    let lo = Math.max(0, changed[0] - context), hi = Math.min(ops.length, changed[0] + context + 1);
    for (const i of changed.slice(1)) {
      if (i - context <= hi) hi = Math.min(ops.length, i + context + 1);
      else { groups.push([lo, hi]); lo = Math.max(0, i - context); hi = Math.min(ops.length, i + context + 1); }
    }
    groups.push([lo, hi]);
    // line numbers before each op
    const posA = [], posB = [];
    let la = 0, lb = 0;
    for (const [tag] of ops) { posA.push(la); posB.push(lb); if (tag !== "+") la++; if (tag !== "-") lb++; }
    const out = [];
    for (const [s, e] of groups) {
      const slice = ops.slice(s, e);
      const lenA = slice.filter((o) => o[0] !== "+").length, lenB = slice.filter((o) => o[0] !== "-").length;
      const range = (start, len) => (len === 1 ? `${start + 1}` : `${len ? start + 1 : start},${len}`);
      out.push(["@", `@@ -${range(posA[s], lenA)} +${range(posB[s], lenB)} @@`]);
      for (const [tag, line] of slice) out.push([tag, tag + line]);
    }
    return out;
  }

  function headerOf(headers, name) {
    if (!headers || typeof headers !== "object") return "";
    for (const [k, v] of Object.entries(headers)) if (k.toLowerCase() === name) return String(v);
    return "";
  }

  function fmtDuration(micros) {
    return typeof micros === "number" ? `${(micros / 1000).toFixed(1)}ms` : "";
  }

  class RequestTrace {
    constructor() { this.events = []; this.rows = []; this.finished = false; }

    add(event) {
      const [kind, summary] = summarize(event);
      const row = { number: this.rows.length + 1, kind, summary, severity: String(event.severity || "info") };
      this.events.push(event);
      this.rows.push(row);
      if (message(event).type === "requestFinished") this.finished = true;
      return row;
    }

    firstRequest() {
      for (const ev of this.events) {
        const msg = message(ev);
        if (msg.type === "requestSnapshot") return ((msg.requestState || {}).request) || {};
      }
      return {};
    }

    get method() { return String(this.firstRequest().method ?? ""); }
    get path() { return String(this.firstRequest().path ?? ""); }
    get status() {
      for (let i = this.events.length - 1; i >= 0; i--) {
        const msg = message(this.events[i]);
        if (msg.type === "requestFinished") return String(msg.status ?? "");
      }
      return "…";
    }
    get duration() { return this.finished ? fmtDuration(this.events[this.events.length - 1].eventEnd) : ""; }

    snapshotPoints() {
      return this.events.map((ev, i) => (SNAPSHOT_TYPES.includes(message(ev).type) ? i : -1)).filter((i) => i >= 0);
    }

    pointLabel(index) {
      const msg = message(this.events[index]);
      return `${msg.stage}${msg.type === "bodySnapshot" ? " body" : ""}`;
    }

    /** Latest request/response snapshot up to event ``index``, bodies decoded and merged. */
    snapshotAt(index) {
      let current = null;
      const bodies = {};
      for (const ev of this.events.slice(0, index + 1)) {
        const msg = message(ev);
        if (msg.type === "requestSnapshot" || msg.type === "responseSnapshot") {
          current = { type: msg.type, stage: msg.stage, ...structuredClone(msg.requestState || {}) };
        } else if (msg.type === "bodySnapshot") {
          bodies[msg.stage === "response" ? "response" : "request"] = bodyText(decodeBody(msg.body));
        }
      }
      if (current === null) return null;
      for (const [side, text] of Object.entries(bodies)) {
        if (side === "response" && current.type !== "responseSnapshot") continue;
        const part = current[side];
        current[side] = { ...(part && typeof part === "object" ? part : {}), body: text };
      }
      return current;
    }

    /**
     * The request and response bodies of this request as read: {request, response}, each
     * {stage, text, contentType, truncated, original} or null; ``original`` is the other form of a
     * translated body (the client's request, the provider's answer).
     */
    bodies() {
      let requestType = "", responseType = "";
      const found = {};
      for (const ev of this.events) {
        const msg = message(ev);
        const state = msg.requestState || {};
        if (msg.type === "requestSnapshot" && state.request) requestType = headerOf(state.request.headers, "content-type") || requestType;
        if (msg.type === "responseSnapshot" && state.response) responseType = headerOf(state.response.headers, "content-type") || responseType;
        if (msg.type === "bodySnapshot") found[String(msg.stage)] = { stage: String(msg.stage), text: bodyText(decodeBody(msg.body)), truncated: !!msg.truncated };
      }
      const side = (main, other, type) => {
        const body = found[main] || found[other];
        if (!body) return null;
        const original = found[main] && found[other] ? { ...found[other], contentType: "" } : null;
        return { ...body, contentType: type, original };
      };
      return { request: side("final request", "client request", requestType), response: side("response", "provider response", responseType) };
    }

    /** Lower-cased text of event ``i`` for search: the event's JSON and, for a body, the body as text. */
    searchText(i) {
      if (!this.searchCache) this.searchCache = [];
      if (this.searchCache[i] === undefined) {
        const ev = this.events[i];
        const msg = message(ev);
        let text = JSON.stringify(ev);
        if (msg.type === "bodySnapshot") {
          const body = bodyText(decodeBody(msg.body));
          text += "\n" + body;
          // a streamed answer's text is split across events: search its reassembled text too
          const shown = global.LlmStream ? global.LlmStream.present(body) : null;
          if (shown && shown.kind === "sse") text += "\n" + shown.stream.text;
        }
        this.searchCache[i] = text.toLowerCase();
      }
      return this.searchCache[i];
    }

    /** Indexes of the events whose text holds ``query`` (case-insensitive). */
    matching(query) {
      const q = String(query || "").toLowerCase();
      if (!q) return [];
      return this.events.map((_, i) => (this.searchText(i).includes(q) ? i : -1)).filter((i) => i >= 0);
    }

    /** [caption, [[tag, line]]]: the snapshot at ``index`` against the one before it. */
    diffAt(index, fmt) {
      const points = this.snapshotPoints().filter((p) => p <= index);
      if (!points.length) return ["no snapshot yet", []];
      const cur = this.snapshotAt(points[points.length - 1]);
      const prev = points.length > 1 ? this.snapshotAt(points[points.length - 2]) : null;
      const before = points.length > 1 ? this.pointLabel(points[points.length - 2]) : "(nothing)";
      const caption = `${before} → ${this.pointLabel(points[points.length - 1])}`;
      return [caption, unifiedDiff(render(prev, fmt), render(cur, fmt))];
    }
  }

  class TraceView {
    constructor() {
      this.requests = [];
      this.focus = "events";
      this.mode = "event";
      this.fmt = "yaml";
      this.selectedRequest = 0;
      this.selectedRow = 0;
      this.followRows = true;
      this.followRequests = true;
      this.showRequests = false;
      this.cache = null;
      this.search = ""; // search within the trace's events and bodies
    }

    addEvent(event) {
      const startsNew = message(event).type === "requestStarted";
      const last = this.requests[this.requests.length - 1];
      if (!last || last.finished || (startsNew && last.events.length)) {
        this.requests.push(new RequestTrace());
        if (this.requests.length > MAX_REQUESTS) {
          this.requests.shift();
          this.selectedRequest = Math.max(0, this.selectedRequest - 1);
          this.cache = null;
        }
        if (this.requests.length > 1) this.showRequests = true;
        if (this.followRequests) this.selectRequest(this.requests.length - 1);
      }
      const trace = this.requests[this.requests.length - 1];
      trace.add(event);
      if (this.followRows && this.selectedRequest === this.requests.length - 1) {
        this.selectedRow = trace.rows.length - 1;
      }
    }

    get trace() { return this.requests.length ? this.requests[this.selectedRequest] : null; }
    get eventCount() { return this.requests.reduce((n, r) => n + r.events.length, 0); }
    allEvents() { return this.requests.flatMap((r) => r.events); }
    panes() { return this.showRequests ? PANES : PANES.slice(1); }
    detailsTitle() { return MODE_TITLES[this.mode] + (this.fmt === "json" ? " (json)" : ""); }

    /** [[style, line]] for the details pane; cached per selection, mode and format. */
    detailsLines() {
      const trace = this.trace;
      const key = [this.selectedRequest, this.selectedRow, this.mode, this.fmt, trace ? trace.events.length : 0].join("|");
      if (!this.cache || this.cache[0] !== key) this.cache = [key, this.renderDetails()];
      return this.cache[1];
    }

    renderDetails() {
      const trace = this.trace;
      if (!trace || !trace.events.length) return [["", "waiting for trace data"]];
      const index = Math.min(this.selectedRow, trace.events.length - 1);
      if (this.mode === "event") return render(trace.events[index], this.fmt).map((l) => ["", l]);
      if (this.mode === "bodies") return bodiesLines(trace.bodies());
      if (this.mode === "snapshot") {
        const snap = trace.snapshotAt(index);
        return snap === null ? [["", "no snapshot yet"]] : render(snap, this.fmt).map((l) => ["", l]);
      }
      const [caption, diff] = trace.diffAt(index, this.fmt);
      const styles = { "+": "diff-add", "-": "diff-del", "@": "diff-hunk", " ": "" };
      return [["diff-caption", caption], ...diff.map(([t, l]) => [styles[t], l])];
    }

    focusNext(step = 1) {
      const panes = this.panes();
      const cur = Math.max(0, panes.indexOf(this.focus));
      this.focus = panes[(cur + step + panes.length) % panes.length];
    }

    /** Move in the focused pane (rows or requests); the details pane scrolls in the DOM. */
    move(delta) {
      if (this.focus === "requests" && this.requests.length) {
        const last = this.requests.length - 1;
        this.selectRequest(Math.max(0, Math.min(last, this.selectedRequest + delta)));
        this.followRequests = this.selectedRequest === last;
      } else if (this.focus === "events" && this.trace && this.trace.rows.length) {
        const last = this.trace.rows.length - 1;
        this.selectedRow = Math.max(0, Math.min(last, this.selectedRow + delta));
        this.followRows = this.selectedRow === last;
      }
    }

    selectRow(index) {
      if (!this.trace) return;
      const last = this.trace.rows.length - 1;
      this.selectedRow = Math.max(0, Math.min(last, index));
      this.followRows = this.selectedRow === last;
    }

    selectRequest(index) {
      if (index !== this.selectedRequest || !this.requests[index].rows.length) {
        this.selectedRequest = index;
        this.selectedRow = Math.max(0, this.requests[index].rows.length - 1);
        this.followRows = true;
      }
    }

    /** Move the selection to the next (or previous) event that matches the search, across requests. */
    nextMatch(step = 1) {
      if (!this.search || !this.requests.length) return false;
      const flat = [];
      this.requests.forEach((r, ri) => { for (const i of r.matching(this.search)) flat.push([ri, i]); });
      if (!flat.length) return false;
      const here = [this.selectedRequest, this.selectedRow];
      const after = (a) => a[0] > here[0] || (a[0] === here[0] && a[1] > here[1]);
      const before = (a) => a[0] < here[0] || (a[0] === here[0] && a[1] < here[1]);
      const target = step > 0 ? (flat.find(after) || flat[0]) : ([...flat].reverse().find(before) || flat[flat.length - 1]);
      if (target[0] !== this.selectedRequest) this.selectRequest(target[0]);
      this.followRequests = false;
      this.selectRow(target[1]);
      return true;
    }

    setMode(mode) { if (MODES.includes(mode)) this.mode = mode; }
    toggleFormat() { this.fmt = FORMATS[(FORMATS.indexOf(this.fmt) + 1) % FORMATS.length]; }
  }

  /** The bodies as plain lines (what ``c`` copies in the Bodies view). */
  function bodiesLines(bodies) {
    const out = [];
    for (const [name, body] of [["request", bodies.request], ["response", bodies.response]]) {
      out.push(["diff-caption", `${name}${body ? ` (${body.stage}${body.contentType ? ", " + body.contentType : ""})` : ""}`]);
      if (!body) { out.push(["", "no body"]); continue; }
      const shown = global.LlmStream ? global.LlmStream.present(body.text, body.contentType) : { kind: "text", text: body.text };
      if (shown.kind === "sse") {
        out.push(["", `reassembled ${shown.stream.format} stream (${shown.stream.events} events):`]);
        out.push(...shown.stream.text.split("\n").map((l) => ["", l]));
        if (shown.stream.usage) out.push(["", "usage: " + JSON.stringify(shown.stream.usage)]);
      } else out.push(...shown.text.split("\n").map((l) => ["", l]));
    }
    return out;
  }

  global.TraceModel = { summarize, render, unifiedDiff, RequestTrace, TraceView, KIND_BY_TYPE, MODE_TITLES, MAX_REQUESTS };
})(window);
