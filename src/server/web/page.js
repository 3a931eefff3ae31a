// The script of pagoda serve's web page (page.html; see src/server/web_page.h). The build inlines
// it into the page (scripts/embed_web_page.py) after `node --check` where Node.js is installed.
//
// Markdown is rendered by a small renderer of our own rather than a library: it only ever
// builds DOM nodes and puts model text in through text nodes, so there is no HTML parsing of
// model output to sanitize, nothing to vendor, and it is small enough to read. Links keep only
// http(s) and mailto targets.
"use strict";
const $ = (id) => document.getElementById(id);
const STORE = "pagoda.chats.v1";
let controller = null;
let modelId = null;

// ---- Markdown: text in, DOM nodes out (never innerHTML) ----
function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

const INLINE = new RegExp([
  "(`+)([^`][\\s\\S]*?)\\1(?!`)",           // 1, 2: code span
  "\\*\\*([^*\\s](?:[\\s\\S]*?[^*\\s])?)\\*\\*", // 3: strong
  "__([^_\\s](?:[\\s\\S]*?[^_\\s])?)__",       // 4: strong
  "\\*([^*\\s](?:[^*]*?[^*\\s])?)\\*",         // 5: emphasis
  "(?<![\\w])_([^_\\s](?:[^_]*?[^_\\s])?)_(?![\\w])", // 6: emphasis
  "\\[([^\\]\\n]+)\\]\\(([^)\\s]+)\\)",        // 7, 8: link
].join("|"), "g");

function safeHref(url) {
  return /^(https?:\/\/|mailto:)/i.test(url) ? url : null;
}

function inline(text, into) {
  let last = 0;
  // A regex of its own per call: the recursive calls below must not move this one's position.
  const re = new RegExp(INLINE.source, "g");
  for (let m; (m = re.exec(text)) !== null;) {
    if (m.index > last) into.appendChild(document.createTextNode(text.slice(last, m.index)));
    last = re.lastIndex;
    if (m[2] !== undefined) into.appendChild(el("code", null, m[2]));
    else if (m[3] !== undefined || m[4] !== undefined) inline(m[3] ?? m[4], into.appendChild(el("strong")));
    else if (m[5] !== undefined || m[6] !== undefined) inline(m[5] ?? m[6], into.appendChild(el("em")));
    else {
      const href = safeHref(m[8]);
      if (href) {
        const a = el("a");
        a.setAttribute("href", href);
        a.setAttribute("target", "_blank");
        a.setAttribute("rel", "noopener noreferrer");
        inline(m[7], a);
        into.appendChild(a);
      } else {
        into.appendChild(document.createTextNode(m[0]));
      }
    }
  }
  if (last < text.length) into.appendChild(document.createTextNode(text.slice(last)));
}

// Lines that start a block other than a paragraph.
const FENCE = /^\s*(`{3,}|~{3,})\s*([^`\s]*)\s*$/;
const HEADING = /^(#{1,6})\s+(.*?)\s*#*\s*$/;
const RULE = /^\s*([-*_])(\s*\1){2,}\s*$/;
const QUOTE = /^\s*>\s?/;
const ITEM = /^(\s*)([-*+]|\d{1,9}[.)])\s+(.*)$/;
const TABLE_SEP = /^\s*\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*$/;
const startsBlock = (l) => FENCE.test(l) || HEADING.test(l) || RULE.test(l) || QUOTE.test(l) || ITEM.test(l);

function cells(line) {
  return line.trim().replace(/^\|/, "").replace(/\|$/, "").split("|").map((c) => c.trim());
}

