// The chat page of `course serve`: it talks to the server's own OpenAI-compatible endpoint
// (POST /v1/chat/completions, streamed) and, for the X-ray, to GET /course/xray/{id}, which
// the server fills in only for requests sent with the header "X-Course-Xray: 1".
// Every piece of text from the user or the model goes into the page as text (textContent),
// never as markup.
"use strict";

const $ = (id) => document.getElementById(id);
const POLL_MS = 250;          // how often the X-ray is re-read while a reply streams (only what is new)
const state = { messages: [], controller: null, lastRequest: null, selected: null, xrays: new Map(),
                reading: new Set() };

function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (key === "class") node.className = value;
    else if (key === "style") Object.assign(node.style, value);
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value);
  }
  for (const child of children) node.append(child instanceof Node ? child : String(child));
  return node;
}

function headers(extra = {}) {
  const key = $("api-key").value || localStorage.getItem("course-api-key") || "";
  const out = { ...extra };
  if (key) out.Authorization = `Bearer ${key}`;
  return out;
}

async function getJSON(path) {
  const response = await fetch(path, { headers: headers() });
  if (response.status === 401) $("key-box").hidden = false;
  if (!response.ok) throw new Error(await errorText(response));
  return response.json();
}

async function errorText(response) {
  try {
    const body = await response.json();
    return `${response.status}: ${body.error ? body.error.message : JSON.stringify(body)}`;
  } catch (_) {
    return `${response.status} ${response.statusText}`;
  }
}

// --- settings -> request body -------------------------------------------------------------

function number(id) {
  const raw = $(id).value.trim();
  return raw === "" ? null : Number(raw);
}

function parseJSONField(id, what) {
  const raw = $(id).value.trim();
  if (!raw) return null;
  try { return JSON.parse(raw); } catch (error) { throw new Error(`the ${what} is not valid JSON: ${error.message}`); }
}

function requestBody(messages, seed) {
  const body = { model: state.model || "tinychat", messages, stream: true };
  for (const name of ["temperature", "top_p", "top_k", "min_p", "frequency_penalty", "presence_penalty",
                      "repetition_penalty", "max_tokens"]) {
    const value = number(name);
    if (value !== null) body[name] = value;
  }
  body.seed = seed;
  if ($("ignore_eos").checked) body.ignore_eos = true;
  const schema = parseJSONField("schema", "JSON schema");
  const tool = parseJSONField("tool", "tool");
  if (schema && tool) throw new Error("choose a JSON schema or a tool, not both");
  if (schema) body.response_format = { type: "json_schema", json_schema: { name: "reply", schema } };
  if (tool) {
    body.tools = [{ type: "function", function: tool }];
    body.tool_choice = { type: "function", function: { name: tool.name } };
  }
  return body;
}

// --- the conversation ---------------------------------------------------------------------

function addMessage(role, text) {
  const node = el("div", { class: `message ${role}` }, text);
  $("messages").append(node);
  node.scrollIntoView({ block: "end" });
  return node;
}

function notice(text) {
  $("notice").textContent = text;
  $("notice").hidden = !text;
}

async function send(text) {
  const seedSetting = number("seed");
  const seed = seedSetting === null ? Math.floor(Math.random() * 2 ** 31) : seedSetting;
  const messages = [...state.messages, { role: "user", content: text }];
  let body;
  try {
    body = requestBody(messages, seed);
  } catch (error) {
    notice(error.message);
    return;
  }
  notice("");
  state.messages = messages;
  state.lastRequest = { text, seed, history: messages.slice(0, -1) };
  addMessage("user", text);
  await stream(body);
}

