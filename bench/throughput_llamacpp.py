#!/usr/bin/env python3
"""Offline throughput: pagoda's batched engine against the same requests run one after another,
and against llama.cpp's batched decoding (llama-cpp-python's low-level API) on the same file.

`pagoda synth` writes a random-weight file with a real model's shape and the Llama 3 vocabulary
(as bench/compare_llamacpp.py does). Then, in one run:

  1. pagoda bench throughput --sequential: every request at once (batched), then the same
     requests one after another, each alone. It also saves the requests' token ids.
  2. pagoda bench throughput --max-seqs S: at most S sequences at once (S streams).
  3. llama.cpp: the same token ids and output lengths over S parallel streams (one sequence id
     per stream, continuous batching: a stream that finishes takes the next request), prompts
     chunked into a token budget per llama_decode call like pagoda's, greedy argmax sampling in
     numpy, end-of-generation ignored.

pagoda's runs keep the KV cache in F16, as llama.cpp does by default (`--kv-type f32` for
pagoda's own default).

Reported: total tokens/s = (prompt + output tokens) / wall time, output tokens/s, and the ratios
against pagoda sequential and llama.cpp. Both engines run greedy with no EOS stop, so both produce
exactly the requested tokens.

    pip install llama-cpp-python        # builds llama.cpp from source; not needed by CI
    # On a CPU with AMX, llama.cpp's AMX kernels may crash on batches: build it without them
    # (docs/BENCHMARKS.md has the CMAKE_ARGS).
    python3 bench/throughput_llamacpp.py [--num-requests 64] [--prompt-len 128:512]

Speed is measured here, never asserted in tests (the test suite never runs this script).
"""
import argparse
import ctypes
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED = pathlib.Path(os.environ.get("PAGODA_SHARED", ROOT.parent / "shared"))


def synth_model(pagoda, like, wtype, out_dir):
    model = out_dir / f"{like}-{wtype}.gguf"
    if not model.exists():
        vocab = SHARED / "testdata" / "vocab" / "ggml-vocab-llama-bpe.gguf"
        print(f"synth {model.name} ...", flush=True)
        subprocess.run([pagoda, "synth", "--like", like, "--type", wtype, "--vocab", vocab,
                        "-o", model], check=True)
    return model


def run_pagoda(pagoda, model, args, *extra):
    cmd = [pagoda, "bench", "throughput", "-m", str(model), "-n", str(args.num_requests),
           "--prompt-len", args.prompt_len, "--output-len", args.output_len,
           "--seed", str(args.seed), "-t", str(args.threads), "--kv-type", args.kv_type,
           "--json", "-", *map(str, extra)]
    print("$ " + " ".join(map(str, cmd)), flush=True)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)  # progress and table on stderr
    if r.returncode != 0:
        raise RuntimeError(f"pagoda exited {r.returncode}")
    return json.loads(r.stdout)


