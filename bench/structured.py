#!/usr/bin/env python3
"""Decode speed under a JSON schema against unconstrained decode: one pagoda server, the same
chat prompts, greedy, streamed; time per output token = (last token time - first token time) /
(tokens - 1). Single stream, then 16 concurrent streams, requests with and without the schema
alternating. Also the cost of a schema the server has not seen: time to first token of its first
request against the next ones (the grammar's parse and its first trie walks).

    python3 bench/structured.py --model models/smollm2-135m-instruct-q4_1.gguf
"""
import argparse
import concurrent.futures
import json
import pathlib
import random
import signal
import statistics
import subprocess
import sys
import time
import urllib.request

from benchutil import free_port, wait_healthy

ROOT = pathlib.Path(__file__).resolve().parents[1]

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "email": {"type": "string", "maxLength": 60},
        "city": {"type": "string", "maxLength": 40},
        "country": {"type": "string", "maxLength": 40},
        "employed": {"type": "boolean"},
        "salary": {"type": "number"},
        "skills": {"type": "array", "items": {"type": "string", "maxLength": 20}, "maxItems": 5},
        "manager": {"anyOf": [{"type": "null"}, {"type": "string", "maxLength": 40}]},
        "joined": {"type": "string", "format": "date"},
    },
    "required": ["name", "age", "email", "city", "country", "employed", "salary", "skills",
                 "manager", "joined"],
    "additionalProperties": False,
}

PROMPTS = [
    "Describe an employee of a bakery in Lyon.",
    "Invent a software engineer who lives in Osaka.",
    "Give me the profile of a nurse from Toronto.",
    "Create a record for a teacher in Nairobi.",
]


def chat(url, prompt, schema, max_tokens, salt=""):
    body = {"messages": [{"role": "user", "content": prompt + salt}], "temperature": 0,
            "max_tokens": max_tokens, "stream": True, "stream_options": {"include_usage": True}}
    if schema is not None:
        body["response_format"] = {"type": "json_schema",
                                   "json_schema": {"name": "record", "schema": schema}}
    req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    start = time.perf_counter()
    first = last = None
    tokens = 0
    with urllib.request.urlopen(req, timeout=1800) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
            if any(c.get("delta", {}).get("content") for c in chunk.get("choices", [])):
                now = time.perf_counter()
                first = first or now
                last = now
    return {"ttft": (first or start) - start, "tokens": tokens,
            "tpot": (last - first) / (tokens - 1) if tokens > 1 and last > first else None}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=str(ROOT / "models" / "smollm2-135m-instruct-q4_1.gguf"))
    p.add_argument("--pagoda", default=str(ROOT / "build" / "pagoda"))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--max-tokens", type=int, default=160)
    p.add_argument("--streams", type=int, default=16)
    args = p.parse_args()

    port = free_port()
    proc = subprocess.Popen([args.pagoda, "serve", "-m", args.model, "--port", str(port), "-t",
                             str(args.threads), "--kv-tokens", "65536", "--log-format", "none"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc)
        chat(url, "warm up", None, 8)
        # A schema the server has not seen, then the same one again.
        new = [chat(url, PROMPTS[0], SCHEMA, 4)["ttft"]]
        seen = [chat(url, PROMPTS[0], SCHEMA, 4)["ttft"] for _ in range(3)]
        plain_ttft = [chat(url, PROMPTS[0], None, 4)["ttft"] for _ in range(3)]
        print(f"first request with the new schema: TTFT {1000 * new[0]:.1f} ms; the same schema "
              f"again: {1000 * statistics.median(seen):.1f} ms; no schema: "
              f"{1000 * statistics.median(plain_ttft):.1f} ms")

        rows = []
        for streams in (1, args.streams):
            tpot = {"schema": [], "none": []}
            for r in range(args.rounds):
                jobs = []
                if streams == 1:
                    for i, prompt in enumerate(PROMPTS):
                        for kind in (("schema", "none") if (r + i) % 2 == 0 else ("none", "schema")):
                            jobs.append((kind, prompt, f" ({r}.{i})"))
                else:
                    # Half the streams constrained, half not, in the same batch.
                    for i in range(streams):
                        kind = "schema" if (r + i) % 2 == 0 else "none"
                        jobs.append((kind, PROMPTS[i % len(PROMPTS)], f" ({r}.{i})"))
                if streams == 1:
                    results = [(k, chat(url, pr, SCHEMA if k == "schema" else None,
                                        args.max_tokens, salt)) for k, pr, salt in jobs]
                else:
                    # Both kinds run together in the same batch, interleaved.
                    random.Random(r).shuffle(jobs)
                    with concurrent.futures.ThreadPoolExecutor(len(jobs)) as pool:
                        futures = [(k, pool.submit(chat, url, pr, SCHEMA if k == "schema" else None,
                                                   args.max_tokens, salt)) for k, pr, salt in jobs]
                        results = [(k, f.result()) for k, f in futures]
                this_round = {"schema": [], "none": []}
                for k, res in results:
                    if res["tpot"]:
                        tpot[k].append(res["tpot"])
                        this_round[k].append(res["tpot"])
                # The first round over a schema also pays the first walks of its states' masks.
                s = statistics.median(this_round["schema"])
                n = statistics.median(this_round["none"])
                rows.append((streams, str(r), 1000 * n, 1000 * s, s / n, len(this_round["schema"])))
            s, n = statistics.median(tpot["schema"]), statistics.median(tpot["none"])
            rows.append((streams, "all", 1000 * n, 1000 * s, s / n, len(tpot["schema"])))
        print("| streams | round | ms/token, no schema | ms/token, 10-field schema | ratio | "
              "requests |")
        print("|---|---|---|---|---|---|")
        for streams, r, n, s, ratio, count in rows:
            print(f"| {streams} | {r} | {n:.2f} | {s:.2f} | {ratio:.3f} | {count} |")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)


if __name__ == "__main__":
    main()
