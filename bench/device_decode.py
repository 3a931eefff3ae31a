#!/usr/bin/env python3
"""The table and JSON of `scripts/device-check --decode`: pagoda's old and new CUDA kernels
(PAGODA_CUDA_KERNELS=old / new) beside llama.cpp's llama-bench on the same files, each beside
the copy bandwidth and F16 tensor peak measured in the same run.

    python3 bench/device_decode.py RESULTS_DIR --gpu NAME --date YYYY-MM-DD [--json OUT.json]

RESULTS_DIR holds, per model NAME (e.g. llama-3.1-8b-q4_0): lat-{old,new}-NAME.json (pagoda
bench latency), counts-{old,new}-NAME.txt (the backend's "cuda counts: {...}" line),
thr64-{old,new}-NAME.json (bench throughput at 64 sequences; thr64-new64-NAME.json with
batches up to 64 on the q8_1 kernels instead of cuBLAS), llama-NAME.json (llama-bench
-o json), and peaks.json, meta.json ({"runs", "output"} of the latency runs) and timing.txt
(the CUDA tests' output, with CudaProducts.TimingOfTheDecodeProducts's lines) once.
Per-step counts are per decode step: counts-half-{old,new}-NAME.txt holds the counts of the
same latency run with half the output tokens, so the difference is runs * output / 2 steps'."""
import argparse
import glob
import json
import os
import re

from device_results import load, shape_and_type


def counts(path):
    if not os.path.exists(path):
        return None
    with open(path) as f:
        for line in f:
            if line.startswith("cuda counts: "):
                return json.loads(line[len("cuda counts: "):])
    return None


