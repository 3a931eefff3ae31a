#!/usr/bin/env python3
"""pagoda's `bench latency` beside llama.cpp's `llama-bench` on the same GGUF files, alternated.

For each file, every round runs both tools in fresh processes, the order alternating round by
round (pagoda first in even rounds):

  pagoda       `pagoda bench latency -m FILE -t T --prompt-len P --output-len N --runs R
               --warmup 1`: prefill tok/s = P / time to first token; decode tok/s = 1 / mean
               time per output token after the first (the decode runs after the P-token prompt).
  llama-bench  `llama-bench -m FILE -t T -p P -n N -r R -lm none -o json` (its own warm-up run):
               the pp and tg tests' mean tok/s. Its tg test decodes from an empty context, so
               at equal speed it reads P fewer K/V rows a token than pagoda's decode does.

Both keep K/V in F16. `-lm none` reads the weights into memory instead of mapping them, so a VM
that drops its page cache cannot slow llama.cpp's decode with disk reads; pagoda maps the file
and its CPU backend repacks what it multiplies. Memory is each process's peak resident set
(wait4's ru_maxrss). Prints every round and, per file, the medians and the median of the
rounds' ratios.

    # llama-bench built from llama.cpp's tree outside this repository (see docs/BENCHMARKS.md)
    python3 bench/llama_bench_compare.py --llama-bench PATH/llama-bench -m a.gguf [-m b.gguf] \\
        [--prompt-tokens 128] [--decode-tokens 32] [--rounds 2] [--json out.json]

Speed is measured here, never asserted in tests.
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys

from benchutil import ROOT, median, print_table, ratio_summary, round_order


def run_with_rss(cmd):
    """(stdout, peak resident bytes) of `cmd`; raises when it does not exit 0."""
    with open(os.devnull, "w") as devnull, subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=devnull, text=True) as proc:
        out = proc.stdout.read()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} exited {proc.returncode}")
    return out, usage.ru_maxrss * 1024


def run_pagoda(args, model):
    cmd = [args.pagoda, "bench", "latency", "-m", str(model), "-t", str(args.threads),
           "--prompt-len", str(args.prompt_tokens), "--output-len", str(args.decode_tokens),
           "--runs", str(args.runs), "--warmup", "1", "--kv-type", "f16", "--no-progress",
           "--json", "-"]
    out, rss = run_with_rss(cmd)
    r = json.loads(out)
    return {"prefill": args.prompt_tokens / (r["ttft_ms"]["mean"] / 1e3),
            "decode": 1e3 / r["decode_ms_per_token"]["mean"], "rss": rss}


def run_llama_bench(args, model):
    cmd = [args.llama_bench, "-m", str(model), "-t", str(args.threads),
           "-p", str(args.prompt_tokens), "-n", str(args.decode_tokens), "-r", str(args.runs),
           "-lm", "none", "-o", "json"]
    out, rss = run_with_rss(cmd)
    tests = json.loads(out)
    pp = [t["avg_ts"] for t in tests if t["n_prompt"] > 0 and t["n_gen"] == 0]
    tg = [t["avg_ts"] for t in tests if t["n_gen"] > 0 and t["n_prompt"] == 0]
    return {"prefill": pp[0], "decode": tg[0], "rss": rss}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", action="append", required=True, help="GGUF file (repeat)")
    ap.add_argument("--llama-bench", default=os.environ.get("LLAMA_BENCH"),
                    help="llama-bench binary (default: $LLAMA_BENCH)")
    ap.add_argument("--pagoda", default=str(ROOT / "build" / "pagoda"))
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--decode-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=1, help="measured runs inside each tool")
    ap.add_argument("--rounds", type=int, default=2, help="rounds per file, order alternating")
    ap.add_argument("--json", help="write every round here")
    args = ap.parse_args()
    if not args.llama_bench:
        ap.error("give --llama-bench PATH or set $LLAMA_BENCH")

    print(f"{args.threads} threads, prompt {args.prompt_tokens}, decode {args.decode_tokens}, "
          f"{args.runs} run(s) a tool a round, K/V F16; load average "
          f"{os.getloadavg()[0]:.2f}", flush=True)
    results = []
    for model in map(pathlib.Path, args.model):
        rounds = []
        for r in range(args.rounds):
            order = round_order(["pagoda", "llama.cpp"], r)
            row = {"round": r, "first": order[0]}
            for engine in order:
                row[engine] = (run_pagoda if engine == "pagoda" else run_llama_bench)(args, model)
            row["load"] = os.getloadavg()[0]
            p, q = row["pagoda"], row["llama.cpp"]
            print(f"{model.name} round {r} ({order[0]} first, load {row['load']:.2f}): prefill "
                  f"pagoda {p['prefill']:.1f} llama.cpp {q['prefill']:.1f} | decode pagoda "
                  f"{p['decode']:.2f} llama.cpp {q['decode']:.2f} | peak RSS pagoda "
                  f"{p['rss'] / 2**20:.0f} MiB llama.cpp {q['rss'] / 2**20:.0f} MiB", flush=True)
            rounds.append(row)
        results.append({"model": model.name, "file_bytes": model.stat().st_size,
                        "rounds": rounds})

    rows = []
    for t in results:
        rs = t["rounds"]

        def col(engine, key):
            return [x[engine][key] for x in rs]
        pp, lp = col("pagoda", "prefill"), col("llama.cpp", "prefill")
        pd, ld = col("pagoda", "decode"), col("llama.cpp", "decode")
        rows.append([t["model"], f"{t['file_bytes'] / 2**30:.2f} GiB",
                     f"{median(pp):.1f}", f"{median(lp):.1f}",
                     ratio_summary([a / b for a, b in zip(pp, lp)]),
                     f"{median(pd):.2f}", f"{median(ld):.2f}",
                     ratio_summary([a / b for a, b in zip(pd, ld)]),
                     f"{max(col('pagoda', 'rss')) / 2**20:,.0f}",
                     f"{max(col('llama.cpp', 'rss')) / 2**20:,.0f}"])
    print_table(f"Medians over {args.rounds} alternated rounds ({args.threads} threads, prompt "
                f"{args.prompt_tokens}, decode {args.decode_tokens}; tok/s; ratio: median of "
                "the rounds' pagoda/llama.cpp (range); peak RSS in MiB):",
                ["file", "size", "prefill pagoda", "llama-bench", "ratio", "decode pagoda",
                 "llama-bench", "ratio", "RSS pagoda", "RSS llama-bench"], rows)
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(
            {"threads": args.threads, "prompt_tokens": args.prompt_tokens,
             "decode_tokens": args.decode_tokens, "runs": args.runs, "files": results},
            indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())
