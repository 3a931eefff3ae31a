#!/usr/bin/env python3
"""pagoda against llama.cpp (llama-cpp-python's build) on the same synthetic GGUF files: prefill
of a P-token prompt and decode of N tokens, one sequence, T threads.

For each weight type `pagoda synth` writes a random-weight file with a real model's shape and the
Llama 3 vocabulary. Then every round runs both engines on the same prompt ids, the order
alternating round by round (pagoda first in even rounds), each in a fresh process or context:

  pagoda     `pagoda bench throughput -n 1 --prompt-len P --output-len N --kv-type f16`: loads
             the model, runs one untimed 8-token request (2 output tokens), then the timed one.
  llama.cpp  llama-cpp-python's low-level API (llama_decode, argmax sampling): loads the model,
             runs the same untimed 8-token, 2-token request, then the timed one.

Both keep K/V in F16 (llama.cpp's default; pagoda's `--kv-type`, `--kv-type f32` here for its
own default). Prefill tok/s = P / time to the first token; decode tok/s = (N - 1) / time from
the first token to the last. The machine's streaming-read bandwidth is sampled before every
round (bench_kernels when built, else numpy) and decode GB/s = file bytes x decode tok/s is set
against the best sample of that type's rounds.

Prints every round and, per type, the medians and the median of the rounds' ratios.

    pip install llama-cpp-python        # builds llama.cpp from source; not needed by CI
    # $LLAMA_CPP_LIB_PATH=DIR uses the libllama.so in DIR instead of the package's own build.
    python3 bench/compare_llamacpp.py [--like llama-3.2-1b] [--types q4_0,q4_k_m,q8_0,f16] \\
        [--rounds 3] [--json out.json]

Speed is measured here, never asserted in tests.
"""
import argparse
import json
import pathlib
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

from benchutil import (ROOT, LlamaCpp, median, print_table, ratio_summary, round_order,
                       synth_model)


def memory_bandwidth(num_threads):
    """Streaming read bandwidth (bytes/s): bench_kernels' SIMD sum of 1 GiB when it is built (a
    numpy sum is compute-bound and reads low), else numpy."""
    tool = ROOT / "build" / "bench" / "bench_kernels"
    if tool.exists():
        r = subprocess.run([str(tool), f"--benchmark_filter=stream_read/threads:{num_threads}/",
                            "--benchmark_repetitions=5", "--benchmark_format=json"],
                           capture_output=True, text=True, check=True)
        runs = [b for b in json.loads(r.stdout)["benchmarks"] if b.get("run_type") == "iteration"]
        return max(b["bytes_per_second"] for b in runs)
    return numpy_bandwidth(num_threads)


def numpy_bandwidth(num_threads, gib=1.0, repeats=5):
    """Best of `repeats` passes of a streaming read over `gib` GiB split across threads (bytes/s)."""
    data = np.ones(int(gib * (1 << 30)) // 8, dtype=np.float64)
    parts = np.array_split(data, num_threads)
    best = 0.0
    for _ in range(repeats):
        threads = [threading.Thread(target=np.sum, args=(p,)) for p in parts]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        best = max(best, data.nbytes / (time.perf_counter() - t0))
    return best


def run_pagoda(args, model, saved):
    """(prefill tok/s, decode tok/s) of one warmed request; its prompt ids are written to
    `saved`."""
    cmd = [args.pagoda, "bench", "throughput", "-m", str(model), "-n", "1",
           "--prompt-len", str(args.prompt_tokens), "--output-len", str(args.decode_tokens),
           "-t", str(args.threads), "--kv-type", args.kv_type,
           "--max-batched-tokens", str(args.prompt_tokens), "--no-prefix-caching",
           "--no-progress", "--save-requests", str(saved), "--json", "-"]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"pagoda exited {r.returncode}: {r.stderr}")
    run = json.loads(r.stdout)["runs"][0]
    return (run["prompt_tokens"] / (run["ttft_ms"]["mean"] / 1e3),
            1e3 / run["decode_ms_per_token"]["mean"])