async function stream(body) {
  const reply = addMessage("assistant", "");
  reply.classList.add("pending");
  const controller = new AbortController();
  state.controller = controller;
  setBusy(true);
  let id = null, content = "", poller = null, call = null;
  try {
    const response = await fetch("/v1/chat/completions", {
      method: "POST", signal: controller.signal,
      headers: headers({ "Content-Type": "application/json", "X-Course-Xray": "1" }),
      body: JSON.stringify(body),
    });
    if (!response.ok) {
      if (response.status === 401) $("key-box").hidden = false;
      const message = response.status === 429
        ? "The server is busy (HTTP 429: its queue is full). Wait a moment and send again."
        : `The server refused the request (${await errorText(response)}).`;
      reply.remove();
      state.messages.pop();
      addMessage("error", message);
      return;
    }
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += value;
      let cut;
      while ((cut = buffer.search(/\r?\n\r?\n/)) >= 0) {
        const event = buffer.slice(0, cut);
        buffer = buffer.slice(cut).replace(/^\r?\n\r?\n/, "");
        const data = event.split(/\r?\n/).filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trim()).join("\n");
        if (!data || data === "[DONE]") continue;
        const chunk = JSON.parse(data);
        if (chunk.error) throw new Error(chunk.error.message);
        if (!id && chunk.id) {
          id = chunk.id;
          reply.dataset.id = id;
          select(reply);
          poller = setInterval(() => refresh(id), POLL_MS);
        }
        for (const choice of chunk.choices || []) {
          const delta = choice.delta || {};
          if (delta.content) content += delta.content;
          if (delta.tool_calls) call = delta.tool_calls[0].function;
        }
        reply.textContent = content;
        if (call) reply.append(el("span", { class: "call" }, `${call.name}(${call.arguments})`));
      }
    }
    state.messages.push(call ? { role: "assistant", content: `${call.name}(${call.arguments})` }
                             : { role: "assistant", content });
  } catch (error) {
    if (error.name === "AbortError") {
      reply.append(el("span", { class: "muted" }, " [stopped]"));
      state.messages.push({ role: "assistant", content });
    } else {
      addMessage("error", `The reply failed: ${error.message}`);
    }
  } finally {
    reply.classList.remove("pending");
    if (poller) clearInterval(poller);
    state.controller = null;
    setBusy(false);
    if (id) await refreshUntilFinished(id);
    refreshPool();
  }
}

function setBusy(busy) {
  $("send").disabled = busy;
  $("stop").disabled = !busy;
  $("replay").disabled = busy || !state.lastRequest;
}

function select(node) {
  for (const other of document.querySelectorAll(".message.selected")) other.classList.remove("selected");
  node.classList.add("selected");
  state.selected = node.dataset.id;
  const known = state.xrays.get(state.selected);
  if (known) render(known);
}

async function refresh(id, last = false) {
  if (state.reading.has(id)) return;  // a slow read is still appending; the next poll catches up
  state.reading.add(id);
  try {
    // Tokens and steps only ever grow: ask for the new ones and append them to what we have.
    const known = state.xrays.get(id);
    const from = known ? known.choices[0] : null;
    const query = from ? `?tokens_from=${from.tokens.length}&steps_from=${from.steps.length}` : "";
    const xray = await getJSON(`/course/xray/${encodeURIComponent(id)}${query}`);
    if (known) {
      xray.choices.forEach((choice, i) => {
        choice.tokens = known.choices[i].tokens.concat(choice.tokens);
        choice.steps = known.choices[i].steps.concat(choice.steps);
      });
    }
    state.xrays.set(id, xray);
    if (state.selected === id) render(xray);
  } catch (error) {
    if (last) notice(`No X-ray for this reply: ${error.message}`);
  } finally {
    state.reading.delete(id);
  }
}

