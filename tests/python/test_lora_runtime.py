"""LoRA adapters loaded and unloaded while the server runs (vLLM's /v1/load_lora_adapter and
/v1/unload_lora_adapter, under `serve --allow-lora-loading`, bounded by --max-loras): an adapter
loaded at run time answers as the same adapter given by --lora does (test_lora.py checks those
against the merged weights), an unloaded one is gone at once but its running requests finish on
it, a replaced one answers with its new weights, and each adapter has its series in /metrics."""
import concurrent.futures
import json
import threading
import urllib.error
import urllib.request

import gguf
import numpy as np
import pytest

from server_util import SMOLLM, Server, need, post_json, wait_for
from test_lora import base_model, random_pairs, write_adapter

PROMPT = "Once upon a time, there was a little girl named Lily. She loved to play"


def post(server, path, payload):
    """(status, body text) of a POST, for error statuses too."""
    req = urllib.request.Request(server.url + path, data=json.dumps(payload).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def load(server, name, path, **extra):
    return post(server, "/v1/load_lora_adapter", {"lora_name": name, "lora_path": str(path),
                                                  **extra})


def unload(server, name):
    return post(server, "/v1/unload_lora_adapter", {"lora_name": name})


def text(server, model, max_tokens=20):
    status, body = post_json(server, "/v1/completions",
                             {"model": model, "prompt": PROMPT, "max_tokens": max_tokens,
                              "temperature": 0})
    assert status == 200, body
    return body["choices"][0]["text"]


def metrics(server):
    with urllib.request.urlopen(server.url + "/metrics", timeout=10) as r:
        return r.read().decode()


def model_ids(server):
    with urllib.request.urlopen(server.url + "/v1/models", timeout=10) as r:
        return [m["id"] for m in json.loads(r.read())["data"]]


@pytest.fixture(scope="module")
def adapters(shared_dir, tmp_path_factory):
    base = base_model(shared_dir)
    tmp = tmp_path_factory.mktemp("lora_runtime")
    paths = {}
    for name, seed in [("a", 21), ("b", 22), ("c", 23)]:
        paths[name] = tmp / f"{name}.gguf"
        write_adapter(paths[name], "llama", random_pairs(base, 4, seed=seed), 4.0)
    return base, paths


@pytest.fixture(scope="module")
def static(pagoda_bin, adapters):
    """A server given every adapter with --lora: what the loaded ones must answer."""
    base, paths = adapters
    s = Server(pagoda_bin, base, *[f"--lora={n}={p}" for n, p in paths.items()])
    try:
        want = {m: text(s, m) for m in ["stories260K", "a", "b", "c"]}
        assert len(set(want.values())) == 4, want
        # Batch invariance: three adapters and the base in flight at once, each request getting
        # what it gets alone.
        order = ["a", "c", "stories260K", "b", "c", "a", "b", "stories260K", "c", "b", "a", "a"]
        with concurrent.futures.ThreadPoolExecutor(len(order)) as pool:
            assert list(pool.map(lambda m: text(s, m), order)) == [want[m] for m in order]
    finally:
        s.stop()
    return want


def test_adapters_loaded_at_run_time_answer_as_given_at_start(pagoda_bin, adapters, static):
    base, paths = adapters
    s = Server(pagoda_bin, base, "--allow-lora-loading", "--max-loras", 2)
    try:
        assert text(s, "stories260K") == static["stories260K"]
        assert load(s, "a", paths["a"]) == (200, "Success: LoRA adapter 'a' added successfully.")
        assert load(s, "b", paths["b"])[0] == 200
        assert model_ids(s) == ["stories260K", "a", "b"]
        assert text(s, "a") == static["a"] and text(s, "b") == static["b"]
        assert text(s, "stories260K") == static["stories260K"]
        # --max-loras 2: a third waits for an unload.
        status, body = load(s, "c", paths["c"])
        assert status == 409 and "--max-loras" in body, body
        assert unload(s, "a") == (200, "Success: LoRA adapter 'a' removed successfully.")
        status, body = post_json(s, "/v1/completions", {"model": "a", "prompt": "x"})
        assert status == 404 and "'b'" in body["error"]["message"], body
        assert load(s, "c", paths["c"])[0] == 200
        assert text(s, "c") == static["c"]
        # load_inplace: the name answers with the new file's weights, not cached K/V of the old.
        status, body = load(s, "b", paths["a"])
        assert status == 400 and "already been loaded" in body, body
        assert load(s, "b", paths["a"], load_inplace=True)[0] == 200
        assert text(s, "b") == static["a"]
        assert model_ids(s) == ["stories260K", "b", "c"]
        # Each adapter's series; an unloaded or replaced one's end.
        m = metrics(s)
        assert 'pagoda_lora_requests_total{adapter="b"} 1' in m, m
        assert 'pagoda_lora_requests_total{adapter="c"} 1' in m, m
        assert 'adapter="a"' not in m
        assert "pagoda_lora_adapters_loaded 2" in m and "pagoda_lora_adapters_max 2" in m
        assert 'pagoda_lora_requests_running{adapter="c"} 0' in m
    finally:
        s.stop()


def smollm_adapter(path, seed):
    """A rank-4 adapter of SmolLM2's first layers (its decode is slow enough for a stream to
    run while the test changes adapters)."""
    rng = np.random.default_rng(seed)
    shapes = {t.name: (int(t.shape[0]), int(t.shape[1]))
              for t in gguf.GGUFReader(str(SMOLLM)).tensors if len(t.shape) == 2}
    pairs = {}
    for name in ["blk.0.attn_q.weight", "blk.1.ffn_down.weight", "blk.2.attn_v.weight"]:
        cols, rows = shapes[name]
        pairs[name] = (rng.normal(0, 0.1, (4, cols)), rng.normal(0, 0.1, (rows, 4)))
    write_adapter(path, "llama", pairs, 4.0)


def test_an_unloaded_adapters_running_request_finishes_on_it(pagoda_bin, tmp_path):
    need(SMOLLM)
    for name, seed in [("a", 31), ("b", 32)]:
        smollm_adapter(tmp_path / f"{name}.gguf", seed)
    s = Server(pagoda_bin, SMOLLM, "--allow-lora-loading", "--max-loras", 1)
    try:
        assert load(s, "a", tmp_path / "a.gguf")[0] == 200
        assert load(s, "b", tmp_path / "b.gguf")[0] == 409  # --max-loras 1
        want = text(s, "a", max_tokens=160)
        assert want != text(s, SMOLLM.stem, max_tokens=160)
        got = {}
        started = threading.Event()

        def stream():
            req = urllib.request.Request(
                s.url + "/v1/completions",
                data=json.dumps({"model": "a", "prompt": PROMPT, "max_tokens": 160,
                                 "temperature": 0, "stream": True}).encode(),
                headers={"Content-Type": "application/json"})
            parts = []
            with urllib.request.urlopen(req, timeout=300) as r:
                for line in r:
                    line = line.decode().strip()
                    if line.startswith("data: {"):
                        parts.append(json.loads(line[6:])["choices"][0]["text"])
                        started.set()
            got["text"] = "".join(parts)

        t = threading.Thread(target=stream)
        t.start()
        assert started.wait(120)
        # Mid-stream: the name goes at once and the spare slot takes another adapter, while
        # the stream goes on with a's weights in its own slot.
        assert unload(s, "a")[0] == 200
        assert load(s, "b", tmp_path / "b.gguf")[0] == 200
        status, body = load(s, "b", tmp_path / "a.gguf", load_inplace=True)
        assert status == 503 and "try again" in body, body  # both slots in use
        assert t.is_alive(), "the stream ended before the adapters changed: nothing was tested"
        t.join(300)
        assert got.get("text") == want
        # Its slot is free once it ended (503 with Retry-After until the server has let go).
        assert wait_for(lambda: load(s, "b", tmp_path / "a.gguf", load_inplace=True)[0] == 200,
                        10)
        assert text(s, "b", max_tokens=160) == want
    finally:
        s.stop()


def test_runtime_loading_is_off_unless_asked_for(pagoda_bin, adapters):
    base, paths = adapters
    for extra in [[], [f"--lora=a={paths['a']}"]]:
        s = Server(pagoda_bin, base, *extra)
        try:
            status, body = load(s, "b", paths["b"])
            assert status == 403 and "--allow-lora-loading" in body, body
            assert unload(s, "a")[0] == 403
        finally:
            s.stop()


def test_bad_load_and_unload_requests_are_refused_one_by_one(pagoda_bin, adapters):
    base, paths = adapters
    s = Server(pagoda_bin, base, "--allow-lora-loading")
    try:
        cases = [
            ("/v1/load_lora_adapter", {"lora_path": str(paths["a"])}, 400, "'lora_name' is required"),
            ("/v1/load_lora_adapter", {"lora_name": "a"}, 400, "'lora_path' is required"),
            ("/v1/load_lora_adapter", {"lora_name": 3, "lora_path": "x"}, 400, "non-empty string"),
            ("/v1/load_lora_adapter", {"lora_name": "a", "lora_path": str(paths["a"]),
                                       "scale": 2}, 400, "'scale' is not a field"),
            ("/v1/load_lora_adapter", {"lora_name": "a", "lora_path": str(paths["a"]),
                                       "load_inplace": "yes"}, 400, "must be a boolean"),
            ("/v1/load_lora_adapter", {"lora_name": "a", "lora_path": str(base)}, 400,
             "not a LoRA adapter"),
            ("/v1/load_lora_adapter", {"lora_name": "a", "lora_path": "/nonexistent.gguf"}, 400,
             "nonexistent"),
            ("/v1/load_lora_adapter", {"lora_name": "stories260K", "lora_path": str(paths["a"])},
             400, "the base model's name"),
            ("/v1/unload_lora_adapter", {"lora_name": "zz"}, 404, "cannot be found"),
            ("/v1/unload_lora_adapter", {"lora_name": "a", "lora_int_id": 1}, 400,
             "unloaded by lora_name"),
        ]
        for path, payload, status, message in cases:
            got, body = post(s, path, payload)
            assert got == status and message in body, (payload, got, body)
        # Nothing above took a slot or a name.
        assert model_ids(s) == ["stories260K"]
        assert load(s, "a", paths["a"])[0] == 200
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(s.url + "/v1/load_lora_adapter", timeout=10)
        assert e.value.code == 405
    finally:
        s.stop()