def run_llamacpp(args, model, ids):
    """(prefill tok/s, decode tok/s) of one warmed request on the same ids."""
    with LlamaCpp(model, 1, len(ids) + args.decode_tokens + 8, args.threads, len(ids)) as engine:
        engine.single(ids[:8], 2)  # warm-up, as pagoda's
        prefill_s, decode_s = engine.single(ids, args.decode_tokens)
    return len(ids) / prefill_s, (args.decode_tokens - 1) / decode_s


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--like", default="llama-3.2-1b")
    ap.add_argument("--types", default="q4_0,q4_k_m,q8_0,f16")
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--decode-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3, help="rounds per type, order alternating")
    ap.add_argument("--kv-type", default="f16", choices=["f16", "f32"],
                    help="pagoda's K/V values (llama.cpp's are F16)")
    ap.add_argument("--out-dir", default=str(ROOT / "build" / "bench-models"))
    ap.add_argument("--pagoda", default=str(ROOT / "build" / "pagoda"))
    ap.add_argument("--json", help="write every round here")
    args = ap.parse_args()

    import llama_cpp
    out_dir = pathlib.Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    print(f"llama-cpp-python {llama_cpp.__version__}; {args.like}, {args.threads} threads, "
          f"prompt {args.prompt_tokens}, decode {args.decode_tokens}, K/V pagoda {args.kv_type}, "
          f"llama.cpp f16", flush=True)
    results = []  # per type: rounds
    with tempfile.TemporaryDirectory() as tmp:
        saved = pathlib.Path(tmp) / "requests.json"
        for wtype in args.types.split(","):
            model = synth_model(args.pagoda, args.like, wtype, out_dir)
            saved.unlink(missing_ok=True)
            rounds = []
            for r in range(args.rounds):
                # This VM's bandwidth moves by tens of percent within minutes: sampled every round.
                row = {"round": r, "bandwidth": memory_bandwidth(args.threads)}
                order = round_order(["pagoda", "llama.cpp"], r)
                row["first"] = order[0]
                for engine in order:
                    if engine == "pagoda":
                        row["pagoda"] = run_pagoda(args, model, saved)
                    else:
                        if not saved.exists():  # the prompt ids come from pagoda's workload
                            run_pagoda(args, model, saved)
                        ids = json.loads(saved.read_text())["requests"][0]["prompt"]
                        row["llama.cpp"] = run_llamacpp(args, model, ids)
                p, l = row["pagoda"], row["llama.cpp"]
                print(f"{wtype} round {r} ({order[0]} first): bandwidth "
                      f"{row['bandwidth'] / 1e9:.1f} GB/s | prefill pagoda {p[0]:.1f} llama.cpp "
                      f"{l[0]:.1f} ({p[0] / l[0]:.2f}x) | decode pagoda {p[1]:.2f} llama.cpp "
                      f"{l[1]:.2f} ({p[1] / l[1]:.2f}x)", flush=True)
                rounds.append(row)
            results.append({"type": wtype, "file_bytes": model.stat().st_size, "rounds": rounds})

    rows = []
    for t in results:
        for x in t["rounds"]:
            p, l = x["pagoda"], x["llama.cpp"]
            rows.append([t["type"], x["round"], x["first"], f"{x['bandwidth'] / 1e9:.1f}",
                         f"{p[0]:.1f}", f"{l[0]:.1f}", f"{p[0] / l[0]:.2f}x", f"{p[1]:.2f}",
                         f"{l[1]:.2f}", f"{p[1] / l[1]:.2f}x"])
    print_table(f"Every round ({args.like}, {args.threads} threads, prompt {args.prompt_tokens}, "
                f"decode {args.decode_tokens}; tok/s):",
                ["type", "round", "first", "bandwidth GB/s", "prefill pagoda", "llama.cpp", "ratio",
                 "decode pagoda", "llama.cpp", "ratio"], rows)
    rows = []
    for t in results:
        rs = t["rounds"]
        pp = [x["pagoda"][0] for x in rs]
        lp = [x["llama.cpp"][0] for x in rs]
        pd = [x["pagoda"][1] for x in rs]
        ld = [x["llama.cpp"][1] for x in rs]
        bandwidth = max(x["bandwidth"] for x in rs)
        gbs = t["file_bytes"] * median(pd) / 1e9
        rows.append([t["type"], f"{t['file_bytes'] / 2**20:.0f} MiB", f"{median(pp):.1f}",
                     f"{median(lp):.1f}", ratio_summary([a / b for a, b in zip(pp, lp)]),
                     f"{median(pd):.2f}", f"{median(ld):.2f}",
                     ratio_summary([a / b for a, b in zip(pd, ld)]), f"{gbs:.1f}",
                     f"{bandwidth / 1e9:.1f}", f"{100 * gbs * 1e9 / bandwidth:.0f}%"])
    print_table("Medians over the rounds; ratio: the median of the rounds' ratios (range); "
                "% of bandwidth: the median decode GB/s against the best sample of the type's "
                "rounds:",
                ["type", "file", "prefill tok/s pagoda", "llama.cpp", "ratio",
                 "decode tok/s pagoda", "llama.cpp", "ratio", "decode GB/s pagoda",
                 "bandwidth GB/s", "% of bandwidth"], rows)
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(
            {"like": args.like, "threads": args.threads, "prompt_tokens": args.prompt_tokens,
             "decode_tokens": args.decode_tokens, "kv_type": args.kv_type, "types": results},
            indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())
