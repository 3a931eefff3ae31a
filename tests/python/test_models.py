"""One server, several models (`serve -m A -m B`, `--models-dir`; server/model_set.h): each
request runs on the model it names, loaded on demand; the least recently used idle model makes
room and a busy one never does; a model that cannot fit or cannot load is that model's error
alone; Ollama's keep_alive unloads; `pagoda list` and `pagoda ps` show what is on disk and what
is loaded."""
import concurrent.futures
import http.client
import json
import subprocess
import time
import urllib.request

import pytest

from server_util import SMOLLM, Server, need, post_json, wait_for


def models_dir(tmp_path, shared_dir, names=("stories260K.gguf", "llama-2-tiny-random")):
    """A folder with the shared tiny models (symlinked): stories260K, llama-2-tiny-random and
    the Hugging Face folder tinystories-656k."""
    d = tmp_path / "models"
    d.mkdir()
    sources = {"stories260K.gguf": shared_dir / "models" / "stories260K.gguf",
               "llama-2-tiny-random": shared_dir / "models" / "llama-2-tiny-random" /
               "llama-2-tiny-random.gguf",
               "tinystories-656k": shared_dir / "models" / "tinystories-656k"}
    for name in names:
        src = sources[name]
        if not src.exists():
            pytest.skip(f"*** {src} is absent: SKIPPING ***")
        (d / (name if name != "llama-2-tiny-random" else name + ".gguf")).symlink_to(src)
    return d


def get(server, path):
    with urllib.request.urlopen(server.url + path, timeout=30) as r:
        return json.loads(r.read())


def states(server):
    return {m["id"]: m["state"] for m in get(server, "/v1/models")["data"]}


def complete(server, model, prompt="Once upon a time", n=12):
    return post_json(server, "/v1/completions",
                     {"model": model, "prompt": prompt, "max_tokens": n, "temperature": 0},
                     timeout=120)


def test_requests_to_two_models_interleaved_equal_single_model_servers(pagoda_bin, shared_dir,
                                                                       tmp_path):
    d = models_dir(tmp_path, shared_dir, ("stories260K.gguf", "llama-2-tiny-random",
                                          "tinystories-656k"))
    prompts = ["Once upon a time", "The cat sat", "Lily went to the park"]
    expected = {}
    for model in ("stories260K", "tinystories-656k"):
        path = d / (model + ".gguf" if model == "stories260K" else model)
        single = Server(pagoda_bin, path, "--kv-cache-gb", "0.05")
        try:
            expected[model] = [complete(single, model, p)[1]["choices"][0]["text"] for p in prompts]
        finally:
            single.stop()
    server = Server(pagoda_bin, None, "--models-dir", d, "--kv-cache-gb", "0.05",
                    "--max-loaded", "2")
    try:
        assert states(server) == {"stories260K": "on disk", "tinystories-656k": "on disk",
                                  "llama-2-tiny-random": "on disk"}
        jobs = [(m, i, p) for i, p in enumerate(prompts) for m in expected]
        with concurrent.futures.ThreadPoolExecutor(6) as pool:
            answers = list(pool.map(lambda j: (j, complete(server, j[0], j[2])), jobs))
        for (model, i, _), (status, body) in answers:
            assert status == 200, body
            assert body["model"] == model
            assert body["choices"][0]["text"] == expected[model][i], (model, i)
        assert states(server)["stories260K"] == "loaded"
        assert states(server)["tinystories-656k"] == "loaded"
        metrics = server.metrics()
        assert 'pagoda_model_loaded{model="stories260K"} 1' in metrics
        assert 'pagoda_model_loaded{model="llama-2-tiny-random"} 0' in metrics
        assert 'pagoda_kv_blocks_total{model="tinystories-656k"}' in metrics
        stats = get(server, "/stats")
        assert stats["models"]["stories260K"]["state"] == "loaded"
        assert stats["models"]["llama-2-tiny-random"]["state"] == "on disk"
    finally:
        server.stop()