def pagoda_run(root, name, kernels, peaks):
    lat = load(os.path.join(root, f"lat-{kernels}-{name}.json"))
    if lat is None:
        return None
    shape, dtype = shape_and_type(name)
    decode = lat.get("decode_tokens_per_s") or 0.0
    prefill = lat.get("prefill_tokens_per_s") or 0.0
    copy, tensor = peaks.get("copy_gb_s"), peaks.get("f16_tflop_s")
    run = {"engine": "pagoda", "kernels": kernels, "shape": shape, "type": dtype,
           "decode_tok_s": decode, "prefill512_tok_s": prefill,
           "step_weight_bytes": lat.get("step_weight_bytes")}
    gbs = decode * lat["step_weight_bytes"] / 1e9
    run["decode_gb_s"] = gbs
    run["decode_bandwidth_fraction"] = gbs / copy if copy else None
    tflops = prefill * 2 * lat["step_parameters"] / 1e12
    run["prefill512_peak_fraction"] = tflops / tensor if tensor else None
    thr = load(os.path.join(root, f"thr64-{kernels}-{name}.json"))
    run["throughput64_tok_s"] = thr["runs"][0]["output_tokens_per_s"] if thr else None
    if kernels == "new":  # batches up to 64 on the q8_1 kernels (PAGODA_CUDA_GEMM_MIN_TOKENS=65)
        thr = load(os.path.join(root, f"thr64-new64-{name}.json"))
        run["throughput64_q8_tok_s"] = thr["runs"][0]["output_tokens_per_s"] if thr else None
    c = counts(os.path.join(root, f"counts-{kernels}-{name}.txt"))
    half = counts(os.path.join(root, f"counts-half-{kernels}-{name}.txt"))
    meta = load(os.path.join(root, "meta.json")) or {}
    steps = meta.get("runs", 0) * (meta.get("output", 0) - meta.get("output", 0) // 2)
    if c and half and steps:  # per decode step: loading and prefill cancel out
        for key in ("launches", "syncs", "mallocs", "memsets", "uploads", "downloads"):
            run[f"{key}_per_step"] = (c[key] - half[key]) / steps
    return run


def llama_run(root, name, step_bytes, peaks):
    rows = load(os.path.join(root, f"llama-{name}.json"))
    if not rows:
        return None
    shape, dtype = shape_and_type(name)
    run = {"engine": "llama.cpp", "shape": shape, "type": dtype}
    for r in rows:
        if r.get("n_gen", 0) > 0 and r.get("n_prompt", 0) == 0:
            run["decode_tok_s"] = r["avg_ts"]
        elif r.get("n_prompt", 0) > 0 and r.get("n_gen", 0) == 0:
            run["prefill512_tok_s"] = r["avg_ts"]
    copy = peaks.get("copy_gb_s")
    if "decode_tok_s" in run and step_bytes and copy:
        run["decode_bandwidth_fraction"] = run["decode_tok_s"] * step_bytes / 1e9 / copy
    return run


def fmt(v, spec):
    return "-" if v is None else format(v, spec)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("--gpu", default="unknown")
    ap.add_argument("--date", default="")
    ap.add_argument("--json")
    args = ap.parse_args()
    peaks = load(os.path.join(args.root, "peaks.json")) or {}
    names = sorted({re.sub(r"^lat-(old|new)-", "", os.path.basename(p))[:-len(".json")]
                    for p in glob.glob(os.path.join(args.root, "lat-*-*.json"))})
    runs = []
    for name in names:
        step_bytes = None
        for kernels in ("old", "new"):
            run = pagoda_run(args.root, name, kernels, peaks)
            if run:
                runs.append(run)
                step_bytes = run["step_weight_bytes"]
        run = llama_run(args.root, name, step_bytes, peaks)
        if run:
            runs.append(run)
    copy, tensor = peaks.get("copy_gb_s"), peaks.get("f16_tflop_s")
    print(f"{args.gpu}, {args.date}: copy {fmt(copy, '.0f')} GB/s, F16 peak {fmt(tensor, '.0f')} TFLOP/s")
    head = ("engine", "kernels", "shape", "type", "decode tok/s", "GB/s", "of copy",
            "launches/step", "syncs/step", "mallocs/step", "64 seqs tok/s", "64 seqs q8 tok/s",
            "prefill 512 tok/s")
    rows = []
    for r in runs:
        rows.append([r["engine"], r.get("kernels", "-"), r["shape"], r["type"],
                     fmt(r.get("decode_tok_s"), ".1f"), fmt(r.get("decode_gb_s"), ".0f"),
                     fmt(r.get("decode_bandwidth_fraction"), ".1%"),
                     fmt(r.get("launches_per_step"), ".0f"), fmt(r.get("syncs_per_step"), ".1f"),
                     fmt(r.get("mallocs_per_step"), ".2f"), fmt(r.get("throughput64_tok_s"), ".0f"),
                     fmt(r.get("throughput64_q8_tok_s"), ".0f"),
                     fmt(r.get("prefill512_tok_s"), ".0f")])
    print_table(head, rows)
    timing = os.path.join(args.root, "timing.txt")
    products = []
    if os.path.exists(timing):
        pattern = re.compile(r"timing (\S+)\s+(\S+)\s+(\d+)x(\d+)\s+old\s+([\d.]+) us\s+([\d.]+) GB/s"
                             r"\s+new\s+([\d.]+) us\s+([\d.]+) GB/s")
        for line in open(timing):
            m = pattern.search(line)
            if m:
                products.append({"type": m[1], "matrix": m[2], "rows": int(m[3]), "cols": int(m[4]),
                                 "old_us": float(m[5]), "old_gb_s": float(m[6]),
                                 "new_us": float(m[7]), "new_gb_s": float(m[8])})
    if products:
        print()
        print_table(("type", "matrix", "rows x cols", "old us", "old GB/s", "new us", "new GB/s"),
                    [[p["type"], p["matrix"], f"{p['rows']}x{p['cols']}", p["old_us"],
                      p["old_gb_s"], p["new_us"], p["new_gb_s"]] for p in products])
    if args.json:
        out = {"gpu": args.gpu, "date": args.date, "copy_gb_s": copy, "f16_tflops": tensor,
               "runs": runs, "products": products}
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
            f.write("\n")
        print(f"\nwrote {args.json}")


def print_table(head, rows):
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)] if rows else \
        [len(h) for h in head]
    print("  ".join(h.ljust(w) for h, w in zip(head, widths)))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print("  ".join(str(x).ljust(w) for x, w in zip(row, widths)))


if __name__ == "__main__":
    main()