function renderMarkdown(src, into) {
  into.replaceChildren();
  const lines = src.replace(/\r\n?/g, "\n").split("\n");
  for (let i = 0; i < lines.length;) {
    const line = lines[i];
    let m;
    if ((m = line.match(FENCE))) {
      const fence = m[1], body = [];
      for (i++; i < lines.length && !lines[i].trim().startsWith(fence); i++) body.push(lines[i]);
      i++;  // the closing fence (absent while it streams)
      const pre = el("pre");
      if (m[2]) pre.appendChild(el("span", "lang", m[2]));
      const code = el("code", null, body.join("\n"));
      pre.appendChild(code);
      into.appendChild(pre);
    } else if (/^\s*$/.test(line)) {
      i++;
    } else if ((m = line.match(HEADING))) {
      inline(m[2], into.appendChild(el("h" + Math.min(6, m[1].length + 2))));
      i++;
    } else if (RULE.test(line)) {
      into.appendChild(el("hr"));
      i++;
    } else if (QUOTE.test(line)) {
      const body = [];
      for (; i < lines.length && QUOTE.test(lines[i]); i++) body.push(lines[i].replace(QUOTE, ""));
      const q = into.appendChild(el("blockquote"));
      renderMarkdown(body.join("\n"), q);
    } else if ((m = line.match(ITEM))) {
      const ordered = /\d/.test(m[2]);
      const list = into.appendChild(el(ordered ? "ol" : "ul"));
      if (ordered && parseInt(m[2], 10) !== 1) list.setAttribute("start", String(parseInt(m[2], 10)));
      let item = null, itemLines = [];
      const flush = () => { if (item) renderMarkdown(itemLines.join("\n"), item); };
      for (; i < lines.length; i++) {
        const l = lines[i];
        const im = l.match(ITEM);
        if (im && im[1].length <= m[1].length && /\d/.test(im[2]) === ordered) {
          flush();
          item = list.appendChild(el("li"));
          itemLines = [im[3]];
        } else if (/^\s*$/.test(l)) {
          if (i + 1 < lines.length && (ITEM.test(lines[i + 1]) || /^\s{2,}\S/.test(lines[i + 1]))) {
            itemLines.push("");
          } else break;
        } else if (/^\s+\S/.test(l) || !startsBlock(l)) {
          itemLines.push(l.replace(/^\s{1,4}/, ""));
        } else break;
      }
      flush();
    } else if (line.includes("|") && i + 1 < lines.length && TABLE_SEP.test(lines[i + 1])) {
      const table = into.appendChild(el("table"));
      const head = table.appendChild(el("tr"));
      for (const c of cells(line)) inline(c, head.appendChild(el("th")));
      for (i += 2; i < lines.length && lines[i].includes("|"); i++) {
        const row = table.appendChild(el("tr"));
        for (const c of cells(lines[i])) inline(c, row.appendChild(el("td")));
      }
    } else {
      const p = into.appendChild(el("p"));
      const body = [];
      for (; i < lines.length && !/^\s*$/.test(lines[i]) && (body.length === 0 || !startsBlock(lines[i])); i++) {
        body.push(lines[i]);
      }
      body.forEach((l, k) => {
        if (k > 0) p.appendChild(el("br"));
        inline(l, p);
      });
    }
  }
}

// ---- Conversations, kept in local storage ----
function loadState() {
  try {
    const s = JSON.parse(localStorage.getItem(STORE));
    if (s && Array.isArray(s.conversations)) return s;
  } catch (e) { /* a damaged entry starts afresh */ }
  return { conversations: [], current: null };
}
const state = loadState();
function save() {
  try { localStorage.setItem(STORE, JSON.stringify(state)); } catch (e) { /* full: keep going */ }
}
function current() {
  let c = state.conversations.find((x) => x.id === state.current);
  if (!c) {
    c = { id: Date.now().toString(36) + Math.random().toString(36).slice(2, 6), title: "",
          system: "", messages: [] };
    state.conversations.unshift(c);
    state.current = c.id;
  }
  return c;
}

function renderConversations() {
  const list = $("conversations");
  list.replaceChildren();
  for (const c of state.conversations) {
    if (!c.messages.length && c.id !== state.current) continue;
    const b = el("button", "conv" + (c.id === state.current ? " current" : ""), c.title || "New chat");
    b.type = "button";
    b.title = c.title || "New chat";
    b.addEventListener("click", () => {
      if (controller) return;
      state.current = c.id;
      save();
      renderAll();
    });
    list.appendChild(b);
  }
}

function figuresText(f) {
  const parts = [];
  if (f.ttft !== undefined) parts.push("TTFT " + f.ttft.toFixed(2) + " s");
  if (f.tps !== undefined) parts.push(f.tps.toFixed(1) + " tok/s");
  if (f.tokens !== undefined) parts.push(f.tokens + " tokens");
  if (f.cached) parts.push(f.cached + " prompt tokens cached");
  return parts.join(" \u00b7 ");
}