class LlamaCpp:
    """One llama.cpp context with `streams` sequence ids, driven through llama_decode."""

    def __init__(self, model_path, streams, max_len, threads, token_budget):
        import llama_cpp as L
        self.L = L
        L.llama_backend_init()
        # llama.cpp logs every graph it builds; keep the callback alive as long as the engine.
        self._quiet = L.llama_log_callback(lambda level, text, data: None)
        L.llama_log_set(self._quiet, ctypes.c_void_p())
        mparams = L.llama_model_default_params()
        mparams.n_gpu_layers = 0
        self.model = L.llama_model_load_from_file(str(model_path).encode(), mparams)
        if not self.model:
            raise RuntimeError(f"llama.cpp could not load {model_path}")
        cparams = L.llama_context_default_params()
        cparams.n_ctx = streams * max_len
        cparams.n_batch = token_budget
        cparams.n_ubatch = min(512, token_budget)
        cparams.n_seq_max = streams
        cparams.n_threads = threads
        cparams.n_threads_batch = threads
        cparams.kv_unified = True  # one pool of cells for every stream, like pagoda's blocks
        self.ctx = L.llama_init_from_model(self.model, cparams)
        if not self.ctx:
            raise RuntimeError("llama.cpp could not create a context")
        self.n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(self.model))
        self.memory = L.llama_get_memory(self.ctx)
        self.batch = L.llama_batch_init(token_budget, 0, 1)
        self.streams = streams
        self.budget = token_budget

    def close(self):
        L = self.L
        L.llama_batch_free(self.batch)
        L.llama_free(self.ctx)
        L.llama_model_free(self.model)

    def _add(self, token, pos, seq, want_logits):
        b, i = self.batch, self.batch.n_tokens
        b.token[i] = token
        b.pos[i] = pos
        b.n_seq_id[i] = 1
        b.seq_id[i][0] = seq
        b.logits[i] = 1 if want_logits else 0
        b.n_tokens = i + 1
        return i

    def _argmax(self, index):
        ptr = self.L.llama_get_logits_ith(self.ctx, index)
        return int(np.ctypeslib.as_array(ptr, shape=(self.n_vocab,)).argmax())

    def run(self, requests, progress=True):
        """Continuous batching of `requests` [(prompt ids, output_len)] over the streams.
        Returns (wall seconds, output tokens)."""
        L = self.L
        L.llama_memory_clear(self.memory, True)
        queue = list(range(len(requests)))[::-1]
        slots = [None] * self.streams  # per stream: [request, prompt tokens fed, generated, last]
        num_output = 0
        start = time.perf_counter()
        last_print = start
        while queue or any(slots):
            self.batch.n_tokens = 0
            budget = self.budget
            for s in range(self.streams):  # decodes first, one token each
                st = slots[s]
                if st and st[1] == len(requests[st[0]][0]):
                    st.append(self._add(st[3], st[1] + st[2] - 1, s, True))
                    budget -= 1
            for s in range(self.streams):  # then prompt chunks, admitting new requests
                if slots[s] is None and queue:
                    slots[s] = [queue.pop(), 0, 0, None]
                st = slots[s]
                if st is None or st[1] == len(requests[st[0]][0]) or budget <= 0:
                    continue
                prompt = requests[st[0]][0]
                take = min(budget, len(prompt) - st[1])
                for k in range(st[1], st[1] + take):
                    index = self._add(prompt[k], k, s, k == len(prompt) - 1)
                st[1] += take
                budget -= take
                if st[1] == len(prompt):
                    st.append(index)
            if self.batch.n_tokens == 0:
                break
            rc = L.llama_decode(self.ctx, self.batch)
            if rc != 0:
                raise RuntimeError(f"llama_decode returned {rc}")
            for s in range(self.streams):
                st = slots[s]
                if not st or len(st) < 5:
                    continue
                st[3] = self._argmax(st.pop())
                st[2] += 1
                num_output += 1
                if st[2] == requests[st[0]][1]:
                    L.llama_memory_seq_rm(self.memory, s, -1, -1)
                    slots[s] = None
            now = time.perf_counter()
            if progress and now - last_print > 10:
                print(f"  llama.cpp: {num_output} output tokens, {now - start:.0f} s", flush=True)
                last_print = now
        return time.perf_counter() - start, num_output


def llamacpp_row(model, requests, args):
    max_len = max(len(p) + n for p, n in requests)
    engine = LlamaCpp(model, args.streams, max_len, args.threads, args.token_budget)
    try:
        engine.run([(requests[0][0][:8], 2)], progress=False)  # warm-up, as pagoda does
        wall, num_output = engine.run(requests)
    finally:
        engine.close()
    num_prompt = sum(len(p) for p, _ in requests)
    assert num_output == sum(n for _, n in requests), "llama.cpp produced a wrong token count"
    return {"engine": "llama.cpp", "mode": f"batched, {args.streams} streams",
            "streams": args.streams, "num_requests": len(requests),
            "prompt_tokens": num_prompt, "output_tokens": num_output, "wall_s": wall,
            "output_tokens_per_s": num_output / wall,
            "total_tokens_per_s": (num_prompt + num_output) / wall}


def pagoda_row(run, mode, streams):
    return {"engine": "pagoda", "mode": mode, "streams": streams,
            "num_requests": run["num_requests"], "prompt_tokens": run["prompt_tokens"],
            "output_tokens": run["output_tokens"], "wall_s": run["wall_s"],
            "output_tokens_per_s": run["output_tokens_per_s"],
            "total_tokens_per_s": run["total_tokens_per_s"],
            "mean_seqs_per_step": run["mean_seqs_per_step"],
            "mean_tokens_per_step": run["mean_tokens_per_step"],
            "kv_utilization_peak": run["kv_utilization_peak"],
            "num_preemptions": run["num_preemptions"]}


