"""--kv-offload-gb: the prefix cache's host-memory tier through real processes (stories260K on
the CPU backend, where the pool is host memory too). Blocks the KV cache evicts are kept in host
memory and come back for the next request that wants them, with the same greedy tokens and
log-probabilities as computed from scratch; the bound holds; with --kv-disk under it both tiers
serve; /metrics says where prompt tokens came from (the pool, host memory, the disk) and how
many tokens a preemption made the server compute again."""
import concurrent.futures
import json
import subprocess
import urllib.request

import pytest

from server_util import Server, need

PROMPT = ("Once upon a time, there was a little girl named Lily. She loved to play outside in "
          "the park with her friends. One day, she saw a big red ball under a tree. She ran to "
          "the ball and picked it up. It was shiny and new.")
OTHER = ("Tom had a small dog called Max. Every morning they walked to the river and watched "
         "the boats go by. Max liked to bark at the ducks, and Tom liked to throw sticks into "
         "the water. One day a big boat came by.")
THIRD = PROMPT.replace("Lily", "Anna").replace("ball", "kite")


@pytest.fixture(scope="module")
def stories(shared_dir):
    return need(shared_dir / "models" / "stories260K.gguf")


def post(server, path, body):
    req = urllib.request.Request(server.url + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


def complete(server, prompt=PROMPT, max_tokens=12, **extra):
    """Greedy tokens and their log-probabilities."""
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "logprobs": 1, **extra}
    lp = post(server, "/v1/completions", body)["choices"][0]["logprobs"]
    return lp["tokens"], lp["token_logprobs"]


def engine(server):
    with urllib.request.urlopen(server.url + "/stats", timeout=30) as r:
        return json.loads(r.read())


def serve(pagoda_bin, model, kv_tokens, *args):
    return Server(pagoda_bin, model, "-t", "2", "--kv-tokens", str(kv_tokens), "--max-model-len",
                  "256", "--kv-type", "f16", *args)


def from_scratch(pagoda_bin, model, prompts):
    s = serve(pagoda_bin, model, 4096)
    try:
        return [complete(s, p) for p in prompts]
    finally:
        s.stop()


def check_same(got, want):
    assert got[0] == want[0]
    assert got[1] == want[1]  # log-probabilities exactly: the same K/V, the same arithmetic


def tiers(server):
    """Prompt tokens by where they came from, as /metrics says."""
    return {t: server.metric(f"pagoda_prefix_cache_{t}_hits_total")
            for t in ("pool", "host", "disk")}


def test_evicted_blocks_come_back_from_host_memory(pagoda_bin, stories):
    want = from_scratch(pagoda_bin, stories, (PROMPT, OTHER))
    # A pool of 128 tokens: the other prompt evicts the first one's blocks.
    s = serve(pagoda_bin, stories, 128, "--kv-offload-gb", "0.01")
    try:
        check_same(complete(s), want[0])
        check_same(complete(s, OTHER), want[1])
        host = engine(s)["kv_host"]
        assert host["stored_blocks"] > 0 and host["hit_tokens"] == 0
        check_same(complete(s), want[0])
        host = engine(s)["kv_host"]
        assert host["hit_tokens"] > 0 and host["hit_blocks"] * 16 >= host["hit_tokens"]
        t = tiers(s)
        assert t["host"] == host["hit_tokens"] and t["disk"] == 0
        assert s.metric("pagoda_kv_host_hit_blocks_total") == host["hit_blocks"]
        assert engine(s)["kv_disk"] is None
        # The load that brought them back: landed, timed, in /stats and /metrics alike.
        loads = engine(s)["kv_loads"]
        assert loads["loads"] >= 1 and loads["blocks"] == host["hit_blocks"]
        assert 0 < loads["last_seconds"] <= loads["max_seconds"] <= loads["seconds"]
        assert s.metric("pagoda_kv_host_loads_total") == loads["loads"]
        assert engine(s)["prefix_cache_pool_hit_tokens"] + host["hit_tokens"] == \
            engine(s)["prefix_cache_hit_tokens"]
    finally:
        s.stop()