function copyText(text, button) {
  const done = () => { button.textContent = "Copied"; setTimeout(() => { button.textContent = "Copy"; }, 1500); };
  if (navigator.clipboard && window.isSecureContext) {
    navigator.clipboard.writeText(text).then(done, () => fallbackCopy(text, done));
  } else {
    fallbackCopy(text, done);
  }
}
function fallbackCopy(text, done) {
  const t = el("textarea");
  t.value = text;
  document.body.appendChild(t);
  t.select();
  document.execCommand("copy");
  t.remove();
  done();
}

// One message's element; assistant replies get their figures and buttons.
function messageView(m, index, conv) {
  if (m.role === "user") {
    const div = el("div", "msg user" + (m.failed ? " failed" : ""), m.content);
    return div;
  }
  const div = el("div", "msg assistant");
  div.dataset.state = "done";
  const body = div.appendChild(el("div", "body"));
  renderMarkdown(m.content, body);
  const meta = div.appendChild(el("div", "meta"));
  meta.appendChild(el("span", "figures", m.figures ? figuresText(m.figures) : ""));
  const copy = meta.appendChild(el("button", "copy", "Copy"));
  copy.type = "button";
  copy.addEventListener("click", () => copyText(m.content, copy));
  const lastReply = conv.messages.map((x) => x.role).lastIndexOf("assistant") === index;
  if (lastReply && index === conv.messages.length - 1) {
    const regen = meta.appendChild(el("button", "regenerate", "Regenerate"));
    regen.type = "button";
    regen.addEventListener("click", regenerate);
  }
  return div;
}

function renderAll() {
  const conv = current();
  const log = $("log");
  log.replaceChildren();
  $("system").value = conv.system || "";
  if (conv.system) $("system-box").open = true;
  if (!conv.messages.length) {
    log.appendChild(el("div", null, "Ask anything. Replies stream in as the model writes them.")).id = "empty";
  }
  conv.messages.forEach((m, i) => {
    log.appendChild(messageView(m, i, conv));
    if (m.failed && m.error) log.appendChild(el("div", "msg error", m.error));
  });
  log.scrollTop = log.scrollHeight;
  renderConversations();
}

// ---- Talking to the server ----
function headers() {
  const h = { "Content-Type": "application/json" };
  if ($("api_key").value) h["Authorization"] = "Bearer " + $("api_key").value;
  return h;
}

// The history a request carries: failed turns are left out.
function historyOf(conv) {
  const msgs = [];
  if (conv.system) msgs.push({ role: "system", content: conv.system });
  for (const m of conv.messages) {
    if (!m.failed) msgs.push({ role: m.role, content: m.content });
  }
  return msgs;
}

function requestBody(conv, chat) {
  const body = {
    model: modelId, stream: true, stream_options: { include_usage: true },
    temperature: Number($("temperature").value), top_p: Number($("top_p").value),
    top_k: Number($("top_k").value), max_tokens: Number($("max_tokens").value),
  };
  if ($("seed").value !== "") body.seed = Number($("seed").value);
  if (chat) body.messages = historyOf(conv);
  else body.prompt = conv.messages[conv.messages.length - 1].content;
  return body;
}

