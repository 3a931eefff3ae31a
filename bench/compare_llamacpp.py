#!/usr/bin/env python3
"""pagoda against llama.cpp (llama-cpp-python's build) on the same synthetic GGUF files.

For each weight type: `pagoda synth` writes a random-weight file with a real model's shape and
the Llama 3 vocabulary; then, alternating the two engines in one run, prefill of a P-token prompt
and decode of N tokens are timed at T threads. The script also measures this machine's memory
bandwidth (a multi-threaded streaming sum, before every round) and reports decode bandwidth =
weight bytes x tok/s against the best sample taken during that type's rounds.

    pip install llama-cpp-python        # builds llama.cpp from source; not needed by CI
    # On a CPU with AMX, llama.cpp's AMX kernels may crash on batches: build it without them
    # (docs/BENCHMARKS.md has the CMAKE_ARGS).
    python3 bench/compare_llamacpp.py [--like llama-3.2-1b] [--types q4_0,q4_k_m,q8_0,f16]

Speed is measured here, never asserted in tests.
"""
import argparse
import os
import pathlib
import re
import subprocess
import sys
import threading
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED = pathlib.Path(os.environ.get("PAGODA_SHARED", ROOT.parent / "shared"))


def memory_bandwidth(num_threads):
    """Streaming read bandwidth (bytes/s): bench_kernels' SIMD sum of 1 GiB when it is built (a
    numpy sum is compute-bound and reads low), else numpy."""
    tool = ROOT / "build" / "bench" / "bench_kernels"
    if tool.exists():
        r = subprocess.run([str(tool), f"--benchmark_filter=stream_read/threads:{num_threads}/",
                            "--benchmark_repetitions=5", "--benchmark_format=json"],
                           capture_output=True, text=True, check=True)
        import json
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


def prompt_text(num_tokens):
    words = (SHARED / "testdata" / "text" / "war-and-peace.txt").read_text().split()
    return " ".join(words[2000:2000 + num_tokens])  # trimmed to exact ids below


def run_pagoda(binary, model, prompt_file, n, threads):
    r = subprocess.run([binary, "run", "-m", model, "-f", prompt_file, "-n", str(n), "--temp", "0",
                        "--raw", "-t", str(threads), "--ignore-eos"], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(r.stderr)
    m = re.search(r"prefill: (\d+) tokens at ([\d.]+) tok/s \| decode: (\d+) tokens at ([\d.]+)",
                  r.stderr)
    return int(m.group(1)), float(m.group(2)), int(m.group(3)), float(m.group(4))


def run_llamacpp(model, prompt_ids, n, threads):
    import llama_cpp
    llm = llama_cpp.Llama(model_path=str(model), n_ctx=len(prompt_ids) + n + 8,
                          n_batch=len(prompt_ids), n_ubatch=len(prompt_ids), n_threads=threads,
                          n_threads_batch=threads, verbose=False)
    t0 = time.perf_counter()
    llm.eval(prompt_ids)
    prefill = len(prompt_ids) / (time.perf_counter() - t0)
    token = int(np.argmax(llm.scores[llm.n_tokens - 1])) if llm.scores is not None else 0
    t0 = time.perf_counter()
    for _ in range(n):
        llm.eval([token])
    decode = n / (time.perf_counter() - t0)
    del llm
    return prefill, decode


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--like", default="llama-3.2-1b")
    ap.add_argument("--types", default="q4_0,q4_k_m,q8_0,f16")
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--decode-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2, help="alternations per engine; best kept")
    ap.add_argument("--out-dir", default=str(ROOT / "build" / "bench-models"))
    ap.add_argument("--pagoda", default=str(ROOT / "build" / "pagoda"))
    args = ap.parse_args()

    import llama_cpp
    out_dir = pathlib.Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    vocab = SHARED / "testdata" / "vocab" / "ggml-vocab-llama-bpe.gguf"
    # This VM's bandwidth moves by tens of percent within minutes, so it is sampled before every
    # round, beside the engines, and each type's decode is set against the best sample taken
    # during its own rounds (as the engines' best round is kept).
    def sample_bandwidth():
        sample = memory_bandwidth(args.threads)
        print(f"memory bandwidth ({args.threads} threads, streaming sum): {sample / 1e9:.1f} GB/s",
              flush=True)
        return sample

    rows = []
    for wtype in args.types.split(","):
        model = out_dir / f"{args.like}-{wtype}.gguf"
        if not model.exists():
            print(f"synth {model.name} ...", flush=True)
            subprocess.run([args.pagoda, "synth", "--like", args.like, "--type", wtype, "--vocab",
                            vocab, "-o", model], check=True)
        tok = llama_cpp.Llama(model_path=str(model), vocab_only=True, verbose=False)
        ids = tok.tokenize(prompt_text(args.prompt_tokens * 2).encode(), add_bos=False)
        ids = ids[:args.prompt_tokens]
        text = tok.detokenize(ids).decode("utf-8", errors="ignore")
        ids = tok.tokenize(text.encode(), add_bos=False)  # the exact ids both engines see
        del tok
        prompt_file = out_dir / "prompt.txt"
        prompt_file.write_text(text)
        weight_bytes = model.stat().st_size
        best = {"pagoda": [0.0, 0.0], "llama.cpp": [0.0, 0.0]}
        bandwidth = 0.0
        for _ in range(args.rounds):
            bandwidth = max(bandwidth, sample_bandwidth())
            _, pp, _, tg = run_pagoda(args.pagoda, model, prompt_file, args.decode_tokens, args.threads)
            best["pagoda"] = [max(best["pagoda"][0], pp), max(best["pagoda"][1], tg)]
            print(f"  round: pagoda prefill {pp:.1f} decode {tg:.2f}", end="", flush=True)
            pp, tg = run_llamacpp(model, ids, args.decode_tokens, args.threads)
            print(f" | llama.cpp prefill {pp:.1f} decode {tg:.2f}", flush=True)
            best["llama.cpp"] = [max(best["llama.cpp"][0], pp), max(best["llama.cpp"][1], tg)]
        rows.append((wtype, len(ids), weight_bytes, best, bandwidth))
        print(f"{wtype}: pagoda prefill {best['pagoda'][0]:.1f} decode {best['pagoda'][1]:.2f} | "
              f"llama.cpp prefill {best['llama.cpp'][0]:.1f} decode {best['llama.cpp'][1]:.2f}",
              flush=True)

    print()
    print(f"{args.like}, {args.threads} threads, prompt {args.prompt_tokens}, decode {args.decode_tokens}; "
          f"bandwidth: the best streaming-read sample during each type's rounds")
    print("| type | file | prefill tok/s pagoda | llama.cpp | ratio | decode tok/s pagoda | llama.cpp "
          "| ratio | decode GB/s pagoda | bandwidth GB/s | % of bandwidth |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for wtype, n, wbytes, b, bandwidth in rows:
        p, l = b["pagoda"], b["llama.cpp"]
        gbs = wbytes * p[1] / 1e9
        print(f"| {wtype} | {wbytes / 2**20:.0f} MiB | {p[0]:.1f} | {l[0]:.1f} | {p[0] / l[0]:.2f}x "
              f"| {p[1]:.2f} | {l[1]:.2f} | {p[1] / l[1]:.2f}x | {gbs:.1f} | {bandwidth / 1e9:.1f} "
              f"| {100 * gbs * 1e9 / bandwidth:.0f}% |")


if __name__ == "__main__":
    sys.exit(main())
