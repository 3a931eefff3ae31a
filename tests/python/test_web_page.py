"""The web page at "/", loaded in headless Chromium (Debian's `chromium`), driven over the
DevTools protocol on a pipe (--remote-debugging-pipe: no extra Python package, no driver
binary): type a message, press Send, and watch the reply stream in; Markdown rendered with every
model-produced string kept as text (a reply carrying <script> or an onerror handler runs
nothing); system prompt, New chat, Regenerate, Copy, per-reply figures, conversations kept in
local storage, a failed turn left out of the next request, the engine panel and its chart.

Screenshots of an empty page, a streamed Markdown answer and an error are written to
$PAGODA_SCREENSHOTS_DIR (scripts/screenshots sets it to docs/images), else to the test
artifacts."""
import base64
import fcntl
import json
import os
import pathlib
import re
import select
import shutil
import subprocess
import tempfile
import time

import pytest

from server_util import ROOT, SMOLLM, Server, chat_model, need, post_json

ARTIFACTS = pathlib.Path(os.environ.get("PAGODA_ARTIFACTS_DIR", ROOT / "build" / "test-artifacts"))
SCREENSHOTS = pathlib.Path(os.environ.get("PAGODA_SCREENSHOTS_DIR", ARTIFACTS))


def high_fd(fd):
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD, 10)
    os.close(fd)
    return moved


class Browser:
    """Chromium with the DevTools protocol on fds 3 (commands in) and 4 (replies out)."""

    def __init__(self):
        exe = shutil.which("chromium") or shutil.which("chromium-browser")
        if exe is None:
            pytest.skip("*** chromium is not installed (scripts/setup installs it); SKIPPING ***")
        self.profile = tempfile.mkdtemp(prefix="pagoda-chromium-")
        to_chrome_r, self.to_chrome = os.pipe()
        self.from_chrome, from_chrome_w = os.pipe()
        # Move the child's ends above 4 so the dup2s below cannot overwrite one another.
        to_chrome_r = high_fd(to_chrome_r)
        from_chrome_w = high_fd(from_chrome_w)

        def child_fds():
            os.dup2(to_chrome_r, 3)
            os.dup2(from_chrome_w, 4)

        self.proc = subprocess.Popen(
            [exe, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
             "--no-first-run", "--user-data-dir=" + self.profile, "--window-size=1100,700",
             "about:blank"],
            preexec_fn=child_fds, pass_fds=(3, 4),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self.next_id = 0
        self.buffer = b""
        self.session = None

    def send(self, method, params=None, session=True):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session and self.session:
            msg["sessionId"] = self.session
        os.write(self.to_chrome, json.dumps(msg).encode() + b"\0")
        while True:
            reply = self._read()
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]

    def _read(self):
        while b"\0" not in self.buffer:
            # A page that stops answering (a dialog left open) fails the test, not the run.
            if not select.select([self.from_chrome], [], [], 60)[0]:
                raise RuntimeError("chromium sent nothing for 60 s")
            chunk = os.read(self.from_chrome, 1 << 16)
            if not chunk:
                raise RuntimeError("chromium closed the DevTools pipe")
            self.buffer += chunk
        msg, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(msg)

    def open(self, url):
        target = self.send("Target.createTarget", {"url": url}, session=False)["targetId"]
        self.session = self.send("Target.attachToTarget",
                                 {"targetId": target, "flatten": True}, session=False)["sessionId"]

    def eval(self, expression):
        r = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                           "awaitPromise": True})
        return r["result"].get("value")

    def close(self):
        self.proc.kill()
        self.proc.wait(30)
        os.close(self.to_chrome)
        os.close(self.from_chrome)
        shutil.rmtree(self.profile, ignore_errors=True)


def wait_until(predicate, timeout=60, interval=0.05):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    return None


