"""Explicit KV save and restore (POST /v1/kv/save, /v1/kv/restore with serve --kv-save-dir;
`pagoda run --prompt-cache FILE`) through real processes: a prefix saved by one server and
restored into another gives the same greedy tokens and log-probabilities as a fresh computation
(stories260K at F32, F16 and q8_0 K/V, SmolLM2 at q8_0), and the next request computes only the
rest; files of another model, truncated or corrupted are refused in one line and restore
nothing; bad names, unknown fields and a server without --kv-save-dir are refused."""
import json
import pathlib
import re
import subprocess
import urllib.error
import urllib.request

import pytest

from server_util import SMOLLM, Server, need, wait_for

PROMPT = ("Once upon a time, there was a little girl named Lily. She loved to play outside in "
          "the park with her friends. One day, she saw a big red ball under a tree. She ran to "
          "the ball and picked it up. It was shiny and new. Lily wanted to keep the ball, but "
          "she knew it was not hers. She looked around for the owner of the ball and saw a boy")


@pytest.fixture(scope="module")
def stories(shared_dir):
    return need(shared_dir / "models" / "stories260K.gguf")


def post(server, path, body):
    """(status, JSON body) of a POST, errors included."""
    req = urllib.request.Request(server.url + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def complete(server, prompt=PROMPT):
    """Greedy tokens, their log-probabilities, and the prompt tokens served from the cache."""
    status, r = post(server, "/v1/completions",
                     {"prompt": prompt, "max_tokens": 12, "temperature": 0, "logprobs": 1})
    assert status == 200, r
    lp = r["choices"][0]["logprobs"]
    cached = (r["usage"].get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    return lp["tokens"], lp["token_logprobs"], cached


def serve(pagoda_bin, model, save_dir, *args):
    extra = ("--kv-save-dir", save_dir) if save_dir is not None else ()
    return Server(pagoda_bin, model, "-t", "2", "--kv-tokens", "4096", "--max-model-len", "1024",
                  *extra, *args)


def fresh(pagoda_bin, model, kv_type):
    s = serve(pagoda_bin, model, None, "--kv-type", kv_type)
    try:
        return complete(s)
    finally:
        s.stop()


def save(pagoda_bin, model, folder, kv_type, name="story"):
    s = serve(pagoda_bin, model, folder, "--kv-type", kv_type)
    try:
        status, r = post(s, "/v1/kv/save", {"name": name, "prompt": PROMPT})
        assert status == 200, r
        assert r["object"] == "kv.save" and r["num_tokens"] == r["num_prompt_tokens"] // 16 * 16
        assert r["num_computed_tokens"] == r["num_tokens"]  # nothing was cached before
        # Saved again: now all cached, nothing computed.
        status, again = post(s, "/v1/kv/save", {"name": name, "prompt": PROMPT})
        assert status == 200 and again["num_computed_tokens"] == 0
        return r
    finally:
        s.stop()


def restore_then_complete(pagoda_bin, model, folder, kv_type, name="story"):
    s = serve(pagoda_bin, model, folder, "--kv-type", kv_type)
    try:
        status, r = post(s, "/v1/kv/restore", {"name": name})
        assert status == 200, r
        assert r["object"] == "kv.restore" and r["num_restored_tokens"] == r["num_tokens"]
        return r, complete(s)
    finally:
        s.stop()


@pytest.mark.parametrize("kv_type", ["f32", "f16", "q8_0"])
def test_a_restored_prefix_gives_the_fresh_answer(pagoda_bin, stories, tmp_path, kv_type):
    want = fresh(pagoda_bin, stories, kv_type)
    saved = save(pagoda_bin, stories, tmp_path / "saved", kv_type)
    restored, got = restore_then_complete(pagoda_bin, stories, tmp_path / "saved", kv_type)
    assert restored["num_tokens"] == saved["num_tokens"] > 0
    assert got[0] == want[0]
    assert got[1] == want[1]  # log-probabilities exactly: the same K/V, the same arithmetic
    # The next request computed only the rest (fewer than one block of it).
    assert got[2] == saved["num_tokens"] and want[2] == 0


def test_smollm2_restored_exactly(pagoda_bin, tmp_path):
    model = need(SMOLLM)
    want = fresh(pagoda_bin, model, "q8_0")
    save(pagoda_bin, model, tmp_path / "saved", "q8_0")
    _, got = restore_then_complete(pagoda_bin, model, tmp_path / "saved", "q8_0")
    assert got[:2] == want[:2] and got[2] > 0


def test_chat_messages_and_token_ids_are_prompts_too(pagoda_bin, stories, tmp_path):
    s = serve(pagoda_bin, stories, tmp_path / "saved")
    try:
        status, tok = post(s, "/tokenize", {"prompt": PROMPT})
        assert status == 200
        status, r = post(s, "/v1/kv/save", {"name": "ids", "prompt": tok["tokens"]})
        assert status == 200 and r["num_prompt_tokens"] == tok["count"], r
        # stories260K has no chat template: messages are refused as the chat route refuses them.
        status, r = post(s, "/v1/kv/save",
                         {"name": "chat", "messages": [{"role": "user", "content": "hi"}]})
        assert status == 400 and "chat template" in r["error"]["message"]
    finally:
        s.stop()


def test_files_of_another_model_truncated_or_corrupt_are_refused(pagoda_bin, stories, tmp_path):
    folder = tmp_path / "saved"
    want = fresh(pagoda_bin, stories, "f16")
    save(pagoda_bin, stories, folder, "f16")
    good = (folder / "story.pgkv").read_bytes()
    (folder / "short.pgkv").write_bytes(good[:-100])
    flipped = bytearray(good)
    flipped[len(good) // 2] ^= 0x10
    (folder / "flipped.pgkv").write_bytes(bytes(flipped))
    (folder / "junk.pgkv").write_bytes(b"not a prefix file at all")
    s = serve(pagoda_bin, stories, folder, "--kv-type", "q8_0")  # another K/V format
    try:
        status, r = post(s, "/v1/kv/restore", {"name": "story"})
        assert status == 409 and r["error"]["code"] == "kv_save_unusable"
        assert "another model or K/V format" in r["error"]["message"]
        assert str(folder) not in r["error"]["message"]
    finally:
        s.stop()
    s = serve(pagoda_bin, stories, folder, "--kv-type", "f16")
    try:
        for name, why in [("short", "truncated"), ("flipped", "corrupt"),
                          ("junk", "not a pagoda prompt cache file")]:
            status, r = post(s, "/v1/kv/restore", {"name": name})
            assert status == 409 and why in r["error"]["message"], (name, r)
        # Nothing was restored: the answer is computed in full, and is the fresh one.
        got = complete(s)
        assert got == want
    finally:
        s.stop()


def test_bad_names_fields_and_a_server_without_the_folder(pagoda_bin, stories, tmp_path):
    folder = tmp_path / "saved"
    s = serve(pagoda_bin, stories, folder)
    try:
        for name in ["", "../x", "a/b", ".hidden", "x" * 129, 7, None, "a b", "..", "é"]:
            for route in ["/v1/kv/save", "/v1/kv/restore"]:
                status, r = post(s, route, {"name": name, "prompt": PROMPT}
                                 if route == "/v1/kv/save" else {"name": name})
                assert status == 400 and r["error"]["param"] == "name", (name, route, r)
        assert not (tmp_path / "x.pgkv").exists() and sorted(folder.iterdir()) == []
        status, r = post(s, "/v1/kv/save", {"name": "a", "prompt": PROMPT, "temperature": 0})
        assert status == 400 and r["error"]["param"] == "temperature"
        status, r = post(s, "/v1/kv/restore", {"name": "a", "prompt": PROMPT})
        assert status == 400 and r["error"]["param"] == "prompt"
        status, r = post(s, "/v1/kv/save", {"name": "a"})
        assert status == 400 and r["error"]["param"] == "prompt"
        status, r = post(s, "/v1/kv/save", {"name": "a", "prompt": "Once"})
        assert status == 400 and "less than one KV block" in r["error"]["message"]
        status, r = post(s, "/v1/kv/restore", {"name": "nothing"})
        assert status == 404 and r["error"]["code"] == "kv_save_not_found"
        status, r = post(s, "/v1/kv/restore", {"name": "a", "model": "no-such-model"})
        assert status == 404 and r["error"]["param"] == "model"
    finally:
        s.stop()
    s = serve(pagoda_bin, stories, None)
    try:
        for route in ["/v1/kv/save", "/v1/kv/restore"]:
            status, r = post(s, route, {"name": "a", "prompt": PROMPT})
            assert status == 400 and r["error"]["code"] == "kv_save_disabled"
            assert "--kv-save-dir" in r["error"]["message"]
    finally:
        s.stop()


def run(pagoda_bin, model, cache, *extra):
    r = subprocess.run([str(pagoda_bin), "run", "-m", str(model), "-p", PROMPT, "-n", "12",
                        "--temp", "0", "-t", "2", "-c", "512", "--prompt-cache", str(cache),
                        *map(str, extra)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    m = re.search(r"prefill: (\d+) tokens \((\d+) from the prompt cache\)", r.stderr)
    assert m, r.stderr
    return r.stdout, int(m.group(2)), int(m.group(1)), r.stderr


def test_run_with_a_prompt_cache(pagoda_bin, stories, tmp_path):
    cache = tmp_path / "prompt.pgkv"
    first, n, num_prompt, _ = run(pagoda_bin, stories, cache)
    assert n == 0 and cache.exists()
    again, n, _, _ = run(pagoda_bin, stories, cache)
    assert again == first and n == num_prompt // 16 * 16 > 0
    # Another K/V format, truncated, corrupt: one line each, computed in full, the same text.
    _, n, _, log = run(pagoda_bin, stories, cache, "--kv-type", "q8_0")
    assert n == 0 and "another model or K/V format: a miss" in log
    good = cache.read_bytes()  # now q8_0's
    cache.write_bytes(good[:-1])
    out, n, _, log = run(pagoda_bin, stories, cache, "--kv-type", "q8_0")
    assert n == 0 and re.search(r"truncated.*: a miss", log)
    data = bytearray(cache.read_bytes())
    data[-20] ^= 1
    cache.write_bytes(bytes(data))
    out2, n, _, log = run(pagoda_bin, stories, cache, "--kv-type", "q8_0")
    assert n == 0 and "corrupt (block" in log and out2 == out
    assert len([l for l in log.splitlines() if "a miss" in l]) == 1
    # Another model's file.
    other = tmp_path / "other.pgkv"
    run(pagoda_bin, stories, other)
    _, n, _, log = run(pagoda_bin, need(SMOLLM), other)
    assert n == 0 and "another model or K/V format" in log


def test_one_save_computes_at_a_time(pagoda_bin, tmp_path):
    """A save whose prompt must be computed holds a work thread: a second one meanwhile is a
    503, and goes through once the first is done."""
    import threading
    s = Server(pagoda_bin, need(SMOLLM), "-t", "2", "--kv-tokens", "4096", "--max-model-len",
               "2048", "--kv-save-dir", tmp_path / "saved")
    try:
        long_prompt = " ".join([PROMPT] * 20)  # ~1,700 tokens: seconds of prefill here
        first = {}
        t = threading.Thread(target=lambda: first.update(
            r=post(s, "/v1/kv/save", {"name": "long", "prompt": long_prompt})))
        t.start()

        def running():
            with urllib.request.urlopen(s.url + "/stats", timeout=10) as r:
                return json.loads(r.read())["running"] > 0
        assert wait_for(running, 30)
        other = "Tom had a small dog called Max. " * 4  # nothing of it cached
        status, r = post(s, "/v1/kv/save", {"name": "other", "prompt": other})
        t.join()
        assert first["r"][0] == 200 and first["r"][1]["num_computed_tokens"] > 0
        assert status == 503 and r["error"]["code"] == "kv_save_busy", r
        status, r = post(s, "/v1/kv/save", {"name": "other", "prompt": other})
        assert status == 200 and r["num_computed_tokens"] > 0, r
    finally:
        s.stop()


def test_several_models_refuse_the_folder(pagoda_bin, stories, tmp_path):
    r = subprocess.run([str(pagoda_bin), "serve", "-m", str(stories), "-m", str(need(SMOLLM)),
                        "--port", "0", "--kv-save-dir", str(tmp_path / "saved")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "--kv-save-dir serves one model (one -m)" in r.stderr, r.stderr


def test_saved_chat_messages_serve_the_chat_route(pagoda_bin, tmp_path):
    """`messages` are rendered as /v1/chat/completions renders them: after a restore, the same
    chat's request hits the saved blocks and answers as a fresh server does."""
    model = need(SMOLLM)
    messages = [{"role": "system", "content": PROMPT},
                {"role": "user", "content": "Who owned the ball?"}]
    body = {"messages": messages, "max_tokens": 8, "temperature": 0, "logprobs": True}

    def chat(s):
        status, r = post(s, "/v1/chat/completions", body)
        assert status == 200, r
        content = r["choices"][0]["logprobs"]["content"]
        cached = (r["usage"].get("prompt_tokens_details") or {}).get("cached_tokens", 0)
        return [c["token"] for c in content], [c["logprob"] for c in content], cached

    s = serve(pagoda_bin, model, None)
    try:
        want = chat(s)
    finally:
        s.stop()
    s = serve(pagoda_bin, model, tmp_path / "saved")
    try:
        status, saved = post(s, "/v1/kv/save", {"name": "chat", "messages": messages})
        assert status == 200 and saved["num_tokens"] > 0, saved
    finally:
        s.stop()
    s = serve(pagoda_bin, model, tmp_path / "saved")
    try:
        status, r = post(s, "/v1/kv/restore", {"name": "chat"})
        assert status == 200, r
        got = chat(s)
    finally:
        s.stop()
    assert got[:2] == want[:2]
    assert got[2] == saved["num_tokens"] and want[2] == 0
