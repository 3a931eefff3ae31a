#!/usr/bin/env python3
"""Serving many LoRA adapters at once: output tok/s of C concurrent streams on one `pagoda serve`
with `--lora` adapters, when every stream asks for the base model, when every stream asks for
one adapter, and when the streams are spread over all the adapters (requests for different
adapters share each step).

The adapters are random (numpy), F16 as llama.cpp's converter writes them by default, rank R, on every attention and feed-forward matrix of every
layer, written in llama.cpp's GGUF adapter form. One server serves all three cases, which run in
turn within each round, the order rotating round by round; each case's figure is output tokens
over the wall time of its C requests of N greedy tokens (after a warm-up request per model id).

    python3 bench/lora_serve.py [--model models/smollm2-135m-instruct-q4_1.gguf] \\
        [--adapters 8] [--rank 16] [--streams 16] [--tokens 64] [--rounds 3]

Speed is measured here, never asserted in tests.
"""
import argparse
import concurrent.futures
import json
import os
import pathlib
import sys
import tempfile
import time
import urllib.request

import gguf
import numpy as np

from benchutil import ROOT, Server, median, pagoda_serve_cmd, print_table, round_order

TARGETS = ["attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"]


def write_adapter(base, path, rank, seed):
    reader = gguf.GGUFReader(str(base))
    arch = bytes(reader.fields["general.architecture"].parts[-1]).decode()
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(str(path), arch=arch)
    w.add_string("general.type", "adapter")
    w.add_string("adapter.type", "lora")
    w.add_float32("adapter.lora.alpha", float(rank))
    for t in reader.tensors:
        parts = t.name.split(".")
        if len(parts) != 4 or parts[0] != "blk" or parts[2] not in TARGETS:
            continue
        cols, rows = int(t.shape[0]), int(t.shape[1])
        w.add_tensor(t.name + ".lora_a", rng.normal(0, 0.02, (rank, cols)).astype(np.float16))
        w.add_tensor(t.name + ".lora_b", rng.normal(0, 0.02, (rows, rank)).astype(np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def complete(url, model, tokens):
    body = json.dumps({"model": model, "prompt": "Write a story about a robot who learns to paint.",
                       "max_tokens": tokens, "temperature": 0, "ignore_eos": True}).encode()
    req = urllib.request.Request(url + "/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())["usage"]["completion_tokens"]


def cpu_seconds(pid):
    """The process's user + system CPU time so far (Linux /proc)."""
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_case(url, pid, models, tokens):
    """Output tok/s over wall time, and over the server's CPU time (steadier where other jobs
    share the cores: it counts what the server spent, not what it waited for)."""
    start, cpu = time.perf_counter(), cpu_seconds(pid)
    with concurrent.futures.ThreadPoolExecutor(len(models)) as pool:
        done = sum(pool.map(lambda m: complete(url, m, tokens), models))
    return done / (time.perf_counter() - start), done / (cpu_seconds(pid) - cpu)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pagoda", default=str(ROOT / "build" / "pagoda"))
    p.add_argument("--model", default=str(ROOT / "models" / "smollm2-135m-instruct-q4_1.gguf"))
    p.add_argument("--adapters", type=int, default=8)
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--streams", type=int, default=16)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        names = [f"lora{k}" for k in range(args.adapters)]
        extra = []
        for k, name in enumerate(names):
            path = pathlib.Path(tmp) / f"{name}.gguf"
            write_adapter(args.model, path, args.rank, seed=k)
            extra += ["--lora", f"{name}={path}"]
        cmd = pagoda_serve_cmd(args.pagoda, args.model, args.threads, 16384, 512,
                               max_seqs=args.streams, extra=extra)
        with Server("pagoda", cmd) as server:
            base = json.loads(urllib.request.urlopen(server.url + "/v1/models").read())["data"][0]
            cases = {"no adapter": [base["id"]] * args.streams,
                     "one adapter": [names[0]] * args.streams,
                     f"{args.adapters} adapters": [names[i % len(names)]
                                                   for i in range(args.streams)]}
            for m in [base["id"], *names]:
                complete(server.url, m, 2)
            results = {c: [] for c in cases}
            per_cpu = {c: [] for c in cases}
            for r in range(args.rounds):
                for case in round_order(list(cases), r):
                    tps, tpc = run_case(server.url, server.proc.pid, cases[case], args.tokens)
                    results[case].append(tps)
                    per_cpu[case].append(tpc)
                    print(f"round {r + 1}: {case}: {tps:.1f} tok/s, {tpc:.1f} tok per CPU s",
                          file=sys.stderr)
    plain, plain_cpu = median(results["no adapter"]), median(per_cpu["no adapter"])
    rows = [[c, f"{median(v):.1f}", f"{median(v) / plain:.2f}x",
             " ".join(f"{x:.1f}" for x in v), f"{median(per_cpu[c]):.1f}",
             f"{median(per_cpu[c]) / plain_cpu:.2f}x"] for c, v in results.items()]
    print_table(f"{args.streams} streams x {args.tokens} tokens, rank {args.rank}, "
                f"{pathlib.Path(args.model).name}",
                ["case", "tok/s (median)", "vs no adapter", "rounds", "tok per CPU s (median)",
                 "vs no adapter"], rows)


if __name__ == "__main__":
    main()
