#!/usr/bin/env python3
"""Serving load with and without slow idle connections: `pagoda bench serve` at fixed
concurrencies against one or more servers, each run once with nothing else connected and once
with N slow clients holding connections open (each sends a header byte every 2 s and reconnects
when the server closes it), so the table shows what idle and slow clients cost everyone else.

    python3 bench/serve_idle_load.py --server new=build/pagoda \\
        --server old=/path/to/old/pagoda --llama-server /path/to/llama-server

A server is NAME=BINARY: a pagoda binary (started as `serve -m MODEL`) or, with
--llama-server, llama.cpp's own `llama-server -np PARALLEL` on the same model. Servers run one
after the other, each with the same threads and KV memory. Prints one table (TTFT p50 / p99,
their ratio, output tokens/s) and writes every run's JSON to --out.
"""
import argparse
import json
import pathlib
import re
import socket
import subprocess
import sys
import threading
import time

from benchutil import ROOT, Server, llama_server_cmd, pagoda_serve_cmd, print_table


class SlowClients:
    """N connections that each send one header byte every `interval` seconds; a connection the
    server closes is opened again, so N stay open for the whole run."""

    def __init__(self, port, n, interval=2.0):
        self.port, self.n, self.interval = port, n, interval
        self.stop = threading.Event()
        self.reopened = 0
        self.refused = 0
        self.thread = threading.Thread(target=self.run, daemon=True)

    def connect(self):
        try:
            s = socket.create_connection(("127.0.0.1", self.port), timeout=5)
            s.sendall(b"P")
            return s
        except OSError:
            self.refused += 1
            return None

    def run(self):
        socks = [self.connect() for _ in range(self.n)]
        while not self.stop.wait(self.interval):
            for i, s in enumerate(socks):
                try:
                    if s is None:
                        raise OSError
                    s.sendall(b"O")
                except OSError:
                    if s is not None:
                        s.close()
                    socks[i] = self.connect()
                    self.reopened += 1
        for s in socks:
            if s is not None:
                s.close()

    def __enter__(self):
        self.thread.start()
        time.sleep(1.0)
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()


def bench(pagoda, url, args, out_path):
    cmd = [pagoda, "bench", "serve", "--url", url, "--concurrency", args.concurrency,
           "--num-prompts", str(args.num_prompts), "--prompt-len", str(args.prompt_len),
           "--output-len", str(args.output_len), "--seed", "1", "--timeout", "600",
           "--json", str(out_path)]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, timeout=3600)
    return json.loads(out_path.read_text())["endpoints"]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--server", action="append", default=[],
                   help="NAME=PAGODA_BINARY (repeat); default new=build/pagoda")
    p.add_argument("--llama-server", help="llama.cpp's llama-server binary, run as a peer")
    p.add_argument("--model", default=str(ROOT / "models" / "smollm2-135m-instruct-q4_1.gguf"))
    p.add_argument("--pagoda", default=str(ROOT / "build" / "pagoda"),
                   help="the pagoda binary that runs `bench serve`")
    p.add_argument("--idle", type=int, default=300, help="slow idle connections")
    p.add_argument("--concurrency", default="1,16,32,64")
    p.add_argument("--num-prompts", type=int, default=64)
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--kv-tokens", type=int, default=32768)
    p.add_argument("--batch", type=int, default=512, help="tokens per step (llama.cpp: -b)")
    p.add_argument("--parallel", type=int, default=16, help="llama-server -np")
    p.add_argument("--skip-idle", action="append", default=[],
                   help="NAME of a server to run without the idle connections only (one that "
                        "they would lock up)")
    p.add_argument("--out", default="serve_idle_load")
    args = p.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(exist_ok=True)
    servers = [s.split("=", 1) for s in (args.server or [f"new={ROOT / 'build' / 'pagoda'}"])]
    # pagoda with the build's default slots; llama-server with K/V split among its -np slots,
    # its default for a given -np.
    runs = [(name, pagoda_serve_cmd(binary, args.model, args.threads, args.kv_tokens, args.batch))
            for name, binary in servers]
    if args.llama_server:
        runs.append((f"llama-server -np {args.parallel}",
                     llama_server_cmd(args.llama_server, args.model, args.threads, args.kv_tokens,
                                      args.batch, args.parallel, kv_unified=False)))

    rows = []
    for name, make_cmd in runs:
        for idle in (0,) if name in args.skip_idle else (0, args.idle):
            label = f"{name}, {idle} idle"
            with Server(name, make_cmd, timeout=300) as server:
                try:
                    path = out / (re.sub(r"[^a-z0-9]+", "_", label.lower()) + ".json")
                    if idle:
                        with SlowClients(server.port, idle) as slow:
                            endpoints = bench(args.pagoda, server.url, args, path)
                        note = f"{slow.reopened} reopened, {slow.refused} refused"
                    else:
                        endpoints = bench(args.pagoda, server.url, args, path)
                        note = ""
                except subprocess.TimeoutExpired:
                    endpoints, note = [], "timed out"
            for e in endpoints:
                t = e["ttft_ms"]
                rows.append((label, e["concurrency"], e["completed"], e["failed"], t["p50"],
                             t["p99"], t["p99"] / t["p50"] if t["p50"] else float("nan"),
                             e["output_throughput"], note))
            print(f"done: {label} {note}", file=sys.stderr, flush=True)

    print_table(None, ["server", "concurrency", "ok", "failed", "TTFT p50 ms", "TTFT p99 ms",
                       "p99/p50", "output tok/s", "slow clients"],
                [[r[0], r[1], r[2], r[3], f"{r[4]:.1f}", f"{r[5]:.1f}", f"{r[6]:.2f}",
                  f"{r[7]:.1f}", r[8]] for r in rows])


if __name__ == "__main__":
    main()
