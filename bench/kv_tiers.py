#!/usr/bin/env python3
"""A multi-turn agent workload on a KV cache that holds about one conversation (issue 36):
several conversations take turns, each turn sending the whole conversation so far (the last
answer and a new message appended), so by the time a conversation comes back the others have
pushed its blocks out of the pool. Time to first token per turn with the pool alone (its prefix
is recomputed), with the host-memory tier (--kv-offload-gb) and with the disk tier (--kv-disk).
Greedy outputs are checked equal across the three.

    python3 bench/kv_tiers.py --model models/smollm2-135m-instruct-q4_1.gguf

Every server runs with the same threads, KV memory and step budget; one request at a time.
"""
import argparse
import json
import statistics
import tempfile
import time
import urllib.request

from benchutil import ROOT, Server, first_token, pagoda_serve_cmd, print_table


def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=1800) as r:
        return json.loads(r.read())


def metric(url, name):
    with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return 0.0


def messages(source, conversations, turns, chunk):
    """[conversation][turn] new text: consecutive pieces of `source`, `chunk` bytes each."""
    out, at = [], 0
    for _ in range(conversations):
        conv = []
        for _ in range(turns):
            conv.append(source[at:at + chunk])
            at = (at + chunk) % max(1, len(source) - chunk)
        out.append(conv)
    return out


def run(url, msgs, max_tokens):
    """Turns round-robin over the conversations: TTFT per turn (a list per turn) and texts."""
    history = ["" for _ in msgs]
    ttfts = [[] for _ in msgs[0]]
    texts = []
    for turn in range(len(msgs[0])):
        for c, conv in enumerate(msgs):
            history[c] += "\nUser: " + conv[turn] + "\nAssistant:"
            ttft, text = first_token(url, history[c], max_tokens, ignore_eos=True)
            history[c] += text
            ttfts[turn].append(ttft)
            texts.append(text)
    return ttfts, texts


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--pagoda", default=str(ROOT / "build" / "pagoda"))
    p.add_argument("--model", required=True)
    p.add_argument("--source", default=str(ROOT / "docs" / "SCHEDULER.md"))
    p.add_argument("--conversations", type=int, default=4)
    p.add_argument("--turns", type=int, default=4)
    p.add_argument("--chunk-bytes", type=int, default=1200, help="a new message's length")
    p.add_argument("--max-tokens", type=int, default=16, help="an answer's length")
    p.add_argument("--kv-tokens", type=int, default=1536, help="the pool: about one conversation")
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    source = open(args.source, encoding="utf-8").read()
    msgs = messages(source, args.conversations, args.turns, args.chunk_bytes)

    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        configs = [("pool alone (recomputed)", []),
                   ("pool + host memory (--kv-offload-gb 1)", ["--kv-offload-gb", "1"]),
                   ("pool + disk (--kv-disk)", ["--kv-disk", f"{tmp}/disk"])]
        for name, extra in configs:
            cmd = pagoda_serve_cmd(args.pagoda, args.model, args.threads, args.kv_tokens, 512,
                                   max_seqs=1, extra=["--max-model-len", str(args.kv_tokens),
                                                      *extra])
            with Server(name, cmd) as s:
                start = time.perf_counter()
                ttfts, texts = run(s.url, msgs, args.max_tokens)
                wall = time.perf_counter() - start
                hits = {t: metric(s.url, f"pagoda_prefix_cache_{t}_hits_total")
                        for t in ("pool", "host", "disk")}
                queried = metric(s.url, "pagoda_prefix_cache_queries_total")
            results[name] = (ttfts, texts, wall, hits, queried)
    base = next(iter(results.values()))
    for name, (_, texts, _, _, _) in results.items():
        assert texts == base[1], f"{name}: outputs differ from the pool alone's"

    columns = ["configuration"] + [f"turn {t + 1} TTFT p50" for t in range(args.turns)] + [
        "all turns", "prompt tokens from pool / host / disk"]
    rows = []
    for name, (ttfts, _, wall, hits, queried) in results.items():
        per_turn = [f"{statistics.median(t):.2f} s" for t in ttfts]
        rows.append([name, *per_turn, f"{wall:.1f} s",
                     f"{hits['pool']:.0f} / {hits['host']:.0f} / {hits['disk']:.0f} "
                     f"of {queried:.0f}"])
    print(f"{args.conversations} conversations x {args.turns} turns, {args.chunk_bytes}-byte "
          f"messages, {args.max_tokens}-token answers, a {args.kv_tokens}-token pool")
    print_table(None, columns, rows)


if __name__ == "__main__":
    main()
