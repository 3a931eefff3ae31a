#!/usr/bin/env python3
"""A multi-turn agent workload on a KV cache that holds about one conversation (issue 36):
several conversations take turns, each turn sending the whole conversation so far (the last
answer and a new message appended), so by the time a conversation comes back the others have
pushed its blocks out of the pool. Time to first token per turn with the pool alone (its prefix
is recomputed), with the host-memory tier (--kv-offload-gb) and with the disk tier (--kv-disk).
Greedy outputs are checked equal across the three.

    python3 bench/kv_tiers.py --model models/smollm2-135m-instruct-q4_1.gguf

Every server runs with the same threads, KV memory and step budget; one request at a time, or
--concurrency conversations at once (each still one turn after the other), where the table
adds TTFT p50 / p99 over every turn and the total throughput. Under the table, for each
server: its slowest turn, and what the engine did while that turn waited (steps, tokens
computed, preemptions, from /metrics sampled twice a second), and the longest time without a
step: a scheduler that starves a request keeps stepping; a process that gets no CPU does not.

--preempt instead runs a preemption-heavy load: --preempt requests at once whose outputs
outgrow the pool, with the pool alone (a preempted request recomputes what it dropped) and with
the host-memory tier (its blocks swapped out and back), from /metrics' counters.
"""
import argparse
import concurrent.futures
import json
import statistics
import tempfile
import threading
import time
import urllib.request

from benchutil import ROOT, Server, first_token, pagoda_serve_cmd, print_table


def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=1800) as r:
        return json.loads(r.read())


def metric(url, name):
    with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return 0.0


def metrics(url, names):
    """The values of the /metrics series `names` (0 for one that is absent), one request."""
    values = dict.fromkeys(names, 0.0)
    with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
        for line in r.read().decode().splitlines():
            name, _, value = line.partition(" ")
            if name in values:
                values[name] = float(value)
    return values


class Progress:
    """The engine's counters sampled every `period` seconds in a thread while the block runs:
    (time, engine steps, tokens computed, preemptions)."""
    NAMES = ("pagoda_engine_steps_total", "pagoda_computed_tokens_total",
             "pagoda_num_preemptions_total")

    def __init__(self, url, period=0.5):
        self.url, self.period, self.samples = url, period, []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.sample)

    def sample(self):
        while True:
            values = metrics(self.url, self.NAMES)
            self.samples.append((time.perf_counter(), *(values[n] for n in self.NAMES)))
            if self.done.wait(self.period):
                return

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join()

    def during(self, start, end):
        """(steps, tokens computed, preemptions) between the last sample before `start` and
        the first after `end`."""
        before = [s for s in self.samples if s[0] <= start] or self.samples[:1]
        after = [s for s in self.samples if s[0] >= end] or self.samples[-1:]
        return tuple(int(a - b) for a, b in zip(after[0][1:], before[-1][1:]))

    def longest_stall(self):
        """The longest time between two samples with no engine step between them."""
        longest, since = 0.0, self.samples[0]
        for s in self.samples[1:]:
            if s[1] != since[1]:
                since = s
            longest = max(longest, s[0] - since[0])
        return longest


def messages(source, conversations, turns, chunk):
    """[conversation][turn] new text: consecutive pieces of `source`, `chunk` bytes each."""
    out, at = [], 0
    for _ in range(conversations):
        conv = []
        for _ in range(turns):
            conv.append(source[at:at + chunk])
            at = (at + chunk) % max(1, len(source) - chunk)
        out.append(conv)
    return out


