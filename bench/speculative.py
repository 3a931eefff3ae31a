#!/usr/bin/env python3
"""Single-stream decode speed with and without speculative decoding, on two prompt sets:
input-grounded (bench/prompts/spec_grounded.json: the answer copies from the prompt) and open
(bench/prompts/spec_open.json: new code from a one-line request).

Every configuration runs as its own server at once (pagoda without speculation, with n-gram
lookup, with the draft model, with both; and, given --llama-server, llama.cpp's server without,
with n-gram lookup (ngram-simple, 3-token keys) and with the same draft), and the requests
alternate between them prompt by prompt, round by round, so a machine whose speed drifts treats
them alike. Each request is a greedy chat completion, streamed; its decode speed is (completion
tokens - 1) / (time of the last token - time of the first). Prints, per prompt set and
configuration, the median decode tokens/s over the rounds, the speed-up against the same engine
without speculation, the acceptance rate and the mean accepted length (tokens per verifying step).

    python3 bench/speculative.py --target models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf \\
        --draft models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf --rounds 3 \\
        [--llama-server PATH/llama-server]
"""
import argparse
import json
import pathlib
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parents[1]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Endpoint:
    def __init__(self, name, cmd, port, engine):
        self.name, self.engine = name, engine
        self.url = f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def wait(self, seconds=600):
        deadline = time.time() + seconds
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=5) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.5)
        raise RuntimeError(f"{self.name} did not start")

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()

    def chat(self, messages, max_tokens, spec_tokens=None):
        body = {"messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": True,
                "stream_options": {"include_usage": True}}
        if self.engine == "llama":
            body["timings_per_token"] = False
        req = urllib.request.Request(self.url + "/v1/chat/completions",
                                     data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        first = last = None
        usage, timings, pieces = None, None, 0
        with urllib.request.urlopen(req, timeout=1800) as r:
            for raw in r:
                line = raw.decode().strip()
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                if chunk.get("usage"):
                    usage = chunk["usage"]
                if chunk.get("timings"):
                    timings = chunk["timings"]
                for c in chunk.get("choices", []):
                    if c.get("delta", {}).get("content"):
                        now = time.perf_counter()
                        first = first or now
                        last = now
                        pieces += 1
        tokens = usage["completion_tokens"] if usage else pieces
        result = {"tokens": tokens,
                  "decode_tps": (tokens - 1) / (last - first) if last and last > first else None}
        spec = (usage or {}).get("speculative")
        if spec:
            result.update(proposed=spec["proposed_tokens"], accepted=spec["accepted_tokens"],
                          steps=spec["verify_steps"])
        elif timings and timings.get("draft_n"):
            # llama.cpp's server reports its drafts per request.
            result.update(proposed=timings["draft_n"], accepted=timings.get("draft_n_accepted", 0),
                          steps=None)
        return result


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", default=str(ROOT / "models" / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"))
    p.add_argument("--draft", default=str(ROOT / "models" / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"))
    p.add_argument("--pagoda", default=str(ROOT / "build" / "pagoda"))
    p.add_argument("--llama-server", help="llama.cpp's llama-server, run as a peer")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--max-tokens", type=int, default=192)
    p.add_argument("--k", type=int, default=4, help="tokens proposed per step")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--sets", default="grounded,open")
    p.add_argument("--configs", default="plain,ngram,draft,both",
                   help="pagoda configurations to run")
    p.add_argument("--json", help="write every request's figures here")
    args = p.parse_args()

    common = ["serve", "-m", args.target, "-t", str(args.threads), "--kv-tokens", "8192",
              "--kv-type", "f16", "--max-seqs", "4", "--log-format", "none"]
    pagoda_configs = {
        "plain": [],
        "ngram": ["--spec-method", "ngram", "--num-speculative-tokens", str(args.k)],
        "draft": ["--draft-model", args.draft, "--spec-method", "draft",
                  "--num-speculative-tokens", str(args.k)],
        "both": ["--draft-model", args.draft, "--spec-method", "both",
                 "--num-speculative-tokens", str(args.k)],
    }
    endpoints = []
    try:
        for name in args.configs.split(","):
            port = free_port()
            endpoints.append(Endpoint(f"pagoda {name}",
                                      [args.pagoda, *common, "--port", str(port),
                                       *pagoda_configs[name]], port, "pagoda"))
        if args.llama_server:
            base = [args.llama_server, "-m", args.target, "-t", str(args.threads), "-c", "8192",
                    "-np", "1", "--host", "127.0.0.1", "--no-webui"]
            port = free_port()
            endpoints.append(Endpoint("llama.cpp plain", [*base, "--port", str(port)], port,
                                      "llama"))
            port = free_port()
            endpoints.append(Endpoint("llama.cpp ngram", [*base, "--port", str(port),
                                                          "--spec-type", "ngram-simple",
                                                          "--spec-ngram-simple-size-n", "3",
                                                          "--spec-ngram-simple-size-m",
                                                          str(args.k)],
                                      port, "llama"))
            port = free_port()
            endpoints.append(Endpoint("llama.cpp draft", [*base, "--port", str(port), "-md",
                                                          args.draft, "--spec-type",
                                                          "draft-simple", "--spec-draft-n-max",
                                                          str(args.k), "-td", str(args.threads)],
                                      port, "llama"))
        for e in endpoints:
            e.wait()
        results = {}  # (set, endpoint) -> list of request results
        for r in range(args.rounds):
            for set_name in args.sets.split(","):
                prompts = json.loads((ROOT / "bench" / "prompts" /
                                      f"spec_{set_name}.json").read_text())["prompts"]
                for i, prompt in enumerate(prompts):
                    # Rotate which configuration goes first.
                    order = endpoints[(r + i) % len(endpoints):] + endpoints[:(r + i) % len(endpoints)]
                    for e in order:
                        out = e.chat(prompt["messages"], args.max_tokens)
                        out.update(round=r, prompt=prompt["name"])
                        results.setdefault((set_name, e.name), []).append(out)
                        print(f"round {r} {set_name:8} {prompt['name']:14} {e.name:18} "
                              f"{out['tokens']:4d} tokens {out['decode_tps'] or 0:7.2f} tok/s",
                              file=sys.stderr, flush=True)
    finally:
        for e in endpoints:
            e.stop()

    print("| prompts | engine, proposer | decode tok/s (median) | speed-up | acceptance | "
          "mean accepted length |")
    print("|---|---|---|---|---|---|")
    for set_name in args.sets.split(","):
        base = {}
        for e in endpoints:
            rs = results[(set_name, e.name)]
            tps = statistics.median(x["decode_tps"] for x in rs if x["decode_tps"])
            engine = e.name.split()[0]
            if e.name.endswith("plain"):
                base[engine] = tps
            proposed = sum(x.get("proposed", 0) for x in rs)
            accepted = sum(x.get("accepted", 0) for x in rs)
            steps = [x.get("steps") for x in rs if x.get("steps")]
            acc = f"{100 * accepted / proposed:.1f} %" if proposed else "-"
            mal = f"{(accepted + sum(steps)) / sum(steps):.2f}" if steps else "-"
            speedup = f"{tps / base[engine]:.2f}x" if engine in base else "-"
            print(f"| {set_name} | {e.name} | {tps:.2f} | {speedup} | {acc} | {mal} |")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(
            {f"{k[0]}/{k[1]}": v for k, v in results.items()}, indent=1))


if __name__ == "__main__":
    main()
