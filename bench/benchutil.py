"""Pieces shared by the benchmark scripts in bench/ (compare_llamacpp.py,
throughput_llamacpp.py, compare_serve.py, speculative.py, long_prompt_itl.py,
serve_idle_load.py): rounds that rotate which engine goes first, paired ratios and their median,
servers started and stopped, the synthetic models, and llama.cpp driven through
llama-cpp-python's low-level API.

The peers are found from arguments or the environment, never from one machine's paths:
llama-server from --llama-server or $LLAMA_SERVER; llama-cpp-python's library from its install,
or from $LLAMA_CPP_LIB_PATH (llama-cpp-python's own variable: a folder holding libllama.so).
"""
import ctypes
import json
import os
import pathlib
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED = pathlib.Path(os.environ.get("PAGODA_SHARED", ROOT.parent / "shared"))


def round_order(items, round_index):
    """`items` rotated by the round: with two engines each goes first every other round."""
    k = round_index % len(items)
    return list(items[k:]) + list(items[:k])


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else float("nan")


def ratio_summary(ratios):
    """'median (min-max)' of per-round ratios."""
    return f"{median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"


def print_table(title, columns, rows):
    """A Markdown table under a title line (none if `title` is None); `rows` are lists of cells
    already formatted."""
    if title is not None:
        print()
        print(title)
        print()
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for row in rows:
        print("| " + " | ".join(map(str, row)) + " |")


def synth_model(pagoda, like, wtype, out_dir):
    """A random-weight GGUF with a real model's shape and the Llama 3 vocabulary (made once)."""
    model = pathlib.Path(out_dir) / f"{like}-{wtype}.gguf"
    if not model.exists():
        vocab = SHARED / "testdata" / "vocab" / "ggml-vocab-llama-bpe.gguf"
        print(f"synth {model.name} ...", flush=True)
        subprocess.run([pagoda, "synth", "--like", like, "--type", wtype, "--vocab", vocab,
                        "-o", model], check=True)
    return model


def llama_server_path(given):
    path = given or os.environ.get("LLAMA_SERVER")
    if not path:
        sys.exit("give llama.cpp's llama-server with --llama-server PATH or $LLAMA_SERVER")
    return path


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pagoda_serve_cmd(pagoda, model, threads, kv_tokens, batch, max_seqs=None, kv_type="f16",
                     extra=()):
    """A function of the port: `pagoda serve` with this KV memory, step budget and slots, then
    `extra`. With max_seqs or kv_type None the build's default stands; builds from before the
    access log have no --log-format, and are not given it."""
    kv = ["--kv-type", kv_type] if kv_type is not None else []
    seqs = ["--max-seqs", str(max_seqs)] if max_seqs is not None else []
    help_text = subprocess.run([pagoda, "serve", "--help"], capture_output=True, text=True).stdout
    log = ["--log-format", "none"] if "--log-format" in help_text else []
    return lambda port: [pagoda, "serve", "-m", model, "--port", str(port), "-t", str(threads),
                         "--kv-tokens", str(kv_tokens), *kv, "--max-batched-tokens", str(batch),
                         *seqs, *log, *extra]


def llama_server_cmd(binary, model, threads, kv_tokens, batch, parallel, kv_type="f16",
                     kv_unified=True, extra=()):
    """A function of the port: llama-server with `parallel` slots over `kv_tokens` cells
    (continuous batching is its default), then `extra`. With kv_unified the slots share one KV
    cache; without, each slot gets kv_tokens / parallel of them (llama-server's default for a
    given -np)."""
    unified = ["--kv-unified"] if kv_unified else []
    return lambda port: [binary, "-m", model, "--alias", pathlib.Path(model).name,
                         "--port", str(port), "--host", "127.0.0.1",
                         "-t", str(threads), "-c", str(kv_tokens), "-np", str(parallel),
                         *unified, "-cb", "-b", str(batch), "-ctk", kv_type, "-ctv", kv_type,
                         "--no-webui", *extra]


