// The web page (see web_page.h): the markup and style here, the script in web_page_script.cc,
// joined once. No build step, no external files, nothing fetched from elsewhere.
#include "server/web_page.h"

#include <string>

namespace pagoda::server {
namespace {

constexpr std::string_view kHead = R"PAGE(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>pagoda</title>
<style>
  * { box-sizing: border-box; }
  body { font-family: system-ui, sans-serif; margin: 0; display: flex; height: 100vh; color: #1d1d22;
         background: #fafafb; }
  nav { width: 190px; padding: 12px; background: #f0f0f3; border-right: 1px solid #ddd;
        display: flex; flex-direction: column; gap: 6px; overflow-y: auto; font-size: 14px; }
  nav button.conv { text-align: left; background: none; border: 1px solid transparent; padding: 6px;
                    border-radius: 6px; cursor: pointer; white-space: nowrap; overflow: hidden;
                    text-overflow: ellipsis; font-size: 13px; color: #333; }
  nav button.conv.current { background: #fff; border-color: #ccd; font-weight: 600; }
  main { flex: 1; display: flex; flex-direction: column; padding: 12px; min-width: 0; }
  aside { width: 250px; padding: 12px; background: #f4f4f6; border-left: 1px solid #ddd;
          font-size: 14px; overflow-y: auto; }
  h1 { font-size: 18px; margin: 0 0 8px; }
  #system-box summary { cursor: pointer; font-size: 13px; color: #555; margin-bottom: 4px; }
  #system { width: 100%; min-height: 44px; font: inherit; font-size: 14px; padding: 6px; }
  #log { flex: 1; overflow-y: auto; border: 1px solid #ddd; border-radius: 8px; padding: 10px;
         background: #fff; margin-top: 6px; }
  #empty { color: #888; text-align: center; margin-top: 18%; }
  .msg { margin: 8px 0; padding: 8px 10px; border-radius: 8px; line-height: 1.45;
         overflow-wrap: anywhere; }
  .msg.user { background: #eef1fb; white-space: pre-wrap; }
  .msg.user.failed { opacity: 0.55; text-decoration: line-through; }
  .msg.assistant { background: #fff; border: 1px solid #eee; }
  .msg.error { background: #fff0f0; color: #a00; border: 1px solid #f3c4c4; white-space: pre-wrap; }
  .msg .body > :first-child { margin-top: 0; } .msg .body > :last-child { margin-bottom: 0; }
  .msg .body p { margin: 0 0 8px; }
  .msg .body h3, .msg .body h4, .msg .body h5 { margin: 10px 0 6px; }
  .msg .body pre { background: #f4f4f6; border: 1px solid #e2e2e8; border-radius: 6px; padding: 8px;
                   overflow-x: auto; margin: 6px 0; position: relative; }
  .msg .body pre .lang { position: absolute; right: 8px; top: 4px; font-size: 11px; color: #888; }
  .msg .body code { font-family: ui-monospace, monospace; font-size: 13px; background: #f1f1f4;
                    padding: 1px 3px; border-radius: 3px; }
  .msg .body pre code { background: none; padding: 0; }
  .msg .body blockquote { border-left: 3px solid #ccd; margin: 6px 0; padding-left: 10px; color: #555; }
  .msg .body table { border-collapse: collapse; margin: 6px 0; }
  .msg .body th, .msg .body td { border: 1px solid #ddd; padding: 3px 8px; }
  .meta { display: flex; gap: 8px; align-items: center; margin-top: 6px; font-size: 12px; color: #777; }
  .meta button { font-size: 12px; padding: 1px 8px; }
  form { display: flex; gap: 6px; margin-top: 8px; align-items: flex-end; }
  #input { flex: 1; padding: 8px; font: inherit; font-size: 15px; resize: vertical; min-height: 40px; }
  label { display: block; margin: 6px 0 2px; }
  aside input, aside select { width: 100%; }
  table.figures { width: 100%; border-collapse: collapse; }
  table.figures td { padding: 2px 0; } td.v { text-align: right; font-variant-numeric: tabular-nums; }
  #chart { width: 100%; height: 64px; background: #fff; border: 1px solid #ddd; border-radius: 4px;
           margin-top: 6px; }
  .chart-label { font-size: 11px; color: #777; display: flex; justify-content: space-between; }
</style>
</head>
<body>
<nav>
  <button id="new-chat" type="button">+ New chat</button>
  <div id="conversations"></div>
</nav>
<main>
  <h1>pagoda <span id="model" style="font-weight: normal; color: #666"></span></h1>
  <details id="system-box">
    <summary>System prompt</summary>
    <textarea id="system" placeholder="Optional: how the assistant should behave"></textarea>
  </details>
  <div id="log"><div id="empty">Ask anything. Replies stream in as the model writes them.</div></div>
  <form id="form">
    <textarea id="input" rows="2" autocomplete="off"
              placeholder="Type a message; Enter sends, Shift+Enter starts a new line"></textarea>
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
  <label>Max tokens <input id="max_tokens" type="number" value="512" min="1" step="1"></label>
  <label>Seed (empty: random) <input id="seed" type="number"></label>
  <label>API key <input id="api_key" type="password"></label>
  <h1 style="margin-top: 16px">Engine</h1>
  <table class="figures">
    <tr><td>tokens/s</td><td class="v" id="tps">-</td></tr>
    <tr><td>running</td><td class="v" id="running">-</td></tr>
    <tr><td>waiting</td><td class="v" id="waiting">-</td></tr>
    <tr><td>KV utilization</td><td class="v" id="kv">-</td></tr>
    <tr><td>KV blocks used</td><td class="v" id="blocks">-</td></tr>
    <tr><td>prefix-cache hits</td><td class="v" id="hits">-</td></tr>
    <tr><td>preemptions</td><td class="v" id="preempt">-</td></tr>
    <tr><td>speculation accepted</td><td class="v" id="spec">-</td></tr>
  </table>
  <svg id="chart" viewBox="0 0 240 64" preserveAspectRatio="none" aria-label="tokens/s, last minute">
    <polyline id="chart-line" fill="none" stroke="#4a6cd4" stroke-width="1.5" points=""></polyline>
  </svg>
  <div class="chart-label"><span>tokens/s, last minute</span><span id="chart-max">max -</span></div>
</aside>
<script>
)PAGE";

constexpr std::string_view kTail = R"PAGE(
</script>
</body>
</html>
)PAGE";

}  // namespace

std::string_view web_page_html() {
  static const std::string page =
      std::string(kHead) + std::string(web_page_script()) + std::string(kTail);
  return page;
}

}  // namespace pagoda::server