async function refreshUntilFinished(id) {
  // A stopped reply is aborted by the engine a moment after the connection closes.
  for (let tries = 0; tries < 40; tries++) {
    await refresh(id, tries === 39);
    const xray = state.xrays.get(id);
    if (xray && xray.choices.every((c) => c.finish && !c.trace_pending)) return;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

async function refreshPool() {
  try {
    const pool = await getJSON("/course/pool");
    $("pool").textContent = `pool: ${pool.num_used_blocks} of ${pool.num_blocks} KV blocks in use · ` +
      `${pool.num_running} running, ${pool.num_waiting} waiting · prefix-cache hit rate ${(100 * pool.prefix_cache_hit_rate).toFixed(0)}%`;
    $("pool").dataset.used = pool.num_used_blocks;
  } catch (_) { /* the page still works without it */ }
}

// --- the X-ray ----------------------------------------------------------------------------

function ms(value) { return value === null || value === undefined ? "–" : `${value.toFixed(1)} ms`; }
function pct(p) { return p >= 0.995 ? "1.00" : p >= 0.01 ? p.toFixed(2) : p.toExponential(0); }

function render(xray) {
  const doc = xray.choices[0];
  $("xray-empty").hidden = true;
  $("xray-body").hidden = false;
  renderPrompt(doc);
  renderTiming(doc);
  renderTokens(doc);
  renderMemory(doc);
  renderFinish(doc);
}

function renderPrompt(doc) {
  const box = $("prompt-tokens");
  box.replaceChildren(...doc.prompt.tokens.map((t, i) => el("span", {
    class: `chip${t.special ? " special" : ""}${i < doc.prompt.cached ? " cached" : ""}`,
    title: `token ${t.id}${t.special ? " (special)" : ""}${i < doc.prompt.cached ? ", KV from the prefix cache" : ""}`,
  }, t.text)));
  const cost = (doc.prompt.count * number("price_in") + doc.tokens.length * number("price_out")) / 1e6;
  $("prompt-summary").textContent = `${doc.prompt.count} tokens, ${doc.prompt.cached} served by the prefix cache · ` +
    `${doc.tokens.length} generated · $${cost.toFixed(6)} at the prices in Settings`;
}

function renderTiming(doc) {
  const t = doc.timing;
  const rate = t.decode_tokens_per_s ? `${t.decode_tokens_per_s.toFixed(0)} tokens/s while decoding` : "";
  $("timing-summary").textContent = `time to first token ${ms(t.ttft_ms)} · ${rate} · ${ms(t.elapsed_ms)} in all`;
  const end = Math.max(t.elapsed_ms || 0, ...doc.tokens.map((k) => k.ms), 1);
  const ticks = doc.tokens.map((k, i) => el("span", {
    class: `tick${i === 0 ? " first" : ""}`, style: { left: `${(100 * k.ms) / end}%` }, title: `${k.text} at ${ms(k.ms)}`,
  }));
  ticks.push(el("span", { class: "label", style: { left: "0" } }, "arrived"));
  ticks.push(el("span", { class: "label", style: { right: "0" } }, ms(end)));
  $("timeline").replaceChildren(...ticks);
}

function renderTokens(doc) {
  const chips = doc.tokens.map((t, i) => {
    const chip = el("span", {
      class: `chip generated${t.special ? " special" : ""}${t.speculative ? " guess" : ""}`,
      title: `token ${t.id}, p = ${t.p.toFixed(4)}${t.speculative ? ", from a verified guess round" : ""}`,
      "data-index": i, onclick: () => showDistribution(doc, i),
    }, t.text, el("span", { class: "p" }, pct(t.p)));
    return chip;
  });
  $("reply-tokens").replaceChildren(...chips);
  const open = $("distribution").dataset.index;
  if (open !== undefined && doc.tokens[Number(open)]) showDistribution(doc, Number(open));
}

function stage(title, note, alternatives, chosen, cls = "") {
  const rows = alternatives.map((a) => el("div", { class: `alt${a.id === chosen ? " chosen" : ""} ${cls}` },
    el("span", { class: "name", title: `token ${a.id}` }, a.text),
    el("span", { class: "bar", style: { width: `${Math.max(1, 100 * a.p)}%` } }),
    el("span", {}, pct(a.p))));
  return el("div", { class: "stage" }, el("h3", {}, title), el("p", { class: "muted" }, note),
    ...(rows.length ? rows : [el("p", { class: "muted" }, "none")]));
}

function showDistribution(doc, index) {
  const t = doc.tokens[index];
  const p = doc.params;
  const box = $("distribution");
  box.dataset.index = index;
  box.hidden = false;
  for (const chip of document.querySelectorAll(".chip.generated")) chip.classList.toggle("selected", Number(chip.dataset.index) === index);
  const filters = p.temperature === 0 ? "temperature 0: only the most likely token is left"
    : [p.top_k ? `top_k ${p.top_k}` : null, p.top_p < 1 ? `top_p ${p.top_p}` : null,
       p.min_p ? `min_p ${p.min_p}` : null].filter(Boolean).join(", ") || "no filter: the whole distribution";
  const draw = t.uniform === null
    ? (p.temperature === 0 ? "temperature 0: the argmax, no random draw" : "verified from a guess round: the accept test drew, not the sampler")
    : `the draw: uniform u = ${t.uniform.toFixed(6)} from the request's own generator (seed ${p.seed}), mapped through the cumulative probabilities of the last stage`;
  const children = [
    el("strong", {}, `Token ${index + 1}: `), el("span", { class: "chip" }, t.text), ` (id ${t.id}, step ${t.step}, p = ${t.p.toFixed(4)})`,
    el("div", { class: "stages" },
      stage("the model", "softmax of the raw logits", t.raw, t.id),
      stage("after the rules", `penalties${doc.params.structured ? ", the grammar mask" : ""}, temperature ${p.temperature || "1 (argmax follows)"}`, t.tempered, t.id),
      stage("drawn from", filters, t.final, t.id)),
  ];
  if (t.masked.length) children.push(stage("removed by the grammar", "raw top tokens the schema's mask forbade here", t.masked, -1, "masked"));
  children.push(el("p", { class: "muted" }, draw));
  const attention = el("div", { id: "attention" });
  children.push(el("button", { type: "button", id: "show-attention", onclick: () => showAttention(index, attention) },
    "Show where each head attended from here"), attention);
  box.replaceChildren(...children);
}

async function showAttention(index, box) {
  box.replaceChildren(el("p", { class: "muted" }, "computing…"));
  let maps;
  try {
    maps = await getJSON(`/course/xray/${encodeURIComponent(state.selected)}/attention?token=${index}`);
  } catch (error) {
    box.replaceChildren(el("p", { class: "bad" }, error.message));
    return;
  }
  const n = maps.keys.length;
  const layers = maps.layers.map((heads, l) => {
    const cells = [];
    heads.forEach((weights, h) => {
      const top = Math.max(...weights, 1e-9);
      weights.forEach((w, k) => cells.push(el("span", {
        class: "cell", style: { background: `rgba(79, 70, 229, ${Math.sqrt(w / top).toFixed(3)})` },
        title: `layer ${l}, head ${h} → position ${k} ${maps.keys[k]}: ${w.toFixed(4)}`,
      })));
    });
    const labels = l === maps.layers.length - 1 && n <= 80
      ? [el("div", { class: "keys", style: { gridTemplateColumns: `repeat(${n}, 1fr)` } },
          ...maps.keys.map((k) => el("span", { title: k }, k)))] : [];
    return el("div", { class: "layer" }, el("span", { class: "muted" }, `layer ${l}: one row per head`),
      el("div", { class: "heat", style: { gridTemplateColumns: `repeat(${n}, 1fr)` } }, ...cells), ...labels);
  });
  box.replaceChildren(el("p", { class: "muted" },
    `From position ${maps.position} over its ${n} positions (hover a cell for the token; darker = more weight, ` +
    `scaled per head), ${maps.note}.`), ...layers);
}

function renderMemory(doc) {
  const steps = doc.steps;
  const most = Math.max(1, ...steps.map((s) => s.blocks_held));
  const bars = steps.map((s) => el("span", {
    class: `step ${s.kind}${s.batch_requests > 1 ? " shared" : ""}`,
    style: { height: `${(100 * s.blocks_held) / most}%` },
    title: `step ${s.step} (${s.kind}, positions ${s.start}..${s.stop - 1}): ${s.blocks_held} blocks held, ` +
           `${s.pool_used} of ${doc.pool.num_blocks} in the pool; batch of ${s.batch_requests} request(s), ${s.batch_tokens} tokens`,
  }));
  $("steps").replaceChildren(...bars);
  const shared = Math.max(0, ...steps.map((s) => s.batch_requests));
  const held = steps.length ? steps[steps.length - 1].blocks_held : 0;
  const after = doc.finish ? `, ${doc.finish.blocks_held} held after the end (${held} returned)` : `, ${held} held now`;
  $("memory-summary").textContent = `${steps.length} steps, largest batch ${shared} request(s) · ` +
    `up to ${most} KV blocks of ${doc.pool.num_blocks}${after}`;
  $("steps").dataset.blocksAfter = doc.finish ? doc.finish.blocks_held : "";
  $("steps").dataset.largestBatch = shared;
}

function renderFinish(doc) {
  const rows = [];
  const add = (name, value, cls = "") => rows.push(el("dt", {}, name), el("dd", { class: cls }, value));
  if (!doc.finish) {
    add("status", "still generating…");
  } else {
    add("finish reason", doc.finish.reason);
    add("decided by", doc.finish.token ? `${doc.finish.cause}: ${doc.finish.token.text} (id ${doc.finish.token.id})`
                                       : `${doc.finish.cause}: ${doc.finish.detail}`);
    add("KV blocks after the end", `${doc.finish.blocks_held} (pool: ${doc.finish.pool_used} of ${doc.pool.num_blocks} in use)`);
  }
  if (doc.validation) add("schema check", doc.validation.message, doc.validation.ok ? "ok" : "bad");
  if (doc.reply && doc.reply.tool_call) add("tool call", `${doc.reply.tool_call.function.name}(${doc.reply.tool_call.function.arguments})`);
  add("seed", doc.params.seed === null ? "none" : String(doc.params.seed));
  if (doc.trace) {
    add("trace line", `hash ${doc.trace.hash.slice(0, 16)}…, chained to ${doc.trace.prev.slice(0, 16)}…`);
    add("trace record (redacted)", JSON.stringify(doc.trace.record, null, 1));
  }
  $("finish").replaceChildren(...rows);
}

// --- wiring -------------------------------------------------------------------------------

$("composer").addEventListener("submit", (event) => {
  event.preventDefault();
  const text = $("input").value;
  if (!text.trim() || state.controller) return;
  $("input").value = "";
  send(text);
});
$("input").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    $("composer").requestSubmit();
  }
});
$("stop").addEventListener("click", () => state.controller && state.controller.abort());
$("replay").addEventListener("click", () => {
  const last = state.lastRequest;
  if (!last || state.controller) return;
  state.messages = last.history;
  const saved = $("seed").value;
  $("seed").value = last.seed;     // same seed, same settings: the same reply
  send(last.text).finally(() => { $("seed").value = saved; });
});
$("clear").addEventListener("click", () => {
  state.messages = [];
  $("messages").replaceChildren();
});
$("messages").addEventListener("click", (event) => {
  const node = event.target.closest(".message.assistant");
  if (node && node.dataset.id) select(node);
});
$("api-key").addEventListener("change", () => localStorage.setItem("course-api-key", $("api-key").value));
window.addEventListener("beforeunload", () => state.controller && state.controller.abort());

getJSON("/v1/models").then((models) => { state.model = models.data[0].id; }).catch(() => {});
refreshPool();
setInterval(refreshPool, 2000);
