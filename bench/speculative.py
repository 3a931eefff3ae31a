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
import contextlib
import json
import pathlib
import sys
import time
import urllib.request

from benchutil import (ROOT, Server, llama_server_cmd, median, pagoda_serve_cmd, print_table,
                       round_order)


class Endpoint(Server):
    """A server of one engine ("pagoda" or "llama"), started at once; wait for it with
    __enter__."""

    def __init__(self, name, make_cmd, engine):
        super().__init__(name, make_cmd)
        self.engine = engine

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

    pagoda_configs = {
        "plain": [],
        "ngram": ["--spec-method", "ngram", "--num-speculative-tokens", str(args.k)],
        "draft": ["--draft-model", args.draft, "--spec-method", "draft",
                  "--num-speculative-tokens", str(args.k)],
        "both": ["--draft-model", args.draft, "--spec-method", "both",
                 "--num-speculative-tokens", str(args.k)],
    }
    llama_configs = {
        "plain": [],
        "ngram": ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "3",
                  "--spec-ngram-simple-size-m", str(args.k)],
        "draft": ["-md", args.draft, "--spec-type", "draft-simple", "--spec-draft-n-max",
                  str(args.k), "-td", str(args.threads)],
    }
    with contextlib.ExitStack() as stack:
        # Each engine's default step budget (pagoda 512, llama-server 2048); one slot on
        # llama-server, 8192 cells of K/V in F16 on both.
        endpoints = []
        for name in args.configs.split(","):
            endpoints.append(Endpoint(f"pagoda {name}", pagoda_serve_cmd(
                args.pagoda, args.target, args.threads, 8192, 512, max_seqs=4,
                extra=pagoda_configs[name]), "pagoda"))
            stack.push(endpoints[-1])
        if args.llama_server:
            for name, extra in llama_configs.items():
                endpoints.append(Endpoint(f"llama.cpp {name}", llama_server_cmd(
                    args.llama_server, args.target, args.threads, 8192, 2048, 1,
                    kv_unified=False, extra=extra), "llama"))
                stack.push(endpoints[-1])
        for e in endpoints:  # all started above; wait for each to answer
            e.__enter__()
        results = {}  # (set, endpoint) -> list of request results
        for r in range(args.rounds):
            for set_name in args.sets.split(","):
                prompts = json.loads((ROOT / "bench" / "prompts" /
                                      f"spec_{set_name}.json").read_text())["prompts"]
                for i, prompt in enumerate(prompts):
                    # Rotate which configuration goes first.
                    for e in round_order(endpoints, r + i):
                        out = e.chat(prompt["messages"], args.max_tokens)
                        out.update(round=r, prompt=prompt["name"])
                        results.setdefault((set_name, e.name), []).append(out)
                        print(f"round {r} {set_name:8} {prompt['name']:14} {e.name:18} "
                              f"{out['tokens']:4d} tokens {out['decode_tps'] or 0:7.2f} tok/s",
                              file=sys.stderr, flush=True)

    rows = []
    for set_name in args.sets.split(","):
        base = {}
        for e in endpoints:
            rs = results[(set_name, e.name)]
            tps = median([x["decode_tps"] for x in rs if x["decode_tps"]])
            engine = e.name.split()[0]
            if e.name.endswith("plain"):
                base[engine] = tps
            proposed = sum(x.get("proposed", 0) for x in rs)
            accepted = sum(x.get("accepted", 0) for x in rs)
            steps = [x.get("steps") for x in rs if x.get("steps")]
            acc = f"{100 * accepted / proposed:.1f} %" if proposed else "-"
            mal = f"{(accepted + sum(steps)) / sum(steps):.2f}" if steps else "-"
            speedup = f"{tps / base[engine]:.2f}x" if engine in base else "-"
            rows.append([set_name, e.name, f"{tps:.2f}", speedup, acc, mal])
    print_table(None, ["prompts", "engine, proposer", "decode tok/s (median)", "speed-up",
                       "acceptance", "mean accepted length"], rows)
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(
            {f"{k[0]}/{k[1]}": v for k, v in results.items()}, indent=1))


if __name__ == "__main__":
    main()