def test_chat_page_streams_a_reply(pagoda_bin):
    server = Server(pagoda_bin, need(SMOLLM), "-t", "2", "--kv-tokens", "4096")
    browser = Browser()
    try:
        browser.open(server.url + "/")
        assert wait_until(lambda: browser.eval("document.readyState") == "complete")
        assert wait_until(lambda: browser.eval("document.getElementById('model').textContent"))
        browser.eval("""
            document.getElementById('temperature').value = '0';
            document.getElementById('max_tokens').value = '48';
            document.getElementById('input').value = 'Write a short poem about the sea.';
            document.getElementById('send').click();""")
        reply = "document.querySelector('.msg.assistant')"
        lengths = []

        def finished():
            state = browser.eval(f"{reply} && {reply}.dataset.state")
            lengths.append(browser.eval(f"{reply} ? {reply}.textContent.length : 0"))
            return state in ("done", "error") and state

        assert wait_until(finished, timeout=120) == "done", browser.eval(
            "document.getElementById('log').innerText")
        text = browser.eval(f"{reply}.textContent")
        assert len(text.strip()) > 10, text
        growing = sorted(set(n for n in lengths if 0 < n < len(text)))
        assert growing, f"the reply never appeared part-way (lengths seen: {lengths})"
        # The engine figures come from /stats once a second.
        assert wait_until(lambda: browser.eval("document.getElementById('kv').textContent") != "-",
                          timeout=10)
        shot = browser.send("Page.captureScreenshot", {"format": "png"})["data"]
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        (ARTIFACTS / "web_page.png").write_bytes(base64.b64decode(shot))
    finally:
        browser.close()
        server.stop()


def screenshot(browser, name):
    shot = browser.send("Page.captureScreenshot", {"format": "png"})["data"]
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    (SCREENSHOTS / name).write_bytes(base64.b64decode(shot))


# Replaces the page's fetch for the chat route with one that streams `window.canned` as SSE
# chunks (a reply with exactly the text a test needs), and records every request body sent.
CANNED_FETCH = r"""
window.sent = [];
window.realFetch = window.realFetch || window.fetch;
window.fetch = (url, opts) => {
  if (String(url).includes('/v1/chat/completions')) {
    window.sent.push(JSON.parse(opts.body));
    if (window.canned !== undefined) {
      const enc = new TextEncoder();
      const pieces = window.canned.match(/[\s\S]{1,7}/g) || [];
      const body = new ReadableStream({
        start(c) {
          for (const p of pieces) {
            c.enqueue(enc.encode('data: ' + JSON.stringify(
              {choices: [{index: 0, delta: {content: p}}]}) + '\n\n'));
          }
          c.enqueue(enc.encode('data: ' + JSON.stringify({choices: [], usage: {
            prompt_tokens: 9, completion_tokens: pieces.length, total_tokens: 9 + pieces.length,
            prompt_tokens_details: {cached_tokens: 0}}}) + '\n\ndata: [DONE]\n\n'));
          c.close();
        }});
      return Promise.resolve(new Response(body, {status: 200,
          headers: {'Content-Type': 'text/event-stream'}}));
    }
  }
  return window.realFetch(url, opts);
};
window.alerted = 0;
window.alert = () => { window.alerted++; };
"""

HOSTILE = """**Bold** and *emphasis* and `code`.

## A heading

- one
- two <img src=x onerror="window.pwned=1">

```python
print("<script>window.pwned=2</script>")
```

<script>window.pwned=3</script> [click](javascript:window.pwned=4) <b onmouseover=alert(1)>b</b>
"""


def reload(browser, ready):
    """Reloads the page and waits until the JavaScript expression `ready` is true (evaluations
    during the navigation fail: they are retried)."""
    def check():
        try:
            return browser.eval("document.readyState") == "complete" and browser.eval(ready)
        except RuntimeError:
            return False
    try:
        browser.eval("setTimeout(() => location.reload(), 0)")
    except RuntimeError:
        pass
    time.sleep(0.5)
    assert wait_until(check, timeout=30), ready


def ask(browser, text):
    browser.eval(f"document.getElementById('input').value = {json.dumps(text)};"
                 "document.getElementById('send').click();")


def last_state(browser):
    return browser.eval("""(() => { const m = document.querySelectorAll('#log .msg');
        return m.length ? m[m.length - 1].dataset.state || m[m.length - 1].className : ''; })()""")


