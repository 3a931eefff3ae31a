#!/usr/bin/env python3
"""The table and JSON of `scripts/device-check --prefill`: prefill of a short and a long prompt
(512 and 4096 tokens on a GPU) with pagoda's old and new CUDA kernels (PAGODA_CUDA_KERNELS=old /
new) beside llama.cpp's llama-bench on the same files, as tokens/s and as a fraction of the F16
tensor peak measured in the same run, and the perplexity of each beside the CPU backend's.

    python3 bench/device_prefill.py RESULTS_DIR --gpu NAME --date YYYY-MM-DD [--short 512]
        [--long 4096] [--json OUT.json]

RESULTS_DIR holds, per model NAME (e.g. llama-3.1-8b-q4_0): p512-{old,new}-NAME.json and
p4096-{old,new}-NAME.json (pagoda bench latency: prefill_tokens_per_s, step_parameters),
q-{old,new,cpu}-NAME.json (bench quality: mean_nll), llama-NAME.json (llama-bench -o json), and
peaks.json and tests.txt (the CUDA tests' output, with CudaMmq.TimingOfThePrefillProducts's
lines) once. FLOP/s count 2 per parameter of a step's products per token (attention's own
products not counted, as llama.cpp and vLLM count them). Exits 1 when a new-kernel run's mean
NLL is more than --nll-bound from the CPU backend's."""
import argparse
import glob
import json
import os
import re

from device_results import load, shape_and_type


def fraction(tok_s, params, tensor):
    if not tok_s or not params or not tensor:
        return None
    return tok_s * 2 * params / 1e12 / tensor


def pagoda_run(root, name, kernels, tensor):
    short = load(os.path.join(root, f"p512-{kernels}-{name}.json"))
    long = load(os.path.join(root, f"p4096-{kernels}-{name}.json"))
    if short is None and long is None:
        return None
    shape, dtype = shape_and_type(name)
    params = (short or long).get("step_parameters")
    run = {"engine": "pagoda", "kernels": kernels, "shape": shape, "type": dtype,
           "step_parameters": params}
    for key, lat in (("prefill512", short), ("prefill4096", long)):
        tok_s = lat.get("prefill_tokens_per_s") if lat else None
        run[f"{key}_tok_s"] = tok_s
        run[f"{key}_peak_fraction"] = fraction(tok_s, params, tensor)
    quality, cpu = load(os.path.join(root, f"q-{kernels}-{name}.json")), \
        load(os.path.join(root, f"q-cpu-{name}.json"))
    run["mean_nll"] = quality.get("mean_nll") if quality else None
    run["cpu_mean_nll"] = cpu.get("mean_nll") if cpu else None
    if run["mean_nll"] is not None and run["cpu_mean_nll"] is not None:
        run["nll_difference"] = run["mean_nll"] - run["cpu_mean_nll"]
    return run


def llama_run(root, name, params, tensor, short, long):
    rows = load(os.path.join(root, f"llama-{name}.json"))
    if not rows:
        return None
    shape, dtype = shape_and_type(name)
    run = {"engine": "llama.cpp", "shape": shape, "type": dtype}
    for r in rows:
        if r.get("n_gen", 0) == 0 and r.get("n_prompt") in (short, long):
            key = "prefill512" if r["n_prompt"] == short else "prefill4096"
            run[f"{key}_tok_s"] = r["avg_ts"]
            run[f"{key}_peak_fraction"] = fraction(r["avg_ts"], params, tensor)
    return run


def timing_lines(path):
    pattern = re.compile(r"timing prefill (\S+)\s+(\S+)\s+(\d+)x(\d+)\s+n=(\d+)\s+old\s+([\d.]+) us"
                         r"\s+([\d.]+) TFLOP/s\s+new\s+([\d.]+) us\s+([\d.]+) TFLOP/s")
    products = []
    if os.path.exists(path):
        for line in open(path):
            m = pattern.search(line)
            if m:
                products.append({"type": m[1], "matrix": m[2], "rows": int(m[3]), "cols": int(m[4]),
                                 "tokens": int(m[5]), "old_us": float(m[6]),
                                 "old_tflop_s": float(m[7]), "new_us": float(m[8]),
                                 "new_tflop_s": float(m[9])})
    return products


def fmt(v, spec):
    return "-" if v is None else format(v, spec)


def print_table(head, rows):
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)] if rows else \
        [len(h) for h in head]
    print("  ".join(h.ljust(w) for h, w in zip(head, widths)))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print("  ".join(str(x).ljust(w) for x, w in zip(row, widths)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("--gpu", default="unknown")
    ap.add_argument("--date", default="")
    ap.add_argument("--short", type=int, default=512)
    ap.add_argument("--long", type=int, default=4096)
    ap.add_argument("--nll-bound", type=float, default=0.02)
    ap.add_argument("--json")
    args = ap.parse_args()
    peaks = load(os.path.join(args.root, "peaks.json")) or {}
    tensor = peaks.get("f16_tflop_s")
    names = sorted({re.sub(r"^p(512|4096)-(old|new)-", "", os.path.basename(p))[:-len(".json")]
                    for p in glob.glob(os.path.join(args.root, "p*-*-*.json"))})
    runs, status = [], 0
    for name in names:
        params = None
        for kernels in ("old", "new"):
            run = pagoda_run(args.root, name, kernels, tensor)
            if run:
                runs.append(run)
                params = run["step_parameters"]
                diff = run.get("nll_difference")
                if kernels == "new" and diff is not None and abs(diff) > args.nll_bound:
                    print(f"MISMATCH: {name} new kernels' mean NLL is {diff:+.4f} from the CPU's")
                    status = 1
        run = llama_run(args.root, name, params, tensor, args.short, args.long)
        if run:
            runs.append(run)
    print(f"{args.gpu}, {args.date}: F16 peak {fmt(tensor, '.0f')} TFLOP/s, "
          f"prompts of {args.short} and {args.long} tokens")
    head = ("engine", "kernels", "shape", "type", f"prefill {args.short} tok/s", "of peak",
            f"prefill {args.long} tok/s", "of peak", "mean NLL", "minus CPU's")
    print_table(head, [[r["engine"], r.get("kernels", "-"), r["shape"], r["type"],
                        fmt(r.get("prefill512_tok_s"), ".0f"),
                        fmt(r.get("prefill512_peak_fraction"), ".1%"),
                        fmt(r.get("prefill4096_tok_s"), ".0f"),
                        fmt(r.get("prefill4096_peak_fraction"), ".1%"),
                        fmt(r.get("mean_nll"), ".4f"), fmt(r.get("nll_difference"), "+.4f")]
                       for r in runs])
    products = timing_lines(os.path.join(args.root, "tests.txt"))
    if products:
        print()
        print_table(("type", "matrix", "rows x cols", "tokens", "old us", "old TFLOP/s", "new us",
                     "new TFLOP/s"),
                    [[p["type"], p["matrix"], f"{p['rows']}x{p['cols']}", p["tokens"], p["old_us"],
                      p["old_tflop_s"], p["new_us"], p["new_tflop_s"]] for p in products])
    if args.json:
        out = {"gpu": args.gpu, "date": args.date, "f16_tflops": tensor,
               "copy_gb_s": peaks.get("copy_gb_s"), "runs": runs, "products": products}
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
            f.write("\n")
        print(f"\nwrote {args.json}")
    return status


if __name__ == "__main__":
    raise SystemExit(main())
