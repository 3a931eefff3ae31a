#!/usr/bin/env python3
"""llama.cpp's embedding throughput (llama-cpp-python's Llama.embed) on a GGUF file and a text
file of one input per line, for the comparison in docs/BENCHMARKS.md:

    python3 bench/embed_llamacpp.py MODEL.gguf LINES.txt [--threads 2] [--ctx 512]
"""
import argparse
import time

import llama_cpp


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("lines")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=512, help="n_ctx = n_batch = n_ubatch")
    a = ap.parse_args()
    with open(a.lines, encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in f if line.strip()]
    llm = llama_cpp.Llama(model_path=a.model, embedding=True, n_ctx=a.ctx, n_batch=a.ctx,
                          n_ubatch=a.ctx, n_threads=a.threads, verbose=False)
    llm.embed(lines[:8])  # warm-up
    start = time.perf_counter()
    _, tokens = llm.embed(lines, return_count=True)
    seconds = time.perf_counter() - start
    print(f"llama.cpp: {len(lines)} texts, {tokens} tokens in {seconds:.3f} s: "
          f"{len(lines) / seconds:.1f} texts/s, {tokens / seconds:.0f} tokens/s")


if __name__ == "__main__":
    main()
