"""Starting and stopping a real `pagoda serve` process for tests: on a free loopback port (the
server picks it with --port 0 and prints it), waiting until /health answers."""
import json
import os
import pathlib
import re
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parents[2]
SMOLLM = ROOT / "models" / "smollm2-135m-instruct-q4_1.gguf"
GEMMA = ROOT / "models" / "gemma-3-270m-q4_k_m.gguf"
# The chat model scripts/setup installs (docs/chat_models/README.md).
QWEN = ROOT / "models" / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"


class Server:
    """A running `pagoda serve`; `url` is its base URL. Stderr is collected in `log`."""

    def __init__(self, pagoda_bin, model, *args, timeout=120, launcher=()):
        """`launcher`: words before the binary (mpirun and its options); `model` None: no -m
        (a server of --models-dir)."""
        model_args = [] if model is None else ["-m", str(model)]
        cmd = [*map(str, launcher), str(pagoda_bin), "serve", *model_args, "--port", "0",
               *map(str, args)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     text=True)
        self.log = []
        self._port = None
        self._ready = threading.Event()
        threading.Thread(target=self._read_stderr, daemon=True).start()
        if not self._ready.wait(timeout) or self._port is None:
            self.stop()
            raise RuntimeError("pagoda serve did not start:\n" + "".join(self.log))
        self.url = f"http://127.0.0.1:{self._port}"
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=5) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError("pagoda serve did not answer /health:\n" + "".join(self.log))

    def _read_stderr(self):
        for line in self.proc.stderr:
            self.log.append(line)
            m = re.search(r" on http://(?:\[[^\]]*\]|[^:/ ]+):(\d+) ", line)
            if m and self._port is None:
                self._port = int(m.group(1))
                self._ready.set()
        self._ready.set()

    def metrics(self):
        with urllib.request.urlopen(self.url + "/metrics", timeout=10) as r:
            return r.read().decode()

    def metric(self, name):
        for line in self.metrics().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        raise KeyError(name)

    def terminate(self, timeout=60):
        """SIGTERM, then the exit code."""
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)


def need(path):
    import pytest
    if not path.exists():
        pytest.skip(f"*** {path} is absent: run scripts/setup; SKIPPING ***")
    return path


def chat_model():
    """The chat model setup installs; SmolLM2 (the small instruct model) on a checkout set up
    before Qwen2.5-Coder-0.5B became the default."""
    return QWEN if QWEN.exists() else need(SMOLLM)


def post_json(server, path, payload, timeout=60):
    """POSTs payload as JSON; returns (status, parsed body), for error statuses too."""
    req = urllib.request.Request(server.url + path, data=json.dumps(payload).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def wait_for(predicate, seconds):
    """Polls predicate every 50 ms until it holds (True) or seconds pass (False)."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False