def run(url, msgs, max_tokens, concurrency=1):
    """Turns round-robin over the conversations, `concurrency` conversations' turns at once:
    TTFT per turn (a list per turn) and the texts, by conversation and turn."""
    history = ["" for _ in msgs]
    ttfts = [[] for _ in msgs[0]]
    texts, starts = {}, {}

    def one(c, turn):
        history[c] += "\nUser: " + msgs[c][turn] + "\nAssistant:"
        start = time.perf_counter()
        ttft, text = first_token(url, history[c], max_tokens, ignore_eos=True)
        history[c] += text
        return start, ttft, text

    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        for turn in range(len(msgs[0])):
            for c, (start, ttft, text) in enumerate(pool.map(lambda c: one(c, turn),
                                                             range(len(msgs)))):
                ttfts[turn].append(ttft)
                texts[(c, turn)] = text
                starts[(c, turn)] = start
    return ttfts, texts, starts


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def preempt_load(args):
    """--preempt requests at once with long outputs on a small pool: preemptions, tokens
    recomputed, tokens swapped back from host memory, wall time; pool alone vs host tier."""
    prompts = [f"Request {i}: " + open(args.source, encoding="utf-8").read()[i * 300:i * 300 + 600]
               for i in range(args.preempt)]
    rows, outputs = [], []
    for name, extra in (("pool alone (recompute)", []),
                        ("pool + host memory (swap)", ["--kv-offload-gb", "1"])):
        cmd = pagoda_serve_cmd(args.pagoda, args.model, args.threads, args.kv_tokens, 512,
                               max_seqs=args.preempt,
                               extra=["--max-model-len", str(args.kv_tokens), *extra])
        with Server(name, cmd) as s:
            start = time.perf_counter()
            with concurrent.futures.ThreadPoolExecutor(args.preempt) as pool:
                outs = list(pool.map(lambda p: first_token(s.url, p, args.max_tokens,
                                                           ignore_eos=True)[1], prompts))
            wall = time.perf_counter() - start
            m = {n: metric(s.url, "pagoda_" + n) for n in (
                "num_preemptions_total", "recomputed_tokens_total",
                "prefix_cache_host_hits_total", "computed_tokens_total")}
        outputs.append(outs)
        rows.append([name, f"{m['num_preemptions_total']:.0f}",
                     f"{m['recomputed_tokens_total']:.0f}",
                     f"{m['prefix_cache_host_hits_total']:.0f}",
                     f"{m['computed_tokens_total']:.0f}", f"{wall:.1f} s",
                     f"{args.preempt * args.max_tokens / wall:.1f}"])
    assert outputs[0] == outputs[1], "the outputs differ between recompute and swap"
    print(f"{args.preempt} requests at once, 600-byte prompts, {args.max_tokens}-token answers, "
          f"a {args.kv_tokens}-token pool")
    print_table(None, ["configuration", "preemptions", "tokens recomputed",
                       "tokens swapped back (host hits)", "token rows computed", "wall",
                       "output tok/s"], rows)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--pagoda", default=str(ROOT / "build" / "pagoda"))
    p.add_argument("--model", required=True)
    p.add_argument("--source", default=str(ROOT / "docs" / "SCHEDULER.md"))
    p.add_argument("--conversations", type=int, default=4)
    p.add_argument("--turns", type=int, default=4)
    p.add_argument("--chunk-bytes", type=int, default=1200, help="a new message's length")
    p.add_argument("--max-tokens", type=int, default=16, help="an answer's length")
    p.add_argument("--kv-tokens", type=int, default=1536, help="the pool: about one conversation")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--concurrency", type=int, default=1, help="conversations at once")
    p.add_argument("--tiers", default="pool,host,disk", help="the configurations to run")
    p.add_argument("--preempt", type=int, default=0,
                   help="run the preemption load instead: this many requests at once")
    args = p.parse_args()
    if args.preempt:
        preempt_load(args)
        return
    source = open(args.source, encoding="utf-8").read()
    msgs = messages(source, args.conversations, args.turns, args.chunk_bytes)

    results, notes = {}, []
    with tempfile.TemporaryDirectory() as tmp:
        configs = {"pool": ("pool alone (recomputed)", []),
                   "host": ("pool + host memory (--kv-offload-gb 1)", ["--kv-offload-gb", "1"]),
                   "disk": ("pool + disk (--kv-disk)", ["--kv-disk", f"{tmp}/disk"])}
        for key in args.tiers.split(","):
            name, extra = configs[key]
            cmd = pagoda_serve_cmd(args.pagoda, args.model, args.threads, args.kv_tokens, 512,
                                   max_seqs=args.concurrency,
                                   extra=["--max-model-len", str(args.kv_tokens), *extra])
            with Server(name, cmd) as s, Progress(s.url) as progress:
                start = time.perf_counter()
                ttfts, texts, starts = run(s.url, msgs, args.max_tokens, args.concurrency)
                wall = time.perf_counter() - start
                hits = {t: metric(s.url, f"pagoda_prefix_cache_{t}_hits_total")
                        for t in ("pool", "host", "disk")}
                queried = metric(s.url, "pagoda_prefix_cache_queries_total")
            results[name] = (ttfts, texts, wall, hits, queried)
            (c, t), begin = max(starts.items(), key=lambda kv: ttfts[kv[0][1]][kv[0][0]])
            slowest = ttfts[t][c]
            steps, computed, preempted = progress.during(begin, begin + slowest)
            notes.append(f"{name}: slowest turn conversation {c + 1} turn {t + 1}, TTFT "
                         f"{slowest:.2f} s, while it waited {steps} engine steps, {computed} "
                         f"tokens computed, {preempted} preemptions; longest time without a "
                         f"step {progress.longest_stall():.2f} s")
    base = next(iter(results.values()))
    for name, (_, texts, _, _, _) in results.items():
        assert texts == base[1], f"{name}: outputs differ from the pool alone's"

    columns = ["configuration"] + [f"turn {t + 1} TTFT p50" for t in range(args.turns)] + [
        "TTFT p50 / p99", "all turns", "output tok/s", "prompt tokens from pool / host / disk"]
    rows = []
    num_turns = args.conversations * args.turns
    for name, (ttfts, _, wall, hits, queried) in results.items():
        per_turn = [f"{statistics.median(t):.2f} s" for t in ttfts]
        every = [x for t in ttfts for x in t]
        rows.append([name, *per_turn,
                     f"{percentile(every, 0.5):.2f} / {percentile(every, 0.99):.2f} s",
                     f"{wall:.1f} s", f"{num_turns * args.max_tokens / wall:.1f}",
                     f"{hits['pool']:.0f} / {hits['host']:.0f} / {hits['disk']:.0f} "
                     f"of {queried:.0f}"])
    print(f"{args.conversations} conversations x {args.turns} turns, {args.concurrency} at once, "
          f"{args.chunk_bytes}-byte messages, {args.max_tokens}-token answers, a "
          f"{args.kv_tokens}-token pool")
    print_table(None, columns, rows)
    for note in notes:
        print(note)


if __name__ == "__main__":
    main()