// Streams a reply to the conversation's last user message.
async function reply() {
  const conv = current();
  const user = conv.messages[conv.messages.length - 1];
  const chat = $("endpoint").value === "chat";
  const msg = { role: "assistant", content: "" };
  const view = messageView(msg, conv.messages.length, conv);
  view.dataset.state = "streaming";
  const body = view.querySelector(".body");
  const figures = view.querySelector(".figures");
  $("empty") && $("empty").remove();
  $("log").appendChild(view);
  controller = new AbortController();
  $("stop").disabled = false;
  $("send").disabled = true;
  const started = performance.now();
  let first = null, lastAt = null, usage = null, pending = false;
  const paint = () => {
    pending = false;
    renderMarkdown(msg.content, body);
    $("log").scrollTop = $("log").scrollHeight;
  };
  try {
    const res = await fetch(chat ? "/v1/chat/completions" : "/v1/completions", {
      method: "POST", headers: headers(), body: JSON.stringify(requestBody(conv, chat)),
      signal: controller.signal,
    });
    if (!res.ok) {
      const err = await res.json().catch(() => ({}));
      throw new Error((err.error && err.error.message) || ("HTTP " + res.status));
    }
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const event = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        if (!event.startsWith("data: ")) continue;
        const data = event.slice(6);
        if (data === "[DONE]") continue;
        const chunk = JSON.parse(data);
        if (chunk.error) throw new Error(chunk.error.message);
        if (chunk.usage) usage = chunk.usage;
        for (const c of chunk.choices || []) {
          const piece = chat ? ((c.delta && c.delta.content) || "") : (c.text || "");
          if (piece) {
            if (first === null) first = performance.now();
            lastAt = performance.now();
            msg.content += piece;
          }
        }
        if (!pending) { pending = true; requestAnimationFrame(paint); }
      }
    }
    paint();
    view.dataset.state = "done";
  } catch (e) {
    if (e.name === "AbortError") {
      paint();
      view.dataset.state = "done";
    } else {
      // A failed turn leaves the history: it is shown, but not sent again.
      view.remove();
      user.failed = true;
      user.error = String(e.message || e);
      conv.messages.length = conv.messages.indexOf(user) + 1;
      controller = null;
      $("stop").disabled = true;
      $("send").disabled = false;
      save();
      renderAll();
      const last = $("log").lastElementChild;
      if (last) last.dataset.state = "error";
      return;
    }
  }
  controller = null;
  $("stop").disabled = true;
  $("send").disabled = false;
  const f = {};
  if (first !== null) f.ttft = (first - started) / 1000;
  if (usage) {
    f.tokens = usage.completion_tokens;
    const details = usage.prompt_tokens_details;
    if (details && details.cached_tokens) f.cached = details.cached_tokens;
  }
  if (f.tokens > 1 && lastAt > first) f.tps = (f.tokens - 1) / ((lastAt - first) / 1000);
  msg.figures = f;
  figures.textContent = figuresText(f);
  conv.messages.push(msg);
  save();
  renderAll();
}

function send(text) {
  const conv = current();
  conv.system = $("system").value;
  if (!conv.title) conv.title = text.slice(0, 60);
  conv.messages.push({ role: "user", content: text });
  save();
  renderAll();
  reply();
}

function regenerate() {
  if (controller) return;
  const conv = current();
  if (conv.messages.length && conv.messages[conv.messages.length - 1].role === "assistant") {
    conv.messages.pop();
  }
  const last = conv.messages[conv.messages.length - 1];
  if (!last || last.role !== "user") return;
  last.failed = false;
  delete last.error;
  save();
  renderAll();
  reply();
}

$("form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const text = $("input").value.trim();
  if (!text || controller) return;
  $("input").value = "";
  send(text);
});
$("input").addEventListener("keydown", (ev) => {
  if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) {
    ev.preventDefault();
    $("form").requestSubmit();
  }
});
$("stop").addEventListener("click", () => { if (controller) controller.abort(); });
$("new-chat").addEventListener("click", () => {
  if (controller) return;
  state.current = null;
  current();
  save();
  renderAll();
  $("input").focus();
});
$("system").addEventListener("change", () => { current().system = $("system").value; save(); });