@pytest.fixture(scope="module")
def page(pagoda_bin):
    model = chat_model()
    server = Server(pagoda_bin, model, "-t", "2", "--kv-tokens", "8192")
    browser = Browser()
    try:
        browser.open(server.url + "/")
        assert wait_until(lambda: browser.eval("document.readyState") == "complete")
        assert wait_until(lambda: browser.eval("document.getElementById('model').textContent"))
        yield browser, server
    finally:
        browser.close()
        server.stop()


def test_empty_page_and_engine_panel(page):
    browser, _ = page
    browser.eval("localStorage.clear()")
    reload(browser, "!!document.getElementById('empty') && !!document.getElementById('model')"
                    ".textContent")
    for control in ("new-chat", "system", "input", "send", "stop", "chart"):
        assert browser.eval(f"!!document.getElementById('{control}')"), control
    # The panel polls /stats once a second; after two polls the chart has a line.
    assert wait_until(lambda: browser.eval("document.getElementById('kv').textContent") != "-",
                      timeout=10)
    assert wait_until(lambda: browser.eval(
        "document.getElementById('chart-line').getAttribute('points')"), timeout=10)
    for figure in ("tps", "running", "waiting", "hits", "preempt", "disk"):
        assert browser.eval(f"document.getElementById('{figure}').textContent") != "-", figure
    screenshot(browser, "web-empty.png")


def test_markdown_is_rendered_and_model_text_never_runs(page):
    browser, _ = page
    browser.eval(CANNED_FETCH + f"window.canned = {json.dumps(HOSTILE)};")
    browser.eval("document.getElementById('new-chat').click();")
    ask(browser, "Show me some markdown")
    assert wait_until(lambda: last_state(browser) == "done", timeout=30)
    reply = "document.querySelector('.msg.assistant:last-of-type .body')"
    reply = "[...document.querySelectorAll('.msg.assistant .body')].pop()"
    assert browser.eval(f"{reply}.querySelector('strong').textContent") == "Bold"
    assert browser.eval(f"{reply}.querySelector('em').textContent") == "emphasis"
    assert browser.eval(f"{reply}.querySelector('h4, h3, h5').textContent") == "A heading"
    assert browser.eval(f"{reply}.querySelectorAll('li').length") == 2
    code = browser.eval(f"{reply}.querySelector('pre code').textContent")
    assert code == 'print("<script>window.pwned=2</script>")'
    # Every tag the model wrote is text on the page: no element was made from it, nothing ran.
    text = browser.eval(f"{reply}.textContent")
    assert '<img src=x onerror="window.pwned=1">' in text
    assert "<script>window.pwned=3</script>" in text
    for tag in ("img", "script", "b"):
        assert browser.eval(f"{reply}.querySelectorAll('{tag}').length") == 0, tag
    assert browser.eval(f"{reply}.querySelectorAll('a').length") == 0  # javascript: is no link
    browser.eval(f"{reply}.querySelectorAll('li')[1].dispatchEvent(new MouseEvent('mouseover'))")
    time.sleep(0.3)
    assert browser.eval("window.pwned === undefined && window.alerted === 0")
    # Per-reply figures, Copy and Regenerate.
    figures = browser.eval("[...document.querySelectorAll('.msg.assistant .figures')].pop()"
                           ".textContent")
    assert "TTFT" in figures and "tokens" in figures, figures
    browser.eval("[...document.querySelectorAll('.msg.assistant .copy')].pop().click()")
    assert wait_until(lambda: browser.eval(
        "[...document.querySelectorAll('.msg.assistant .copy')].pop().textContent") == "Copied",
        timeout=5)
    browser.eval("window.canned = 'Another **answer**';"
                 "document.querySelector('.msg.assistant .regenerate').click();")
    assert wait_until(lambda: browser.eval(
        f"{reply} && {reply}.textContent") == "Another answer", timeout=30)
    assert browser.eval("document.querySelectorAll('.msg.assistant').length") == 1
    assert browser.eval("window.sent.length") == 2
    assert browser.eval("window.sent[1].messages.length") == 1  # the replaced reply is not sent