def print_table(rows, header):
    seq = next((r for r in rows if r["mode"] == "sequential"), None)
    llama = next((r for r in rows if r["engine"] == "llama.cpp"), None)
    print()
    print(header)
    print("| engine | mode | requests | prompt tokens | output tokens | wall s | output tok/s "
          "| total tok/s | vs pagoda sequential | vs llama.cpp |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        vs_seq = f"{r['total_tokens_per_s'] / seq['total_tokens_per_s']:.2f}x" if seq else "-"
        vs_llama = f"{r['total_tokens_per_s'] / llama['total_tokens_per_s']:.2f}x" if llama else "-"
        print(f"| {r['engine']} | {r['mode']} | {r['num_requests']} | {r['prompt_tokens']} "
              f"| {r['output_tokens']} | {r['wall_s']:.1f} | {r['output_tokens_per_s']:.1f} "
              f"| {r['total_tokens_per_s']:.1f} | {vs_seq} | {vs_llama} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--like", default="llama-3.2-1b")
    ap.add_argument("--type", default="q4_0")
    ap.add_argument("--num-requests", type=int, default=64)
    ap.add_argument("--prompt-len", default="128:512")
    ap.add_argument("--output-len", default="128")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--streams", type=int, default=16, help="concurrent sequences (pagoda "
                    "--max-seqs, llama.cpp sequence ids)")
    ap.add_argument("--token-budget", type=int, default=2048,
                    help="tokens per step / llama_decode call (pagoda --max-batched-tokens)")
    ap.add_argument("--kv-type", default="f16", choices=["f16", "f32"],
                    help="pagoda's KV cache values (llama.cpp's default cache is F16)")
    ap.add_argument("--skip-sequential", action="store_true")
    ap.add_argument("--skip-llamacpp", action="store_true")
    ap.add_argument("--out-dir", default=str(ROOT / "build" / "bench-models"))
    ap.add_argument("--pagoda", default=str(ROOT / "build" / "pagoda"))
    ap.add_argument("--json-out", help="also write every row as JSON here")
    args = ap.parse_args()

    out_dir = pathlib.Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    model = synth_model(args.pagoda, args.like, args.type, out_dir)
    with tempfile.TemporaryDirectory() as tmp:
        saved = pathlib.Path(tmp) / "requests.json"
        budget = ["--max-batched-tokens", args.token_budget]
        first = run_pagoda(args.pagoda, model, args, *budget, "--save-requests", saved,
                           *([] if args.skip_sequential else ["--sequential"]))
        saved_requests = json.loads(saved.read_text())["requests"]
    requests = [(r["prompt"], r["output_len"]) for r in saved_requests]
    rows = [pagoda_row(first["runs"][0], f"batched, up to {first['max_num_seqs']} at once",
                       first["max_num_seqs"])]
    if not args.skip_sequential:
        rows.append(pagoda_row(first["runs"][1], "sequential", 1))
    streams = run_pagoda(args.pagoda, model, args, *budget, "--max-seqs", args.streams)
    rows.append(pagoda_row(streams["runs"][0], f"batched, {args.streams} streams", args.streams))
    if not args.skip_llamacpp:
        import llama_cpp
        print(f"llama.cpp {llama_cpp.__version__}: {args.streams} streams ...", flush=True)
        rows.append(llamacpp_row(model, requests, args))
    header = (f"{args.like} {args.type} ({model.stat().st_size / 2**20:.0f} MiB), "
              f"{len(requests)} requests, prompt {args.prompt_len} tokens (seed {args.seed}), "
              f"output {args.output_len}, {args.threads} threads, token budget {args.token_budget}, "
              f"pagoda KV {args.kv_type} (llama.cpp F16)")
    print_table(rows, header)
    if args.json_out:
        pathlib.Path(args.json_out).write_text(json.dumps({"header": header, "rows": rows},
                                                          indent=2) + "\n")


if __name__ == "__main__":
    sys.exit(main())