def test_an_unknown_model_is_a_404_naming_the_served_ones(pagoda_bin, shared_dir, tmp_path):
    d = models_dir(tmp_path, shared_dir)
    server = Server(pagoda_bin, None, "--models-dir", d, "--kv-cache-gb", "0.05")
    try:
        status, body = complete(server, "gpt-4")
        assert status == 404
        assert "'gpt-4' does not exist" in body["error"]["message"]
        assert "'stories260K'" in body["error"]["message"]
        # No model named: the first one serves it.
        status, body = post_json(server, "/v1/completions",
                                 {"prompt": "Once", "max_tokens": 2, "temperature": 0})
        assert status == 200 and body["model"] == "llama-2-tiny-random"
        assert post_json(server, "/api/generate", {"prompt": "x", "stream": False})[0] == 400
    finally:
        server.stop()


def test_past_max_loaded_the_idle_model_goes_and_the_busy_one_stays(pagoda_bin, shared_dir,
                                                                    tmp_path):
    d = models_dir(tmp_path, shared_dir)
    (d / "smol.gguf").symlink_to(need(SMOLLM))
    server = Server(pagoda_bin, None, "--models-dir", d, "--kv-cache-gb", "0.05",
                    "--max-loaded", "2")
    try:
        # smol busy with a long stream, and the least recently used; stories260K idle.
        conn = http.client.HTTPConnection(server.url.removeprefix("http://"), timeout=120)
        conn.request("POST", "/v1/completions",
                     json.dumps({"model": "smol", "prompt": "Once", "max_tokens": 2000,
                                 "ignore_eos": True, "stream": True, "temperature": 0}),
                     {"Content-Type": "application/json"})
        stream = conn.getresponse()
        assert stream.status == 200
        stream.readline()
        assert complete(server, "stories260K")[0] == 200
        assert states(server) == {"smol": "loaded", "stories260K": "loaded",
                                  "llama-2-tiny-random": "on disk"}
        assert complete(server, "llama-2-tiny-random", n=4)[0] == 200
        now = states(server)
        assert now == {"smol": "loaded", "stories260K": "on disk",
                       "llama-2-tiny-random": "loaded"}, now
        assert any("unloading model 'stories260K' to make room for 'llama-2-tiny-random'" in line
                   for line in server.log), server.log
        assert not any("unloading model 'smol'" in line for line in server.log)
        conn.close()
    finally:
        server.stop()


def test_a_model_past_the_memory_budget_is_refused_in_one_line(pagoda_bin, shared_dir, tmp_path):
    d = models_dir(tmp_path, shared_dir, ("stories260K.gguf",))
    (d / "smol.gguf").symlink_to(need(SMOLLM))
    server = Server(pagoda_bin, None, "--models-dir", d, "--kv-cache-gb", "0.05",
                    "--max-memory-gb", "0.12")
    try:
        status, body = complete(server, "smol")
        assert status == 503, body
        message = body["error"]["message"]
        assert "\n" not in message
        assert "model 'smol' needs" in message and "memory budget" in message, message
        assert body["error"]["code"] == "insufficient_memory"
        assert complete(server, "stories260K")[0] == 200  # the small one still fits
    finally:
        server.stop()


