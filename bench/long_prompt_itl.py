#!/usr/bin/env python3
"""What one long prompt does to everyone else: a streaming request decodes while another client
sends a prompt of thousands of tokens, and a short request arrives just behind it. Prints the
streaming request's gaps between tokens before and during the long prefill (median and largest),
how long the long prompt took to its first token, and the short request's time to first token.

    python3 bench/long_prompt_itl.py --server new=build/pagoda --server old=/path/to/old/pagoda

Servers run one after the other with the same model, threads, KV memory and step budget.
"""
import argparse
import json
import sys
import threading
import time
import urllib.request

from benchutil import ROOT, Server, median, pagoda_serve_cmd, print_table, round_order


def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    return urllib.request.urlopen(req, timeout=1800)


def stream_times(url, prompt, max_tokens, times):
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "ignore_eos": True}
    with post(url + "/v1/completions", body) as r:
        for raw in r:
            if raw.startswith(b"data: {"):
                times.append(time.perf_counter())


def first_token_time(url, prompt):
    start = time.perf_counter()
    with post(url + "/v1/completions", {"prompt": prompt, "max_tokens": 1, "temperature": 0,
                                        "stream": True}) as r:
        for raw in r:
            if raw.startswith(b"data: {"):
                return time.perf_counter() - start
    return time.perf_counter() - start


def measure(name, binary, args):
    # The build's default K/V type and slots.
    make_cmd = pagoda_serve_cmd(binary, args.model, args.threads, args.kv_tokens, args.budget,
                                kv_type=None)
    with Server(name, make_cmd, timeout=120) as server:
        url = server.url
        # Distinct words so the prefix cache cannot shorten the long prompt between runs.
        long_prompt = " ".join(f"w{i % 997}x{i // 997}" for i in range(args.long_words))
        first_token_time(url, "Warm up.")
        times = []
        decoder = threading.Thread(target=stream_times,
                                   args=(url, "Once upon a time", args.decode_tokens, times))
        decoder.start()
        while len(times) < 20:
            time.sleep(0.01)
        sent = time.perf_counter()
        result = {}

        def long_request():
            result["long_ttft"] = first_token_time(url, long_prompt)

        longer = threading.Thread(target=long_request)
        longer.start()
        time.sleep(0.05)
        result["short_ttft"] = first_token_time(url, "A short question:")
        longer.join()
        done = sent + result["long_ttft"]
        decoder.join()
        gaps_before = [b - a for a, b in zip(times, times[1:]) if b < sent]
        gaps_during = [b - a for a, b in zip(times, times[1:]) if b > sent and a < done]
        return {
            "server": name,
            "gap_before_ms": 1000 * median(gaps_before),
            "gap_during_median_ms": 1000 * median(gaps_during) if gaps_during else None,
            "gap_during_max_ms": 1000 * max(gaps_during) if gaps_during else None,
            "tokens_during": len(gaps_during),
            "long_ttft_s": result["long_ttft"],
            "short_ttft_s": result["short_ttft"],
        }


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--server", action="append", default=[], help="NAME=PAGODA_BINARY")
    p.add_argument("--model", default=str(ROOT / "models" / "smollm2-135m-instruct-q4_1.gguf"))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--kv-tokens", type=int, default=16384)
    p.add_argument("--budget", type=int, default=2048, help="--max-batched-tokens")
    p.add_argument("--long-words", type=int, default=1150,
                   help="about 6 tokens a word on SmolLM2: a 6,800-token prompt")
    p.add_argument("--decode-tokens", type=int, default=4000)
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args()
    servers = [s.split("=", 1) for s in args.server] or [["pagoda", str(ROOT / "build/pagoda")]]
    rows = []
    for r in range(args.rounds):
        for name, binary in round_order(servers, r):
            row = measure(name, binary, args)
            row["round"] = r
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    table = []
    for x in rows:
        during = (f"{x['gap_during_median_ms']:.0f} / {x['gap_during_max_ms']:.0f} ms"
                  if x["gap_during_max_ms"] is not None else "no token")
        table.append([x["server"], x["round"], f"{x['gap_before_ms']:.1f} ms", during,
                      x["tokens_during"], f"{x['long_ttft_s']:.2f} s",
                      f"{x['short_ttft_s']:.2f} s"])
    print_table(None, ["server", "round", "gap before (median)",
                       "gap during long prefill (median / max)", "tokens during",
                       "long prompt TTFT", "short request TTFT"], table)


if __name__ == "__main__":
    main()
