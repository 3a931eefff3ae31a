#!/usr/bin/env python3
"""Offline throughput: pagoda's batched engine against llama.cpp's batched decoding
(llama-cpp-python's low-level API) on the same file and requests, and against the same requests
run one after another.

`pagoda synth` writes a random-weight file with a real model's shape and the Llama 3 vocabulary
(as bench/compare_llamacpp.py does). Each round runs these, in an order that rotates round by
round (so each goes first in turn), every one in a fresh process or context with one untimed
warm-up request:

  all         pagoda bench throughput: every request at once (--max-seqs = the request count).
  sequential  pagoda bench throughput --max-seqs 1 --no-prefix-caching: the same requests one
              after another, each alone.
  streams     pagoda bench throughput --max-seqs S: at most S sequences at once.
  llama       llama.cpp: the same token ids and output lengths over S sequence ids in one context
              (continuous batching: a stream that finishes takes the next request; prompts
              chunked into the same token budget per llama_decode call as pagoda's steps;
              greedy argmax in numpy; end-of-generation ignored).

Both engines keep K/V in F16 (llama.cpp's default; pagoda --kv-type f16). Reported per round:
wall time, output and total tokens/s (total = (prompt + output tokens) / wall), each pagoda run
against llama.cpp's run of the same round and the batched run against the sequential one; then
the medians over the rounds and the median of the rounds' ratios. The pagoda runs save the
requests' token ids, which llama.cpp replays (so round 0 runs pagoda first).

    pip install llama-cpp-python        # builds llama.cpp from source; not needed by CI
    # $LLAMA_CPP_LIB_PATH=DIR uses the libllama.so in DIR instead of the package's own build.
    python3 bench/throughput_llamacpp.py [--num-requests 32] [--prompt-len 128:512] \\
        [--modes all,sequential,streams,llama] [--rounds 3]

Speed is measured here, never asserted in tests (the test suite never runs this script).
"""
import argparse
import json
import pathlib
import subprocess
import sys
import tempfile

from benchutil import (ROOT, LlamaCpp, median, print_table, ratio_summary, round_order,
                       synth_model)


def run_pagoda(args, model, saved, *extra):
    cmd = [args.pagoda, "bench", "throughput", "-m", str(model), "-n", str(args.num_requests),
           "--prompt-len", args.prompt_len, "--output-len", args.output_len,
           "--seed", str(args.seed), "-t", str(args.threads), "--kv-type", args.kv_type,
           "--max-batched-tokens", str(args.token_budget), "--save-requests", str(saved),
           "--no-progress", "--json", "-", *map(str, extra)]
    print("$ " + " ".join(map(str, cmd)), flush=True)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"pagoda exited {r.returncode}: {r.stderr}")
    return json.loads(r.stdout)


def pagoda_row(run, mode):
    return {"engine": "pagoda", "mode": mode, "num_requests": run["num_requests"],
            "prompt_tokens": run["prompt_tokens"], "output_tokens": run["output_tokens"],
            "wall_s": run["wall_s"], "output_tokens_per_s": run["output_tokens_per_s"],
            "total_tokens_per_s": run["total_tokens_per_s"],
            "mean_seqs_per_step": run["mean_seqs_per_step"],
            "mean_tokens_per_step": run["mean_tokens_per_step"],
            "kv_utilization_peak": run["kv_utilization_peak"],
            "num_preemptions": run["num_preemptions"]}


def llamacpp_row(args, model, requests):
    max_len = max(len(p) + n for p, n in requests)
    print(f"llama.cpp: {args.streams} streams ...", flush=True)
    with LlamaCpp(model, args.streams, max_len, args.threads, args.token_budget) as engine:
        engine.run([(requests[0][0][:8], 2)], progress=False)  # warm-up, as pagoda's
        wall, num_output = engine.run(requests)
    num_prompt = sum(len(p) for p, _ in requests)
    assert num_output == sum(n for _, n in requests), "llama.cpp produced a wrong token count"
    return {"engine": "llama.cpp", "mode": f"batched, {args.streams} streams",
            "num_requests": len(requests), "prompt_tokens": num_prompt,
            "output_tokens": num_output, "wall_s": wall, "output_tokens_per_s": num_output / wall,
            "total_tokens_per_s": (num_prompt + num_output) / wall}


def run_unit(unit, args, model, saved):
    """The row of one unit of a round: 'all', 'sequential', 'streams' or 'llama'."""
    if unit == "all":
        out = run_pagoda(args, model, saved, "--max-seqs", args.num_requests)
        return pagoda_row(out["runs"][0], f"batched, all {args.num_requests} at once")
    if unit == "sequential":
        out = run_pagoda(args, model, saved, "--max-seqs", 1, "--no-prefix-caching")
        return pagoda_row(out["runs"][0], "sequential")
    if unit == "streams":
        out = run_pagoda(args, model, saved, "--max-seqs", args.streams)
        return pagoda_row(out["runs"][0], f"batched, {args.streams} streams")
    requests = [(r["prompt"], r["output_len"]) for r in json.loads(saved.read_text())["requests"]]
    return llamacpp_row(args, model, requests)


def ratio_cell(x):
    return "-" if x is None else f"{x:.2f}x"


