"""The web page at "/", loaded in headless Chromium (Debian's `chromium`), driven over the
DevTools protocol on a pipe (--remote-debugging-pipe: no extra Python package): type a message,
press Send, and watch the reply stream in. A screenshot is saved as a test artifact."""
import base64
import fcntl
import json
import os
import pathlib
import shutil
import subprocess
import tempfile
import time

import pytest

from server_util import ROOT, SMOLLM, Server, need

ARTIFACTS = pathlib.Path(os.environ.get("PAGODA_ARTIFACTS_DIR", ROOT / "build" / "test-artifacts"))


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
