"""What each KV cache type costs and gives, per model: bytes per token, quality against the F16
cache (KL divergence, top-1 agreement, perplexity ratio; `pagoda bench quality` with the same
file as its own reference), and throughput (`pagoda bench throughput`): one request decoding
alone, and a batch of requests at once. Rounds alternate the order of the types, and the table
gives each figure's median over rounds.

    python3 bench/kv_types.py [--models M ...] [--types f16 q8_0 fp8] [--rounds 2]

Models default to the ones scripts/setup installs (under models/). Prints Markdown tables.
"""
import argparse
import json
import pathlib
import subprocess
import sys

from benchutil import ROOT, SHARED, median, print_table, round_order

DEFAULT_MODELS = ["smollm2-135m-instruct-q4_1.gguf", "gemma-3-270m-q4_k_m.gguf",
                  "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"]


def run_json(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def quality(pagoda, model, kv_type, args):
    return run_json([pagoda, "bench", "quality", "-m", model, "--kv-type", kv_type, "--ref", model,
                     "--ref-kv-type", "f16", "-c", str(args.ctx), "--max-windows",
                     str(args.windows), "-t", str(args.threads), "--json", "-"])


def throughput(pagoda, model, kv_type, num_requests, args):
    j = run_json([pagoda, "bench", "throughput", "-m", model, "--kv-type", kv_type, "-n",
                  str(num_requests), "--prompt-len", str(args.prompt_len), "--output-len",
                  str(args.output_len), "-t", str(args.threads), "--no-progress", "--json", "-"])
    run = j["runs"][0] if "runs" in j else j
    per_token = j["kv_cache_bytes"] / (j["num_kv_blocks"] * j["block_size"])
    return run["output_tokens_per_s"], per_token


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pagoda", default=str(ROOT / "build" / "pagoda"))
    p.add_argument("--models", nargs="+", default=None)
    p.add_argument("--types", nargs="+", default=["f16", "q8_0", "fp8"])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--ctx", type=int, default=512)
    p.add_argument("--windows", type=int, default=8, help="quality windows of --ctx tokens")
    p.add_argument("--batch", type=int, default=16, help="requests in the batched run")
    p.add_argument("--prompt-len", type=int, default=256)
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument("-t", "--threads", type=int, default=2)
    args = p.parse_args()
    models = args.models or [str(ROOT / "models" / m) for m in DEFAULT_MODELS
                             if (ROOT / "models" / m).exists()]
    if not models:
        sys.exit("no models: run scripts/setup, or pass --models")
    if not (SHARED / "testdata/text/tinystories_valid_head.txt").exists():
        sys.exit(f"no evaluation text under {SHARED} (set PAGODA_SHARED)")

    for model in models:
        name = pathlib.Path(model).name
        rows = {t: {"q": quality(args.pagoda, model, t, args), "one": [], "batch": []}
                for t in args.types}
        for r in range(args.rounds):
            for t in round_order(args.types, r):
                one, per_token = throughput(args.pagoda, model, t, 1, args)
                batch, _ = throughput(args.pagoda, model, t, args.batch, args)
                rows[t]["one"].append(one)
                rows[t]["batch"].append(batch)
                rows[t]["bytes"] = per_token
                print(f"{name} {t} round {r}: {one:.1f} / {batch:.1f} tok/s", file=sys.stderr)
        f16 = rows.get("f16")
        table = []
        for t in args.types:
            q, row = rows[t]["q"], rows[t]
            vs = (lambda key: f"{median(row[key]) / median(f16[key]):.2f}x") if f16 else (lambda key: "")
            table.append([t, f"{row['bytes']:.0f}",
                          f"{row['bytes'] / f16['bytes']:.3f}" if f16 else "",
                          f"{q['kl_mean']:.6f}", f"{q['kl_p99']:.5f}", f"{q['top1_agreement_pct']:.2f}",
                          f"{q['ppl_ratio']:.5f}",
                          f"{median(row['one']):.1f} ({vs('one')})",
                          f"{median(row['batch']):.1f} ({vs('batch')})"])
        print_table(f"{name}: KV types against the F16 cache ({args.windows} windows of {args.ctx} "
                    f"tokens; decode {args.prompt_len}+{args.output_len} tokens, 1 and {args.batch} "
                    f"requests, {args.threads} threads, median of {args.rounds} rounds)",
                    ["KV", "bytes/token", "vs F16", "mean KL", "p99 KL", "top-1 %", "PPL ratio",
                     "1 request tok/s", f"{args.batch} requests tok/s"], table)


if __name__ == "__main__":
    main()