def test_system_prompt_storage_and_a_failed_turn(page):
    browser, _ = page
    browser.eval(CANNED_FETCH + "window.canned = undefined;")  # the real server from here on
    browser.eval("document.getElementById('new-chat').click();")
    browser.eval("""document.getElementById('system-box').open = true;
        document.getElementById('system').value = 'Answer in one short sentence.';
        document.getElementById('temperature').value = '0';
        document.getElementById('max_tokens').value = '100000';""")  # more than the context
    ask(browser, "What is the capital of France?")
    assert wait_until(lambda: browser.eval("!!document.querySelector('.msg.error')"), timeout=60)
    error = browser.eval("document.querySelector('.msg.error').textContent")
    assert "max_tokens" in error or "context" in error, error
    assert browser.eval("document.querySelector('.msg.user').classList.contains('failed')")
    screenshot(browser, "web-error.png")

    browser.eval("document.getElementById('max_tokens').value = '64';")
    ask(browser, "What is the capital of France?")
    assert wait_until(lambda: last_state(browser) == "done", timeout=120)
    sent = browser.eval("window.sent[window.sent.length - 1].messages")
    # The system prompt first; the failed turn is not in the history that is sent.
    assert [m["role"] for m in sent] == ["system", "user"], sent
    assert sent[0]["content"] == "Answer in one short sentence."
    assert "Paris" in browser.eval("[...document.querySelectorAll('.msg.assistant')].pop()"
                                   ".textContent")
    # Conversations survive a reload (local storage); New chat starts an empty one.
    conversations = browser.eval("document.querySelectorAll('#conversations .conv').length")
    reload(browser, "document.querySelectorAll('.msg.assistant').length > 0 && "
                    "!!document.getElementById('model').textContent")
    assert browser.eval("document.getElementById('system').value") == \
        "Answer in one short sentence."
    assert browser.eval("document.querySelectorAll('#conversations .conv').length") == \
        conversations
    browser.eval("document.getElementById('new-chat').click();")
    assert browser.eval("!!document.getElementById('empty')")


def test_a_streamed_markdown_answer(page):
    browser, _ = page
    browser.eval(CANNED_FETCH + "window.canned = undefined;")
    browser.eval("""document.getElementById('new-chat').click();
        document.getElementById('system').value = '';
        document.getElementById('temperature').value = '0';
        document.getElementById('max_tokens').value = '120';""")
    ask(browser, "Write a Python function that reverses a list, in a code block, then explain it "
                 "in two sentences.")
    reply = "[...document.querySelectorAll('.msg.assistant')].pop()"
    assert wait_until(lambda: last_state(browser) == "done", timeout=500)
    assert browser.eval(f"{reply}.querySelectorAll('pre code').length") >= 1, browser.eval(
        f"{reply}.textContent")
    assert "```" not in browser.eval(f"{reply}.textContent")
    assert "tok/s" in browser.eval(f"{reply}.querySelector('.figures').textContent")
    time.sleep(2)  # the chart shows the reply's tokens/s
    screenshot(browser, "web-markdown.png")


def test_a_server_of_several_models_lets_the_page_pick_one(pagoda_bin, shared_dir, tmp_path):
    folder = tmp_path / "models"
    folder.mkdir()
    for name in ("stories260K.gguf",):
        (folder / name).symlink_to(need(shared_dir / "models" / name))
    (folder / "smol.gguf").symlink_to(need(SMOLLM))
    server = Server(pagoda_bin, None, "--models-dir", folder, "--kv-cache-gb", "0.05")
    browser = Browser()
    try:
        browser.open(server.url + "/")
        assert wait_until(lambda: browser.eval("document.getElementById('model').textContent"))
        options = browser.eval("[...document.getElementById('model-pick').options]"
                               ".map((o) => o.value).join(',')")
        assert options == "smol,stories260K"
        assert not browser.eval("document.getElementById('model-pick').hidden")
        browser.eval("""const p = document.getElementById('model-pick');
            p.value = 'stories260K'; p.dispatchEvent(new Event('change'));
            document.getElementById('endpoint').value = 'completions';
            document.getElementById('temperature').value = '0';
            document.getElementById('max_tokens').value = '16';""")
        assert browser.eval("document.getElementById('model').textContent") == "stories260K"
        ask(browser, "Once upon a time")
        assert wait_until(lambda: last_state(browser) in ("done", "error"), timeout=120)
        assert last_state(browser) == "done", browser.eval(
            "document.getElementById('log').innerText")
        # It was loaded for that message; the option and the panel say so.
        assert wait_until(lambda: browser.eval(
            "document.getElementById('model-pick').selectedOptions[0].textContent")
            == "stories260K", timeout=10)
        assert wait_until(lambda: browser.eval("document.getElementById('kv').textContent")
                          not in ("-", "", None), timeout=10)
    finally:
        browser.close()
        server.stop()