def test_the_bound_holds(pagoda_bin, stories):
    want = from_scratch(pagoda_bin, stories, (PROMPT, OTHER, THIRD))
    s = serve(pagoda_bin, stories, 128, "--kv-offload-gb", "0.00003")  # about three blocks
    try:
        for _ in range(2):
            for p, w in zip((PROMPT, OTHER, THIRD), want):
                check_same(complete(s, p), w)
                host = engine(s)["kv_host"]
                assert host["bytes"] <= host["max_bytes"]
        assert host["evicted_blocks"] > 0 and 0 < host["blocks"] <= 3
        assert s.metric("pagoda_kv_host_bytes") == host["bytes"]
    finally:
        s.stop()


def test_host_memory_over_the_disk(pagoda_bin, stories, tmp_path):
    want = from_scratch(pagoda_bin, stories, (PROMPT, OTHER, THIRD))
    folder = tmp_path / "kv"
    args = ("--kv-offload-gb", "0.00003", "--kv-disk", str(folder))
    s = serve(pagoda_bin, stories, 128, *args)
    try:
        for p, w in zip((PROMPT, OTHER, THIRD, PROMPT, OTHER), want + want[:2]):
            check_same(complete(s, p), w)
        t = tiers(s)
        assert t["disk"] > 0  # host memory holds three blocks: the rest came from the disk
        assert t["disk"] == engine(s)["kv_disk"]["hit_tokens"]
        assert s.terminate() == 0
    finally:
        s.stop()
    # A restart: host memory starts empty, the disk serves.
    s = serve(pagoda_bin, stories, 128, *args)
    try:
        check_same(complete(s, OTHER), want[1])
        t = tiers(s)
        assert t["disk"] > 0 and t["host"] == 0 and t["pool"] == 0
    finally:
        s.stop()


def test_the_pool_counter(pagoda_bin, stories):
    s = serve(pagoda_bin, stories, 4096)
    try:
        complete(s)
        assert tiers(s) == {"pool": 0, "host": 0, "disk": 0}
        complete(s)
        t = tiers(s)
        assert t["pool"] > 0 and t["host"] == 0 and t["disk"] == 0
        assert t["pool"] == s.metric("pagoda_prefix_cache_hits_total")
    finally:
        s.stop()


def preempting_load(server):
    """Four requests at once whose outputs outgrow a small pool: preemptions."""
    prompts = [PROMPT, OTHER, THIRD, OTHER.replace("Tom", "Ben")]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(lambda p: complete(server, p, 100, ignore_eos=True)[0], prompts))
    assert server.metric("pagoda_num_preemptions_total") > 0
    return outs, server.metric("pagoda_recomputed_tokens_total"), tiers(server)


def test_preemption_recomputes_or_swaps(pagoda_bin, stories):
    s = serve(pagoda_bin, stories, 256)
    try:
        alone, recomputed, _ = preempting_load(s)
        assert recomputed > 0  # nothing below the pool: what a preemption dropped is computed again
    finally:
        s.stop()
    s = serve(pagoda_bin, stories, 256, "--kv-offload-gb", "0.01")
    try:
        swapped, recomputed_with_host, t = preempting_load(s)
        assert swapped == alone
        assert t["host"] > 0  # a preempted request's blocks came back from host memory
        assert recomputed_with_host < recomputed
        assert engine(s)["recomputed_tokens"] == recomputed_with_host
    finally:
        s.stop()


def test_refusals(pagoda_bin, stories):
    r = subprocess.run([str(pagoda_bin), "run", "-m", str(stories), "-p", "Hi", "-n", "2",
                        "--kv-offload-gb", "0.0000001"], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "hold no KV block" in r.stderr, r.stderr
    r = subprocess.run([str(pagoda_bin), "serve", "-m", f"a={stories}", "-m", f"b={stories}",
                        "--kv-offload-gb", "1"], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "--kv-offload-gb serves one model" in r.stderr, r.stderr


def test_the_cuda_backend_refuses_the_host_tier(pagoda_bin, stories):
    """Its copies (Backend::download and upload) have not run on a device: refused in one line
    before anything loads, with or without a CUDA build."""
    for cmd in (["run", "-m", str(stories), "-p", "Hi", "-n", "2"], ["serve", "-m", str(stories)]):
        r = subprocess.run([str(pagoda_bin), *cmd, "--backend", "cuda", "--kv-offload-gb", "1"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 1, r.stderr
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and "--kv-offload-gb: the cuda backend does not take" in lines[0], \
            r.stderr
