// The web page (see web_page.h), kept as one raw string: no build step, no external files.
#include "server/web_page.h"

namespace pagoda::server {

std::string_view web_page_html() {
  static constexpr std::string_view kPage = R"PAGE(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>pagoda</title>
<style>
  body { font-family: system-ui, sans-serif; margin: 0; display: flex; height: 100vh; color: #222; }
  main { flex: 1; display: flex; flex-direction: column; padding: 12px; min-width: 0; }
  aside { width: 250px; padding: 12px; background: #f4f4f6; border-left: 1px solid #ddd;
          font-size: 14px; overflow-y: auto; }
  #log { flex: 1; overflow-y: auto; border: 1px solid #ddd; border-radius: 6px; padding: 8px; }
  .msg { margin: 6px 0; white-space: pre-wrap; }
  .user { color: #114; font-weight: 600; }
  .assistant { color: #222; }
  .error { color: #a00; }
  form { display: flex; gap: 6px; margin-top: 8px; }
  #input { flex: 1; padding: 8px; font-size: 15px; }
  label { display: block; margin: 6px 0 2px; }
  aside input { width: 100%; box-sizing: border-box; }
  table { width: 100%; border-collapse: collapse; }
  td { padding: 2px 0; } td.v { text-align: right; font-variant-numeric: tabular-nums; }
  h1 { font-size: 18px; margin: 0 0 8px; }
</style>
</head>
<body>
<main>
  <h1>pagoda <span id="model" style="font-weight: normal; color: #666"></span></h1>
  <div id="log"></div>
  <form id="form">
    <input id="input" autocomplete="off" placeholder="Type a message and press Enter">
    <button id="send" type="submit">Send</button>
    <button id="stop" type="button" disabled>Stop</button>
  </form>
</main>
<aside>
  <h1>Settings</h1>
  <label>Endpoint <select id="endpoint"><option value="chat">chat</option>
    <option value="completions">completions</option></select></label>
  <label>Temperature <input id="temperature" type="number" value="0.7" min="0" max="2" step="0.1"></label>
  <label>Top p <input id="top_p" type="number" value="0.95" min="0.01" max="1" step="0.01"></label>
  <label>Top k <input id="top_k" type="number" value="40" min="0" step="1"></label>
  <label>Max tokens <input id="max_tokens" type="number" value="128" min="1" step="1"></label>
  <label>Seed (empty: random) <input id="seed" type="number"></label>
  <label>API key <input id="api_key" type="password"></label>
  <h1 style="margin-top: 16px">Engine</h1>
  <table>
    <tr><td>tokens/s</td><td class="v" id="tps">-</td></tr>
    <tr><td>running</td><td class="v" id="running">-</td></tr>
    <tr><td>waiting</td><td class="v" id="waiting">-</td></tr>
    <tr><td>KV utilization</td><td class="v" id="kv">-</td></tr>
    <tr><td>KV blocks used</td><td class="v" id="blocks">-</td></tr>
    <tr><td>prefix-cache hits</td><td class="v" id="hits">-</td></tr>
    <tr><td>preemptions</td><td class="v" id="preempt">-</td></tr>
    <tr><td>speculation accepted</td><td class="v" id="spec">-</td></tr>
  </table>
</aside>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
const history = [];
let controller = null;
let modelId = null;

function addMessage(role, text) {
  const div = document.createElement("div");
  div.className = "msg " + role;
  div.textContent = text;
  $("log").appendChild(div);
  $("log").scrollTop = $("log").scrollHeight;
  return div;
}

function headers() {
  const h = { "Content-Type": "application/json" };
  if ($("api_key").value) h["Authorization"] = "Bearer " + $("api_key").value;
  return h;
}

function requestBody(text) {
  const body = {
    model: modelId, stream: true,
    temperature: Number($("temperature").value), top_p: Number($("top_p").value),
    top_k: Number($("top_k").value), max_tokens: Number($("max_tokens").value),
  };
  if ($("seed").value !== "") body.seed = Number($("seed").value);
  if ($("endpoint").value === "chat") body.messages = history.slice();
  else body.prompt = text;
  return body;
}

async function send(text) {
  history.push({ role: "user", content: text });
  addMessage("user", text);
  const out = addMessage("assistant", "");
  out.dataset.state = "streaming";
  const chat = $("endpoint").value === "chat";
  controller = new AbortController();
  $("stop").disabled = false;
  $("send").disabled = true;
  let reply = "";
  try {
    const res = await fetch(chat ? "/v1/chat/completions" : "/v1/completions", {
      method: "POST", headers: headers(), body: JSON.stringify(requestBody(text)),
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
        for (const c of chunk.choices || []) {
          reply += chat ? (c.delta.content || "") : (c.text || "");
        }
        out.textContent = reply;
        $("log").scrollTop = $("log").scrollHeight;
      }
    }
    out.dataset.state = "done";
  } catch (e) {
    out.dataset.state = "error";
    if (e.name !== "AbortError") addMessage("error", String(e.message || e));
  } finally {
    history.push({ role: "assistant", content: reply });
    controller = null;
    $("stop").disabled = true;
    $("send").disabled = false;
  }
}

$("form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const text = $("input").value.trim();
  if (!text || controller) return;
  $("input").value = "";
  send(text);
});
$("stop").addEventListener("click", () => { if (controller) controller.abort(); });

let last = null;
async function poll() {
  try {
    const s = await (await fetch("/stats")).json();
    if (last) {
      const dt = s.uptime_s - last.uptime_s;
      if (dt > 0) $("tps").textContent = ((s.generated_tokens - last.generated_tokens) / dt).toFixed(1);
    }
    last = s;
    $("running").textContent = s.running;
    $("waiting").textContent = s.waiting;
    $("kv").textContent = (100 * s.kv_utilization).toFixed(1) + "%";
    $("blocks").textContent = s.kv_blocks_used + " / " + s.kv_blocks_total;
    $("hits").textContent = (100 * s.prefix_cache_hit_rate).toFixed(1) + "%";
    $("preempt").textContent = s.preemptions;
    $("spec").textContent = s.spec_proposed_tokens > 0
        ? (100 * s.spec_acceptance_rate).toFixed(1) + "% (" +
          s.spec_mean_accepted_length.toFixed(2) + " tok/step)"
        : "off";
  } catch (e) { /* the server may be restarting */ }
}
async function init() {
  try {
    const res = await fetch("/v1/models", { headers: headers() });
    const models = await res.json();
    if (models.data && models.data.length) {
      modelId = models.data[0].id;
      $("model").textContent = modelId;
      if (!models.data[0].chat_template) $("endpoint").value = "completions";
    }
  } catch (e) { /* shown when sending */ }
  poll();
  setInterval(poll, 1000);
}
init();
</script>
</body>
</html>
)PAGE";
  return kPage;
}

}  // namespace pagoda::server