# test_kv_offload.py's prompts: on a KV cache of 128 tokens the second evicts the first.
TIER_PROMPT = ("Once upon a time, there was a little girl named Lily. She loved to play outside "
               "in the park with her friends. One day, she saw a big red ball under a tree. She "
               "ran to the ball and picked it up. It was shiny and new.")
TIER_OTHER = ("Tom had a small dog called Max. Every morning they walked to the river and "
              "watched the boats go by. Max liked to bark at the ducks, and Tom liked to throw "
              "sticks into the water. One day a big boat came by.")


def complete_tokens(server, prompt):
    status, body = post_json(server, "/v1/completions",
                             {"prompt": prompt, "max_tokens": 4, "temperature": 0})
    assert status == 200, body


def test_the_engine_panel_shows_the_kv_tiers(pagoda_bin, shared_dir, tmp_path):
    """Prompt tokens found in host memory (--kv-offload-gb) and on disk (--kv-disk), the tiers'
    bytes against their bounds and the loads' latency, on a KV cache of 128 tokens."""
    stories = need(shared_dir / "models" / "stories260K.gguf")
    args = ("-t", "2", "--kv-tokens", "128", "--max-model-len", "256", "--kv-disk",
            str(tmp_path / "kv"))
    # A first run leaves the prompt's blocks on disk.
    server = Server(pagoda_bin, stories, *args)
    try:
        complete_tokens(server, TIER_PROMPT)
        assert server.terminate() == 0
    finally:
        server.stop()
    server = Server(pagoda_bin, stories, *args, "--kv-offload-gb", "0.01")
    browser = Browser()
    try:
        complete_tokens(server, TIER_PROMPT)  # from the disk
        complete_tokens(server, TIER_OTHER)   # evicts it into host memory
        complete_tokens(server, TIER_PROMPT)  # from host memory
        browser.open(server.url + "/")

        def text(figure):
            return browser.eval(f"document.getElementById('{figure}').textContent")

        for tier in ("host", "disk"):
            assert wait_until(lambda: re.fullmatch(r"[1-9]\d* tokens", text("hits-" + tier) or ""),
                              timeout=10), (tier, text("hits-" + tier))
            assert re.fullmatch(r"[\d.]+ [KMG]?i?B / [\d.]+ [KMG]iB", text(tier)), text(tier)
            assert browser.eval(f"document.querySelector('tr.tier-{tier}').hidden") is False
        assert re.fullmatch(r"mean [\d.]+ ms, last [\d.]+ ms \([1-9]\d*\)", text("loads")), \
            text("loads")
        assert text("recomputed") == "0 tokens"
        assert re.fullmatch(r"\d+ tokens", text("hits-pool")), text("hits-pool")
        browser.eval("document.querySelector('aside').scrollTop = 1e6")
        screenshot(browser, "web-kv-tiers.png")
    finally:
        browser.close()
        server.stop()


def test_the_engine_panel_without_tiers(page):
    browser, _ = page
    assert wait_until(lambda: browser.eval("document.getElementById('host').textContent") == "off",
                      timeout=10)
    assert browser.eval("document.getElementById('disk').textContent") == "off"
    for row in ("host", "disk", "any"):
        assert browser.eval(f"document.querySelector('tr.tier-{row}').hidden") is True, row
