// Reading LLM traffic in the trace view: a body as text, JSON pretty-printed, and a server-sent-event
// stream (text/event-stream) reassembled into the generated text and the final usage, for OpenAI
// chat completions, OpenAI Responses, Anthropic Messages and Gemini (streamGenerateContent?alt=sse).
// No DOM here; tests/e2e/test_webui_llm_trace.py runs it in Chromium on real gateway traffic.
"use strict";

(function (global) {
  /** The events of an SSE body: [{event, data}] (data lines joined with "\n"), comments skipped. */
  function parseSse(text) {
    const events = [];
    for (const block of String(text).replace(/\r\n?/g, "\n").split(/\n\n+/)) {
      let event = "", data = [];
      for (const line of block.split("\n")) {
        if (!line || line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
        if (field === "event") event = value;
        else if (field === "data") data.push(value);
      }
      if (data.length || event) events.push({ event, data: data.join("\n") });
    }
    return events;
  }

  function json(text) {
    try { return JSON.parse(text); } catch (e) { return undefined; }
  }

  const isObject = (v) => v !== null && typeof v === "object" && !Array.isArray(v);

  /** Which API an SSE stream speaks, from its first JSON events. */
  function detect(payloads) {
    for (const { event, value } of payloads) {
      if (!isObject(value)) continue;
      const type = String(value.type || event || "");
      if (type.startsWith("response.")) return "openai-responses";
      if (["message_start", "content_block_start", "content_block_delta", "message_delta", "message_stop", "ping"].includes(type))
        return "anthropic";
      if (Array.isArray(value.candidates) || isObject(value.usageMetadata)) return "gemini";
      if (Array.isArray(value.choices) || value.object === "chat.completion.chunk") return "openai-chat";
    }
    return "unknown";
  }

  /**
   * An SSE body reassembled: {format, text, usage, model, finishReason, toolCalls, events, done}.
   * ``usage`` is the provider's own last usage object (null when the stream had none).
   */
  function reassemble(body) {
    const events = parseSse(body);
    const payloads = events.map((e) => ({ event: e.event, raw: e.data, value: e.data === "[DONE]" ? undefined : json(e.data) }));
    const format = detect(payloads);
    const out = { format, text: "", usage: null, model: null, finishReason: null, toolCalls: [], events: events.length, done: false };
    const tools = new Map(); // index → {name, arguments}
    const tool = (key, name) => {
      if (!tools.has(key)) tools.set(key, { name: name || "", arguments: "" });
      const t = tools.get(key);
      if (name && !t.name) t.name = name;
      return t;
    };
    for (const { event, raw, value } of payloads) {
      if (raw === "[DONE]") { out.done = true; continue; }
      if (!isObject(value)) continue;
      if (format === "openai-chat") {
        if (value.model) out.model = value.model;
        if (isObject(value.usage)) out.usage = value.usage;
        for (const choice of value.choices || []) {
          if ((choice.index ?? 0) !== 0) continue;
          const delta = choice.delta || {};
          if (typeof delta.content === "string") out.text += delta.content;
          for (const call of delta.tool_calls || []) {
            const t = tool(call.index ?? 0, call.function && call.function.name);
            if (call.function && typeof call.function.arguments === "string") t.arguments += call.function.arguments;
          }
          if (choice.finish_reason) out.finishReason = choice.finish_reason;
        }
      } else if (format === "openai-responses") {
        const type = value.type || event;
        if (type === "response.output_text.delta" && typeof value.delta === "string") out.text += value.delta;
        else if (type === "response.function_call_arguments.delta") tool(value.item_id || value.output_index || 0).arguments += value.delta || "";
        else if (type === "response.output_item.added" && isObject(value.item) && value.item.type === "function_call")
          tool(value.item.id || value.output_index || 0, value.item.name);
        if (isObject(value.response)) {
          if (value.response.model) out.model = value.response.model;
          if (type === "response.completed" && !out.text) out.text = responsesText(value.response); // no deltas
          if (isObject(value.response.usage)) out.usage = value.response.usage;
          if (value.response.status && type !== "response.created") out.finishReason = value.response.status;
        }
        if (type === "response.completed") out.done = true;
      } else if (format === "anthropic") {
        const type = value.type || event;
        if (type === "message_start" && isObject(value.message)) {
          out.model = value.message.model || out.model;
          if (isObject(value.message.usage)) out.usage = { ...value.message.usage };
        } else if (type === "content_block_start" && isObject(value.content_block) && value.content_block.type === "tool_use") {
          tool(value.index ?? 0, value.content_block.name);
        } else if (type === "content_block_delta" && isObject(value.delta)) {
          if (value.delta.type === "text_delta" || typeof value.delta.text === "string") out.text += value.delta.text || "";
          else if (value.delta.type === "input_json_delta") tool(value.index ?? 0).arguments += value.delta.partial_json || "";
        } else if (type === "message_delta") {
          if (isObject(value.usage)) out.usage = { ...(out.usage || {}), ...value.usage };
          if (isObject(value.delta) && value.delta.stop_reason) out.finishReason = value.delta.stop_reason;
        } else if (type === "message_stop") out.done = true;
      } else if (format === "gemini") {
        if (value.modelVersion) out.model = value.modelVersion;
        if (isObject(value.usageMetadata)) out.usage = value.usageMetadata;
        const candidate = (value.candidates || [])[0];
        if (isObject(candidate)) {
          for (const part of (candidate.content && candidate.content.parts) || []) {
            if (typeof part.text === "string" && !part.thought) out.text += part.text;
            if (isObject(part.functionCall)) tools.set(tools.size, { name: part.functionCall.name || "", arguments: JSON.stringify(part.functionCall.args ?? {}) });
          }
          if (candidate.finishReason) { out.finishReason = candidate.finishReason; out.done = true; }
        }
      }
    }
    out.toolCalls = [...tools.values()];
    return out;
  }

  /** The output text of a whole Responses API ``response`` object. */
  function responsesText(response) {
    return (response.output || []).flatMap((item) => (isObject(item) && Array.isArray(item.content) ? item.content : []))
      .filter((c) => isObject(c) && c.type === "output_text" && typeof c.text === "string").map((c) => c.text).join("");
  }

  function headerValue(headers, name) {
    if (!isObject(headers)) return "";
    for (const [k, v] of Object.entries(headers)) if (k.toLowerCase() === name) return String(v);
    return "";
  }

  function looksLikeSse(text) {
    return /^(?:(?:event|data|id|retry):|:)/m.test(text) && /\n\n|\r\n\r\n/.test(text);
  }

  /**
   * How to show one body: {kind: "sse"|"json"|"text"|"empty", text, stream?}. ``text`` is what to
   * show (pretty JSON, or the body as it is); ``stream`` the reassembly of an SSE body.
   */
  function present(text, contentType = "") {
    if (text === null || text === undefined || text === "") return { kind: "empty", text: "" };
    const type = String(contentType).toLowerCase();
    if (type.includes("text/event-stream") || (!type.includes("json") && looksLikeSse(text))) {
      const stream = reassemble(text);
      if (stream.events) return { kind: "sse", text, stream };
    }
    const trimmed = text.trim();
    if (type.includes("json") || /^[[{]/.test(trimmed)) {
      const value = json(trimmed);
      if (value !== undefined) return { kind: "json", text: JSON.stringify(value, null, 2) };
      if (type.includes("ndjson") || type.includes("jsonl")) {
        const lines = trimmed.split("\n").map((l) => json(l));
        if (lines.every((l) => l !== undefined)) return { kind: "json", text: lines.map((l) => JSON.stringify(l, null, 2)).join("\n") };
      }
    }
    return { kind: "text", text };
  }

  global.LlmStream = { parseSse, reassemble, present, headerValue };
})(window);