def wait_healthy(url, proc, name="the server", timeout=600):
    """Returns once GET url/health answers 200; RuntimeError when `proc` exits or time runs out."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.3)
    raise RuntimeError(f"{name} did not become healthy")


class Server:
    """A server process on a free port, ready once GET /health answers 200; a context manager
    that stops it (SIGTERM, then SIGKILL after 30 s)."""

    def __init__(self, name, make_cmd, timeout=600):
        self.name, self.timeout = name, timeout
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(make_cmd(self.port), stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)

    def __enter__(self):
        try:
            wait_healthy(self.url, self.proc, self.name, self.timeout)
        except RuntimeError:
            self.stop()
            raise
        return self

    def __exit__(self, *exc):
        self.stop()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class LlamaCpp:
    """One llama.cpp context with `streams` sequence ids, driven through llama_decode; the K/V
    cache is llama.cpp's default (F16)."""

    def __init__(self, model_path, streams, max_len, threads, token_budget):
        import llama_cpp as L
        self.L = L
        L.llama_backend_init()
        # llama.cpp logs every graph it builds; keep the callback alive as long as the engine.
        self._quiet = L.llama_log_callback(lambda level, text, data: None)
        L.llama_log_set(self._quiet, ctypes.c_void_p())
        mparams = L.llama_model_default_params()
        mparams.n_gpu_layers = 0
        self.model = L.llama_model_load_from_file(str(model_path).encode(), mparams)
        if not self.model:
            raise RuntimeError(f"llama.cpp could not load {model_path}")
        cparams = L.llama_context_default_params()
        cparams.n_ctx = streams * max_len
        cparams.n_batch = token_budget
        cparams.n_ubatch = min(512, token_budget)
        cparams.n_seq_max = streams
        cparams.n_threads = threads
        cparams.n_threads_batch = threads
        cparams.kv_unified = True  # one pool of cells for every stream, like pagoda's blocks
        self.ctx = L.llama_init_from_model(self.model, cparams)
        if not self.ctx:
            raise RuntimeError("llama.cpp could not create a context")
        self.n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(self.model))
        self.memory = L.llama_get_memory(self.ctx)
        self.batch = L.llama_batch_init(token_budget, 0, 1)
        self.streams = streams
        self.budget = token_budget

    def close(self):
        L = self.L
        L.llama_batch_free(self.batch)
        L.llama_free(self.ctx)
        L.llama_model_free(self.model)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _add(self, token, pos, seq, want_logits):
        b, i = self.batch, self.batch.n_tokens
        b.token[i] = token
        b.pos[i] = pos
        b.n_seq_id[i] = 1
        b.seq_id[i][0] = seq
        b.logits[i] = 1 if want_logits else 0
        b.n_tokens = i + 1
        return i

    def _argmax(self, index):
        ptr = self.L.llama_get_logits_ith(self.ctx, index)
        return int(np.ctypeslib.as_array(ptr, shape=(self.n_vocab,)).argmax())

    def _decode(self):
        rc = self.L.llama_decode(self.ctx, self.batch)
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc}")

    def single(self, prompt, num_output):
        """One sequence, greedy: (seconds from the prompt to its first token, seconds from the
        first token to the last), as pagoda measures TTFT and decode time."""
        self.L.llama_memory_clear(self.memory, True)
        start = time.perf_counter()
        for chunk in range(0, len(prompt), self.budget):
            self.batch.n_tokens = 0
            for k in range(chunk, min(chunk + self.budget, len(prompt))):
                index = self._add(prompt[k], k, 0, k == len(prompt) - 1)
            self._decode()
        token = self._argmax(index)
        first = time.perf_counter()
        for i in range(num_output - 1):
            self.batch.n_tokens = 0
            self._add(token, len(prompt) + i, 0, True)
            self._decode()
            token = self._argmax(0)
        return first - start, time.perf_counter() - first

    def run(self, requests, progress=True):
        """Continuous batching of `requests` [(prompt ids, output_len)] over the streams.
        Returns (wall seconds, output tokens)."""
        L = self.L
        L.llama_memory_clear(self.memory, True)
        queue = list(range(len(requests)))[::-1]
        slots = [None] * self.streams  # per stream: [request, prompt tokens fed, generated, last]
        num_output = 0
        start = time.perf_counter()
        last_print = start
        while queue or any(slots):
            self.batch.n_tokens = 0
            budget = self.budget
            for s in range(self.streams):  # decodes first, one token each
                st = slots[s]
                if st and st[1] == len(requests[st[0]][0]):
                    st.append(self._add(st[3], st[1] + st[2] - 1, s, True))
                    budget -= 1
            for s in range(self.streams):  # then prompt chunks, admitting new requests
                if slots[s] is None and queue:
                    slots[s] = [queue.pop(), 0, 0, None]
                st = slots[s]
                if st is None or st[1] == len(requests[st[0]][0]) or budget <= 0:
                    continue
                prompt = requests[st[0]][0]
                take = min(budget, len(prompt) - st[1])
                for k in range(st[1], st[1] + take):
                    index = self._add(prompt[k], k, s, k == len(prompt) - 1)
                st[1] += take
                budget -= take
                if st[1] == len(prompt):
                    st.append(index)
            if self.batch.n_tokens == 0:
                break
            self._decode()
            for s in range(self.streams):
                st = slots[s]
                if not st or len(st) < 5:
                    continue
                st[3] = self._argmax(st.pop())
                st[2] += 1
                num_output += 1
                if st[2] == requests[st[0]][1]:
                    L.llama_memory_seq_rm(self.memory, s, -1, -1)
                    slots[s] = None
            now = time.perf_counter()
            if progress and now - last_print > 10:
                print(f"  llama.cpp: {num_output} output tokens, {now - start:.0f} s", flush=True)
                last_print = now
        return time.perf_counter() - start, num_output


def first_token(url, prompt, max_tokens=8, ignore_eos=False):
    """(seconds to the first streamed token, the whole text) of a greedy /v1/completions
    request."""
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True}
    if ignore_eos:
        body["ignore_eos"] = True
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    start = time.perf_counter()
    ttft, text = None, ""
    with urllib.request.urlopen(req, timeout=1800) as r:
        for raw in r:
            if not raw.startswith(b"data: {"):
                continue
            chunk = json.loads(raw[6:])
            if chunk["choices"] and chunk["choices"][0]["text"]:
                ttft = ttft if ttft is not None else time.perf_counter() - start
                text += chunk["choices"][0]["text"]
    return ttft, text
