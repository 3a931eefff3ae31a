#!/usr/bin/env python3
"""`pagoda bench serve` against pagoda's server and llama.cpp's OpenAI-compatible server
(llama-cpp-python's `llama_cpp.server`) on the same GGUF file, same request set, at several
concurrencies; writes the JSON, CSV and SVG reports into OUT_DIR and prints the table.

    pip install 'llama-cpp-python[server]'   # the peer; not needed by CI
    python3 bench/compare_serve.py [--model models/smollm2-135m-instruct-q4_1.gguf] [--out docs/bench]

Both servers get the same thread count and context; they run one at a time (bench serve loads
the URLs in turn), so they never compete for the cores. Speed is measured here, never asserted.
"""
import argparse
import os
import pathlib
import socket
import subprocess
import sys
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parents[1]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url, proc, timeout=300):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"server exited early ({proc.returncode}): {url}")
        try:
            with urllib.request.urlopen(url + "/v1/models", timeout=5):
                return
        except OSError:
            time.sleep(0.5)
    sys.exit(f"server did not come up: {url}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=str(ROOT / "models" / "smollm2-135m-instruct-q4_1.gguf"))
    ap.add_argument("--pagoda", default=str(ROOT / "build" / "pagoda"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--concurrency", default="1,4,16")
    ap.add_argument("--num-prompts", type=int, default=32)
    ap.add_argument("--prompt-len", default="128")
    ap.add_argument("--output-len", default="64")
    ap.add_argument("--out", default=str(ROOT / "docs" / "bench"))
    args = ap.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    pagoda_port, llama_port = free_port(), free_port()
    servers = [
        subprocess.Popen([args.pagoda, "serve", "-m", args.model, "--port", str(pagoda_port),
                          "-t", str(args.threads), "--kv-tokens", str(args.ctx * 4),
                          "--max-model-len", str(args.ctx)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
        subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", args.model,
                          "--model_alias", os.path.basename(args.model),
                          "--port", str(llama_port), "--n_threads", str(args.threads),
                          "--n_threads_batch", str(args.threads), "--n_ctx", str(args.ctx),
                          # queue concurrent requests instead of cutting the running one off
                          "--interrupt_requests", "False"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
    ]
    urls = [f"http://127.0.0.1:{pagoda_port}", f"http://127.0.0.1:{llama_port}"]
    try:
        for url, proc in zip(urls, servers):
            wait_ready(url, proc)
        cmd = [args.pagoda, "bench", "serve",
               "--url", urls[0], "--label", "pagoda",
               "--url", urls[1], "--label", "llama.cpp",
               "--concurrency", args.concurrency, "--num-prompts", str(args.num_prompts),
               "--prompt-len", args.prompt_len, "--output-len", args.output_len,
               "--json", str(out / "serve_compare.json"), "--csv", str(out / "serve_compare.csv"),
               "--svg", str(out / "serve_compare.svg")]
        print("$", " ".join(os.path.relpath(c, ROOT) if c.startswith(str(ROOT)) else c
                             for c in cmd), flush=True)
        subprocess.run(cmd, check=True)
    finally:
        for proc in servers:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


if __name__ == "__main__":
    main()
