#!/usr/bin/env python3
"""Prefix caching on a hybrid model (Qwen3.5's shape): time to the first token of a long prompt
cold, then of the same prompt again (a hit restores the recurrent state from a checkpoint and
computes the rest), then of a next turn (the prompt and more tokens after it), on one
`pagoda serve`; and the same cold prompt on a server without prefix caching (what the chunk cut
at the last full block costs a cold prompt).

    python3 bench/hybrid_prefix.py [--like qwen3.5-0.8b] [--type q8_0] [--prompt-tokens 4000] \\
        [--model FILE] [--threads 2]

The prompt is random token ids (a seeded generator), sent as a list. Speed is measured here,
never asserted in tests.
"""
import argparse
import json
import random
import tempfile
import time
import urllib.request

from benchutil import ROOT, Server, pagoda_serve_cmd, print_table, synth_model


def first_token(url, ids, max_tokens=4):
    """Seconds from sending a streamed greedy completion of `ids` to its first chunk."""
    body = {"prompt": ids, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "ignore_eos": True}
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    start = time.perf_counter()
    with urllib.request.urlopen(req, timeout=3600) as r:
        for raw in r:
            if raw.startswith(b"data: {") and json.loads(raw[6:])["choices"]:
                ttft = time.perf_counter() - start
                r.read()
                return ttft
    raise RuntimeError("no output")


def hit_tokens(url):
    """The server's prefix-cache hit tokens so far (/stats)."""
    with urllib.request.urlopen(url + "/stats", timeout=30) as r:
        return json.loads(r.read())["prefix_cache_hit_tokens"]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pagoda", default=str(ROOT / "build" / "pagoda"))
    p.add_argument("--like", default="qwen3.5-0.8b")
    p.add_argument("--type", default="q8_0")
    p.add_argument("--model", help="a model file (default: synthesized from --like and --type)")
    p.add_argument("--prompt-tokens", type=int, default=4000)
    p.add_argument("--next-tokens", type=int, default=100, help="new tokens of the next turn")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch", type=int, default=512, help="--max-batched-tokens")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model = args.model or str(synth_model(args.pagoda, args.like, args.type, tmp))
        rng = random.Random(7)
        prompt = [rng.randrange(1000, 100000) for _ in range(args.prompt_tokens)]
        turn = prompt + [rng.randrange(1000, 100000) for _ in range(args.next_tokens)]
        kv = args.prompt_tokens + args.next_tokens + 256
        rows = []
        with Server("pagoda", pagoda_serve_cmd(args.pagoda, model, args.threads, kv, args.batch,
                                               max_seqs=4)) as s:
            for name, ids in [("cold", prompt), ("same prompt again (hit)", prompt),
                              (f"next turn (+{args.next_tokens} tokens)", turn)]:
                before = hit_tokens(s.url)
                ttft = first_token(s.url, ids)
                rows.append([name, len(ids), hit_tokens(s.url) - before, f"{ttft:.2f}"])
                print(rows[-1], flush=True)
        off = pagoda_serve_cmd(args.pagoda, model, args.threads, kv, args.batch, max_seqs=4,
                               extra=["--no-prefix-caching"])
        with Server("pagoda", off) as s:
            rows.append(["cold, --no-prefix-caching", len(prompt), 0,
                         f"{first_token(s.url, prompt):.2f}"])
            print(rows[-1], flush=True)
    print_table(f"TTFT of a {args.prompt_tokens}-token prompt, {args.like} {args.type}, "
                f"-t {args.threads}, --max-batched-tokens {args.batch}",
                ["request", "prompt tokens", "hit tokens", "TTFT s"], rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
