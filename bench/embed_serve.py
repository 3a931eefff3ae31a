"""Embeddings per second through `pagoda serve`: texts of about --tokens tokens (cut from War and
Peace), sent as --concurrency clients at once, each request one text (what a RAG indexer with
a pool of workers does), for --seconds; prints texts/s and tokens/s. Optionally --generate N
clients stream chat completions beside them the whole time (their tokens/s is printed too).

  python3 bench/embed_serve.py --bin build/pagoda -m models/all-minilm-l6-v2 --tokens 16
  python3 bench/embed_serve.py --bin build/pagoda -m models/smollm2-135m-instruct-q4_1.gguf \\
      --serve-args "--pooling mean --kv-tokens 4096" --tokens 128 --generate 2
"""
import argparse
import json
import os
import shlex
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "python"))
from server_util import Server  # noqa: E402


def texts_of(path, words, count):
    text = open(path, errors="replace").read().split()[5000:]
    return [" ".join(text[i * words:(i + 1) * words]) for i in range(count)]


def post(url, body, timeout=600):
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="build/pagoda")
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--serve-args", default="")
    ap.add_argument("-t", "--threads", default="2")
    ap.add_argument("--tokens", type=int, default=16, help="about this many tokens per text")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--generate", type=int, default=0, help="chat clients streaming beside")
    ap.add_argument("--text", default=os.path.join(os.environ.get("PAGODA_SHARED", "../shared"),
                                                   "testdata", "text", "war-and-peace.txt"))
    a = ap.parse_args()
    # About 1.3 tokens per word for English with these vocabularies, [CLS]/[SEP] included.
    texts = texts_of(a.text, max(1, round(a.tokens / 1.3)), 400)
    server = Server(a.bin, a.model, "-t", a.threads, *shlex.split(a.serve_args))
    try:
        url = server.url
        post(url + "/v1/embeddings", {"input": texts[:2]})  # warm up
        stop = time.monotonic() + a.seconds
        counts = {"texts": 0, "tokens": 0, "generated": 0}
        lock = threading.Lock()

        def embed_client(k):
            i = k
            while time.monotonic() < stop:
                r = post(url + "/v1/embeddings", {"input": texts[i % len(texts)]})
                with lock:
                    counts["texts"] += 1
                    counts["tokens"] += r["usage"]["prompt_tokens"]
                i += a.concurrency

        def chat_client(k):
            while time.monotonic() < stop:
                r = post(url + "/v1/completions", {"prompt": texts[k][:200], "max_tokens": 32,
                                                   "temperature": 0, "ignore_eos": True})
                with lock:
                    counts["generated"] += r["usage"]["completion_tokens"]

        start = time.monotonic()
        threads = [threading.Thread(target=embed_client, args=(k,)) for k in range(a.concurrency)]
        threads += [threading.Thread(target=chat_client, args=(k,)) for k in range(a.generate)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.monotonic() - start
        line = (f"{a.concurrency} clients, {counts['tokens'] / max(1, counts['texts']):.0f} tokens "
                f"per text: {counts['texts'] / elapsed:.1f} texts/s, "
                f"{counts['tokens'] / elapsed:.0f} tokens/s")
        if a.generate:
            line += f"; {a.generate} generating beside: {counts['generated'] / elapsed:.1f} tok/s"
        print(line, flush=True)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
