#!/usr/bin/env python3
"""`pagoda bench serve` against pagoda's server and llama.cpp's own `llama-server` on the same
GGUF file and request set, at several concurrencies, over several rounds.

Both servers get the same threads, the same K/V memory (`--kv-tokens N --kv-type f16` against
`-c N -ctk f16 -ctv f16` over one unified cache), the same token budget per step
(`--max-batched-tokens B` against `-b B`) and the same number of sequences at once
(`--max-seqs P` against `-np P` parallel slots, with llama-server's continuous batching). They
are loaded one after the other, never at once; the order alternates round by round. Each server,
once healthy, gets an untimed warm-up (a few requests at once), then one `bench serve` run per
concurrency, each with its own prompts (seed = the level's index + 1, the same for both servers),
so neither server's prompt cache holds a prompt it is then asked.

Prints every round and, per concurrency, the median of the rounds' output tokens/s ratios; writes
every run into OUT/serve_compare.json and OUT/serve_compare.csv.

    python3 bench/compare_serve.py --llama-server PATH/llama-server \\
        [--model models/smollm2-135m-instruct-q4_1.gguf] [--rounds 3] [--out docs/bench]

Speed is measured here, never asserted.
"""
import argparse
import csv
import io
import json
import os
import pathlib
import subprocess
import sys
import tempfile

from benchutil import (ROOT, Server, llama_server_cmd, llama_server_path, median,
                       pagoda_serve_cmd, print_table, ratio_summary, round_order)


def bench_serve(args, url, label, concurrency, seed, num_prompts, output_len, tmp):
    """One `pagoda bench serve` run: (its endpoint JSON, its CSV rows)."""
    json_path, csv_path = tmp / "run.json", tmp / "run.csv"
    cmd = [args.pagoda, "bench", "serve", "--url", url, "--label", label,
           "--concurrency", str(concurrency), "--num-prompts", str(num_prompts),
           "--prompt-len", args.prompt_len, "--output-len", str(output_len), "--seed", str(seed),
           "--timeout", "600", "--json", str(json_path), "--csv", str(csv_path)]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = json.loads(json_path.read_text())["endpoints"][0]
    if endpoint["failed"]:
        raise RuntimeError(f"{label}: {endpoint['failed']} requests failed: "
                           f"{endpoint['error_counts']}")
    return endpoint, list(csv.DictReader(io.StringIO(csv_path.read_text())))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=str(ROOT / "models" / "smollm2-135m-instruct-q4_1.gguf"))
    ap.add_argument("--pagoda", default=str(ROOT / "build" / "pagoda"))
    ap.add_argument("--llama-server", help="llama.cpp's llama-server (else $LLAMA_SERVER)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--kv-tokens", type=int, default=16384, help="K/V cache tokens, both servers")
    ap.add_argument("--batch", type=int, default=512, help="tokens per step (llama-server -b)")
    ap.add_argument("--parallel", type=int, default=16,
                    help="sequences at once (pagoda --max-seqs, llama-server -np)")
    ap.add_argument("--concurrency", default="1,4,16")
    ap.add_argument("--num-prompts", type=int, default=32)
    ap.add_argument("--prompt-len", default="128")
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "docs" / "bench"))
    args = ap.parse_args()
    llama = llama_server_path(args.llama_server)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    levels = [int(c) for c in args.concurrency.split(",")]
    servers = [
        ("pagoda", pagoda_serve_cmd(args.pagoda, args.model, args.threads, args.kv_tokens,
                                    args.batch, args.parallel)),
        ("llama.cpp", llama_server_cmd(llama, args.model, args.threads, args.kv_tokens,
                                       args.batch, args.parallel)),
    ]
    for name, make_cmd in servers:
        print(f"{name}: " + " ".join(os.path.relpath(c, ROOT) if c.startswith(str(ROOT)) else c
                                     for c in make_cmd("PORT")), flush=True)

    runs, csv_rows = [], []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        for r in range(args.rounds):
            for order, (name, make_cmd) in enumerate(round_order(servers, r)):
                with Server(name, make_cmd) as server:
                    bench_serve(args, server.url, name, max(levels), 1000, max(levels), 8, tmp)
                    for i, c in enumerate(levels):
                        e, rows = bench_serve(args, server.url, name, c, i + 1, args.num_prompts,
                                              args.output_len, tmp)
                        runs.append({"round": r, "order": order + 1, "engine": name,
                                     "concurrency": c, "endpoint": e})
                        csv_rows += [{"round": r, **row} for row in rows]
                        print(f"round {r}: {name} c={c}: {e['output_throughput']:.1f} output "
                              f"tok/s, TTFT p50 {e['ttft_ms']['p50']:.1f} ms, TPOT p50 "
                              f"{e['tpot_ms']['p50']:.2f} ms", flush=True)

    def get(r, engine, c):
        return next(x["endpoint"] for x in runs
                    if (x["round"], x["engine"], x["concurrency"]) == (r, engine, c))

    title = (f"{pathlib.Path(args.model).name}, {args.num_prompts} prompts of {args.prompt_len} "
             f"tokens, {args.output_len} output tokens, {args.threads} threads, "
             f"{args.kv_tokens}-token F16 K/V, {args.parallel} sequences at once, step budget "
             f"{args.batch}; {args.rounds} rounds, order alternating")
    rows, ratios = [], {}
    for c in levels:
        for r in range(args.rounds):
            p, l = get(r, "pagoda", c), get(r, "llama.cpp", c)
            ratio = p["output_throughput"] / l["output_throughput"]
            ratios.setdefault(c, []).append(ratio)
            rows.append([c, r, round_order(servers, r)[0][0], f"{p['output_throughput']:.1f}",
                         f"{l['output_throughput']:.1f}", f"{ratio:.2f}x",
                         f"{p['ttft_ms']['p50']:.1f}", f"{l['ttft_ms']['p50']:.1f}",
                         f"{p['tpot_ms']['p50']:.2f}", f"{l['tpot_ms']['p50']:.2f}"])
    columns = ["output tok/s pagoda", "llama.cpp", "ratio", "TTFT p50 ms pagoda", "llama.cpp",
               "TPOT p50 ms pagoda", "llama.cpp"]
    print_table(title, ["concurrency", "round", "first", *columns], rows)

    def m(c, engine, key, sub=None):
        return median([get(r, engine, c)[key][sub] if sub else get(r, engine, c)[key]
                       for r in range(args.rounds)])
    rows = [[c, f"{m(c, 'pagoda', 'output_throughput'):.1f}",
             f"{m(c, 'llama.cpp', 'output_throughput'):.1f}", ratio_summary(ratios[c]),
             f"{m(c, 'pagoda', 'ttft_ms', 'p50'):.1f}",
             f"{m(c, 'llama.cpp', 'ttft_ms', 'p50'):.1f}",
             f"{m(c, 'pagoda', 'tpot_ms', 'p50'):.2f}",
             f"{m(c, 'llama.cpp', 'tpot_ms', 'p50'):.2f}"] for c in levels]
    print_table("Medians over the rounds (ratio: the median of the rounds' ratios, range):",
                ["concurrency", *columns], rows)

    (out / "serve_compare.json").write_text(json.dumps(
        {"settings": {**{k: v for k, v in vars(args).items()
                         if k not in ("pagoda", "llama_server", "out", "model")},
                      "model": pathlib.Path(args.model).name},
         "runs": runs}, indent=1) + "\n")
    with open(out / "serve_compare.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(csv_rows[0]))
        writer.writeheader()
        writer.writerows(csv_rows)


if __name__ == "__main__":
    sys.exit(main())