// ---- The engine panel: /stats once a second, tokens/s over the last minute ----
let last = null;
const samples = [];  // [seconds since start, tokens/s], the last 60 s
function drawChart() {
  const line = $("chart-line");
  if (samples.length < 2) { line.setAttribute("points", ""); return; }
  const now = samples[samples.length - 1][0];
  const max = Math.max(1, ...samples.map((s) => s[1]));
  const pts = samples.map(([t, v]) => {
    const x = 240 - (now - t) * 4;
    const y = 62 - (v / max) * 58;
    return x.toFixed(1) + "," + y.toFixed(1);
  });
  line.setAttribute("points", pts.join(" "));
  $("chart-max").textContent = "max " + max.toFixed(1);
}
// The KV tiers under the cache (--kv-offload-gb, --kv-disk): prompt tokens found per tier,
// bytes held against the bound, and the loads' latency; a tier not configured shows "off" and
// its hit row is hidden.
function bytes(n) {
  const units = [[2 ** 30, " GiB"], [2 ** 20, " MiB"], [2 ** 10, " KiB"]];
  for (const [size, unit] of units) if (n >= size) return (n / size).toFixed(1) + unit;
  return n + " B";
}
function showTiers(s) {
  const tokens = (n) => n + " tokens";
  const pool = s.prefix_cache_pool_hit_tokens;
  $("hits-pool").textContent = pool === undefined ? "-" : tokens(pool);
  for (const [name, tier] of [["host", s.kv_host], ["disk", s.kv_disk]]) {
    document.querySelector("tr.tier-" + name).hidden = !tier;
    $("hits-" + name).textContent = tier ? tokens(tier.hit_tokens) : "off";
    $(name).textContent = tier ? bytes(tier.bytes) + " / " + bytes(tier.max_bytes) : "off";
  }
  const l = s.kv_loads;
  document.querySelector("tr.tier-any").hidden = !l;
  $("loads").textContent = !l ? "off" : l.loads === 0 ? "none yet"
      : "mean " + (1000 * l.seconds / l.loads).toFixed(1) + " ms, last " +
        (1000 * l.last_seconds).toFixed(1) + " ms (" + l.loads + ")";
  $("recomputed").textContent = s.recomputed_tokens === undefined ? "-"
      : tokens(s.recomputed_tokens);
}
async function poll() {
  try {
    const res = await fetch("/stats", { headers: headers() });
    if (!res.ok) return;  // with --api-key: until the key is typed in
    let s = await res.json();
    if (s.models) {  // a server of several models: the figures of the one picked
      for (const o of $("model-pick").options) {
        const st = (s.models[o.value] || {}).state;
        if (st) o.textContent = o.value + (st !== "loaded" ? " (" + st + ")" : "");
      }
      const m = s.models[modelId] || {};
      if (m.running === undefined) {  // not loaded (yet)
        last = null;
        $("running").textContent = m.state || "-";
        return;
      }
      s = Object.assign({}, s, m);
    }
    if (last) {
      const dt = s.uptime_s - last.uptime_s;
      if (dt > 0) {
        const tps = Math.max(0, (s.generated_tokens - last.generated_tokens) / dt);
        $("tps").textContent = tps.toFixed(1);
        samples.push([s.uptime_s, tps]);
        while (samples.length && s.uptime_s - samples[0][0] > 60) samples.shift();
        drawChart();
      }
    }
    last = s;
    $("running").textContent = s.running;
    $("waiting").textContent = s.waiting;
    $("kv").textContent = (100 * s.kv_utilization).toFixed(1) + "%";
    $("blocks").textContent = s.kv_blocks_used + " / " + s.kv_blocks_total;
    $("hits").textContent = (100 * s.prefix_cache_hit_rate).toFixed(1) + "%";
    $("preempt").textContent = s.preemptions;
    showTiers(s);
    $("spec").textContent = s.spec_proposed_tokens > 0
        ? (100 * s.spec_acceptance_rate).toFixed(1) + "% (" +
          s.spec_mean_accepted_length.toFixed(2) + " tok/step)"
        : "off";
  } catch (e) { /* the server may be restarting */ }
}
// The model requests name, and the endpoint its template allows (a model not loaded yet says
// nothing of its template: chat is kept).
function pickModel(list, id) {
  const m = list.find((x) => x.id === id) || {};
  modelId = id;
  last = null;
  $("model").textContent = modelId;
  if (m.chat_template === false) $("endpoint").value = "completions";
  else if (m.chat_template === true) $("endpoint").value = "chat";
}
async function init() {
  renderAll();
  try {
    const res = await fetch("/v1/models", { headers: headers() });
    const models = await res.json();
    if (models.data && models.data.length) pickModel(models.data, models.data[0].id);
    if (models.data && models.data.length > 1) {
      // Several models (or LoRA adapters): a list to pick from; a model on disk loads when
      // the first message names it.
      const pick = $("model-pick");
      for (const m of models.data) {
        const label = m.id + (m.state && m.state !== "loaded" ? " (" + m.state + ")" : "");
        pick.appendChild(el("option", null, label)).value = m.id;
      }
      pick.hidden = false;
      pick.addEventListener("change", () => pickModel(models.data, pick.value));
    }
  } catch (e) { /* shown when sending */ }
  poll();
  setInterval(poll, 1000);
}
init();