def print_tables(rounds, header):
    print()
    print(header)
    rows = [[x["round"], r["order"], r["engine"], r["mode"], f"{r['wall_s']:.1f}",
             f"{r['output_tokens_per_s']:.1f}", f"{r['total_tokens_per_s']:.1f}",
             ratio_cell(r.get("vs_llama")), ratio_cell(r.get("vs_sequential"))]
            for x in rounds for r in x["rows"]]
    print_table("Every round (order: its place in the round):",
                ["round", "order", "engine", "mode", "wall s", "output tok/s", "total tok/s",
                 "vs llama.cpp", "vs sequential"], rows)
    rows = []
    for engine, mode in dict.fromkeys((r["engine"], r["mode"]) for x in rounds for r in x["rows"]):
        rs = [r for x in rounds for r in x["rows"] if (r["engine"], r["mode"]) == (engine, mode)]

        def ratio(key):
            values = [r[key] for r in rs if r.get(key) is not None]
            return ratio_summary(values) if values else "-"
        rows.append([engine, mode, f"{median([r['wall_s'] for r in rs]):.1f}",
                     f"{median([r['output_tokens_per_s'] for r in rs]):.1f}",
                     f"{median([r['total_tokens_per_s'] for r in rs]):.1f}", ratio("vs_llama"),
                     ratio("vs_sequential")])
    print_table("Medians over the rounds; ratios: the median of the rounds' ratios (range):",
                ["engine", "mode", "wall s", "output tok/s", "total tok/s", "vs llama.cpp",
                 "vs sequential"], rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--like", default="llama-3.2-1b")
    ap.add_argument("--type", default="q4_0")
    ap.add_argument("--num-requests", type=int, default=32)
    ap.add_argument("--prompt-len", default="128:512")
    ap.add_argument("--output-len", default="128")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--streams", type=int, default=16, help="concurrent sequences (pagoda "
                    "--max-seqs, llama.cpp sequence ids)")
    ap.add_argument("--token-budget", type=int, default=2048,
                    help="tokens per step / llama_decode call (pagoda --max-batched-tokens)")
    ap.add_argument("--kv-type", default="f16", choices=["f16", "f32"],
                    help="pagoda's K/V values (llama.cpp's are F16)")
    ap.add_argument("--modes", default="all,streams,llama",
                    help="what each round runs, from all, sequential, streams, llama")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out-dir", default=str(ROOT / "build" / "bench-models"))
    ap.add_argument("--pagoda", default=str(ROOT / "build" / "pagoda"))
    ap.add_argument("--json-out", help="also write every round's rows as JSON here")
    args = ap.parse_args()
    units = args.modes.split(",")
    known = {"all", "sequential", "streams", "llama"}
    if not set(units) <= known or len(set(units)) != len(units):
        sys.exit("--modes: a list of distinct names from all, sequential, streams, llama")
    if units == ["llama"]:
        sys.exit("--modes: llama.cpp replays the requests a pagoda run saves: add a pagoda run")
    # Round 0 runs pagoda first, so the requests are saved before llama.cpp replays them.
    units = [u for u in units if u != "llama"] + [u for u in units if u == "llama"]

    import llama_cpp
    out_dir = pathlib.Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    model = synth_model(args.pagoda, args.like, args.type, out_dir)
    rounds = []
    with tempfile.TemporaryDirectory() as tmp:
        saved = pathlib.Path(tmp) / "requests.json"
        for r in range(args.rounds):
            order = round_order(units, r)
            rows = []
            for i, unit in enumerate(order):
                row = run_unit(unit, args, model, saved)
                row["order"] = i + 1
                rows.append(row)
                print(f"round {r}: {row['engine']} {row['mode']}: {row['wall_s']:.1f} s, "
                      f"{row['total_tokens_per_s']:.1f} total tok/s", flush=True)
            llama = next((x for x in rows if x["engine"] == "llama.cpp"), None)
            seq = next((x for x in rows if x["mode"] == "sequential"), None)
            for x in rows:
                if x["engine"] == "pagoda" and llama:
                    x["vs_llama"] = x["total_tokens_per_s"] / llama["total_tokens_per_s"]
                if x["engine"] == "pagoda" and seq and x is not seq:
                    x["vs_sequential"] = x["total_tokens_per_s"] / seq["total_tokens_per_s"]
            rounds.append({"round": r, "order": order, "rows": rows})
    first = rounds[0]["rows"][0]
    header = (f"{args.like} {args.type} ({model.stat().st_size / 2**20:.0f} MiB), "
              f"{first['num_requests']} requests, prompt {args.prompt_len} tokens "
              f"(seed {args.seed}: {first['prompt_tokens']} in all), output {args.output_len}, "
              f"{args.threads} threads, token budget {args.token_budget}, K/V pagoda "
              f"{args.kv_type}, llama.cpp f16 (llama-cpp-python {llama_cpp.__version__}); "
              f"{args.rounds} rounds, order rotating")
    print_tables(rounds, header)
    if args.json_out:
        pathlib.Path(args.json_out).write_text(json.dumps({"header": header, "rounds": rounds},
                                                          indent=2) + "\n")


if __name__ == "__main__":
    sys.exit(main())