def test_a_broken_file_fails_its_own_requests_and_the_others_serve(pagoda_bin, shared_dir,
                                                                   tmp_path):
    d = models_dir(tmp_path, shared_dir, ("stories260K.gguf",))
    good = (shared_dir / "models" / "stories260K.gguf").read_bytes()
    (d / "broken.gguf").write_bytes(good[: len(good) // 2])  # header fine, tensors cut off
    server = Server(pagoda_bin, None, "--models-dir", d, "--kv-cache-gb", "0.05")
    try:
        status, body = complete(server, "broken")
        assert status == 500, body
        assert body["error"]["code"] == "model_load_failed"
        assert "model 'broken' could not be loaded" in body["error"]["message"]
        status, body = complete(server, "stories260K")
        assert status == 200, body
        entry = get(server, "/v1/models/broken")
        assert entry["state"] == "on disk" and entry["last_error"]
    finally:
        server.stop()


def test_a_load_slower_than_the_timeout_is_a_503_with_retry_after(pagoda_bin, shared_dir,
                                                                  tmp_path):
    d = models_dir(tmp_path, shared_dir, ("stories260K.gguf",))
    (d / "smol.gguf").symlink_to(need(SMOLLM))
    # A KV cache of 2 GiB takes longer to set up than 0.1 s.
    server = Server(pagoda_bin, None, "--models-dir", d, "--kv-cache-gb", "2",
                    "--load-timeout", "0.1")
    try:
        req = urllib.request.Request(
            server.url + "/v1/completions",
            data=json.dumps({"model": "smol", "prompt": "Hi", "max_tokens": 2}).encode(),
            headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(req, timeout=60)
        assert err.value.code == 503
        assert int(err.value.headers["Retry-After"]) >= 1
        assert json.loads(err.value.read())["error"]["code"] == "model_loading"
        # The load goes on; once done, requests are served.
        assert wait_for(lambda: states(server)["smol"] == "loaded", 60)
        assert complete(server, "smol", n=2)[0] == 200
    finally:
        server.stop()


def test_ollama_lists_every_model_and_keep_alive_unloads(pagoda_bin, shared_dir, tmp_path):
    d = models_dir(tmp_path, shared_dir)
    server = Server(pagoda_bin, None, "--models-dir", d, "--kv-cache-gb", "0.05")
    try:
        names = [m["name"] for m in get(server, "/api/tags")["models"]]
        assert names == ["llama-2-tiny-random:latest", "stories260K:latest"]
        assert get(server, "/api/ps")["models"] == []
        status, body = post_json(server, "/api/generate",
                                 {"model": "stories260K:latest", "prompt": "Once",
                                  "raw": True, "stream": False, "keep_alive": "10m",
                                  "options": {"temperature": 0, "num_predict": 4}})
        assert status == 200, body
        ps = get(server, "/api/ps")["models"]
        assert [m["name"] for m in ps] == ["stories260K:latest"]
        assert not ps[0]["expires_at"].startswith("9999")  # 10 minutes from now
        # Nothing to generate and keep_alive 0: unload (ollama stop).
        status, body = post_json(server, "/api/generate", {"model": "stories260K",
                                                           "keep_alive": 0})
        assert status == 200 and body["done_reason"] == "unload", body
        assert wait_for(lambda: get(server, "/api/ps")["models"] == [], 10)
        assert post_json(server, "/api/generate",
                         {"model": "stories260K", "keep_alive": "soon"})[0] == 400
    finally:
        server.stop()


def test_idle_unload_frees_a_model_after_its_time(pagoda_bin, shared_dir, tmp_path):
    d = models_dir(tmp_path, shared_dir, ("stories260K.gguf",))
    server = Server(pagoda_bin, None, "--models-dir", d, "--kv-cache-gb", "0.05",
                    "--idle-unload", "1")
    try:
        assert complete(server, "stories260K")[0] == 200
        assert states(server)["stories260K"] == "loaded"
        assert wait_for(lambda: states(server)["stories260K"] == "on disk", 10)
        assert complete(server, "stories260K")[0] == 200  # loaded again
    finally:
        server.stop()


def test_options_of_one_model_are_refused_with_several(pagoda_bin, shared_dir, tmp_path):
    d = models_dir(tmp_path, shared_dir)
    for option in (["--lora", "a=b.gguf"], ["--model-name", "x"], ["--kv-disk", str(tmp_path)]):
        out = subprocess.run([pagoda_bin, "serve", "--models-dir", d, "--port", "0", *option],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode != 0
        assert option[0] in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    out = subprocess.run([pagoda_bin, "serve", "--models-dir", empty, "--port", "0"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "holds no GGUF file" in out.stderr


def test_list_and_ps(pagoda_bin, shared_dir, tmp_path):
    d = models_dir(tmp_path, shared_dir, ("stories260K.gguf", "tinystories-656k"))
    out = subprocess.run([pagoda_bin, "list", "--models-dir", d], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split()[:2] == ["NAME", "ARCH"]
    assert [line.split()[0] for line in lines[1:]] == ["stories260K", "tinystories-656k"]
    server = Server(pagoda_bin, None, "--models-dir", d, "--kv-cache-gb", "0.05")
    try:
        assert complete(server, "tinystories-656k")[0] == 200
        out = subprocess.run([pagoda_bin, "ps", "--url", server.url], capture_output=True,
                             text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        rows = [line.split() for line in out.stdout.splitlines()[1:]]
        assert [(r[0], r[1]) for r in rows] == [("tinystories-656k", "loaded")], out.stdout
    finally:
        server.stop()
    out = subprocess.run([pagoda_bin, "ps", "--url", server.url], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode != 0 and "cannot reach" in out.stderr
