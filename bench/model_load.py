#!/usr/bin/env python3
"""A server of several models (`serve --models-dir`): time from a request for a model on disk to
its first token (the load, then the prompt), beside the same request once the model is loaded.

Each round makes the model cold again (Ollama's keep_alive 0 unloads it), then times one
streamed greedy request cold and one warm; the medians of the rounds are printed.

    python3 bench/model_load.py [--model models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf] \\
        [--rounds 5] [--threads 2] [--kv-cache-gb 0.25]

Speed is measured here, never asserted in tests.
"""
import argparse
import json
import pathlib
import sys
import tempfile
import time
import urllib.request

from benchutil import ROOT, Server, median, print_table


def post(url, path, body, timeout=600):
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    return urllib.request.urlopen(req, timeout=timeout)


def ttft(url, model):
    """Seconds from sending a streamed completion to its first chunk with text."""
    start = time.perf_counter()
    with post(url, "/v1/completions", {"model": model, "prompt": "def fibonacci(n):",
                                       "max_tokens": 8, "temperature": 0, "stream": True}) as r:
        for line in r:
            if line.startswith(b"data: ") and b'"text"' in line:
                first = time.perf_counter() - start
                r.read()
                return first
    raise RuntimeError("no output")


def state(url, model):
    with urllib.request.urlopen(f"{url}/v1/models/{model}", timeout=30) as r:
        return json.loads(r.read())["state"]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pagoda", default=str(ROOT / "build" / "pagoda"))
    p.add_argument("--model", default=str(ROOT / "models" / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"))
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--kv-cache-gb", default="0.25")
    args = p.parse_args()
    model = pathlib.Path(args.model).resolve()
    with tempfile.TemporaryDirectory() as tmp:
        folder = pathlib.Path(tmp)
        (folder / model.name).symlink_to(model)
        name = model.stem
        cmd = lambda port: [args.pagoda, "serve", "--models-dir", str(folder), "--port",
                            str(port), "-t", str(args.threads), "--kv-cache-gb",
                            args.kv_cache_gb, "--log-format", "none"]
        cold, warm = [], []
        with Server("pagoda", cmd) as server:
            for _ in range(args.rounds):
                post(server.url, "/api/generate", {"model": name, "keep_alive": 0}).read()
                deadline = time.time() + 60
                while state(server.url, name) != "on disk" and time.time() < deadline:
                    time.sleep(0.05)
                cold.append(ttft(server.url, name))
                warm.append(ttft(server.url, name))
    print_table(f"First token of a request for {name} ({args.rounds} rounds, medians)",
                ["case", "TTFT s"],
                [["on disk (load + prompt)", f"{median(cold):.3f}"],
                 ["loaded", f"{median(warm):.3f}"],
                 ["ratio", f"{median(cold) / median(warm):.1f}x"]])
    return 0


if __name__ == "__main__":
    sys.exit(main())
