#!/usr/bin/env python3
"""The table of scripts/device-check: decode, prefill and batched throughput on the GPU, each
beside the ceiling measured in the same run (peaks.json: device-to-device copy bandwidth and
dense F16 tensor throughput).

    python3 bench/device_table.py RESULTS_DIR

Decode's bandwidth is the bytes one step reads (every layer matrix and the output matrix,
`step_weight_bytes`) times decode tokens/s; prefill's FLOP/s is 2 x `step_parameters` per
prompt token (attention's own products not counted)."""
import glob
import json
import os
import sys


def load(path):
    with open(path) as f:
        return json.load(f)


def main():
    root = sys.argv[1]
    peaks_path = os.path.join(root, "peaks.json")
    peaks = load(peaks_path) if os.path.exists(peaks_path) else {}
    copy = peaks.get("copy_gb_s")
    tensor = peaks.get("f16_tflop_s")
    print(f"copy bandwidth: {copy:.0f} GB/s" if copy else "copy bandwidth: not measured")
    print(f"dense F16 tensor peak: {tensor:.0f} TFLOP/s" if tensor else
          "dense F16 tensor peak: not measured")
    print()
    head = ("model", "decode tok/s", "GB/s", "of copy", "prefill 512 tok/s", "TFLOP/s",
            "of F16 peak", "prefill 4096 tok/s", "TFLOP/s", "of F16 peak")
    rows = []
    for path in sorted(glob.glob(os.path.join(root, "lat512-*.json"))):
        name = os.path.basename(path)[len("lat512-"):-len(".json")]
        r = load(path)
        decode = r.get("decode_tokens_per_s") or 0
        gbs = decode * r["step_weight_bytes"] / 1e9
        row = [name, f"{decode:.1f}", f"{gbs:.0f}", f"{gbs / copy:.0%}" if copy else "-"]
        for length, rr in (("512", r), ("4096", None)):
            if rr is None:
                p = os.path.join(root, f"lat4096-{name}.json")
                rr = load(p) if os.path.exists(p) else None
            if rr is None:
                row += ["-", "-", "-"]
                continue
            tps = rr.get("prefill_tokens_per_s") or 0
            tf = tps * 2 * rr["step_parameters"] / 1e12
            row += [f"{tps:.0f}", f"{tf:.1f}", f"{tf / tensor:.1%}" if tensor else "-"]
        rows.append(row)
    print_table(head, rows)
    print()
    head = ("model", "max seqs", "requests", "output tok/s", "total tok/s", "wall s",
            "batch-1 decode tok/s")
    rows = []
    for path in sorted(glob.glob(os.path.join(root, "thr*-*.json"))):
        base = os.path.basename(path)[len("thr"):-len(".json")]
        seqs, name = base.split("-", 1)
        r = load(path)
        run = r["runs"][0]
        lat = os.path.join(root, f"lat512-{name}.json")
        one = load(lat).get("decode_tokens_per_s") if os.path.exists(lat) else None
        rows.append([name, seqs, str(run["num_finished"]), f"{run['output_tokens_per_s']:.0f}",
                     f"{run['total_tokens_per_s']:.0f}", f"{run['wall_s']:.1f}",
                     f"{one:.1f}" if one else "-"])
    print_table(head, rows)


def print_table(head, rows):
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)] if rows else \
        [len(h) for h in head]
    print("  ".join(h.ljust(w) for h, w in zip(head, widths)))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print("  ".join(str(x).ljust(w) for x, w in zip(row, widths)))


if __name__ == "__main__":
    main()
