#!/usr/bin/env python3
"""`pagoda estimate`'s predictions beside `pagoda bench` measurements on this machine.

For each model and batch size B: `pagoda bench latency` (B = 1) or `pagoda bench throughput`
(B requests at once, --max-seqs B, a token budget of B x prompt up to 8192, so up to 16 prompts
are prefilled in one step and every later step is pure decode) at a P-token prompt and N output
tokens. Then
`pagoda estimate --hardware this` (the run-time probe, fitted to a short request through the
engine on the model) and `pagoda estimate
--calibrate` on another batch size's report (16, or 4 when 16 is the one checked) predict the
same figures:

  decode tok/s   B / mean decode time per token (the runs' decode_ms_per_token)
  prefill tok/s  B x P / the longest TTFT (when the last prompt was prefilled)
  TTFT ms        mean time to first token

Predictions are `pagoda estimate --check REPORT`: the same requests and engine settings
replayed through the step model on the figures `--hardware this` probed just before the run
(saved as a hardware file), and on those calibrated on the same round's run at another batch
size. The machine may be shared, so every round is printed and the errors are summarised over
the rounds.

    python3 bench/validate_estimate.py [--pagoda build/pagoda] [--rounds 2] [--out DIR]

The 1B-shape files are made with `pagoda synth --like llama-3.2-1b` when missing. Speed is
measured here, never asserted in tests.
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED = pathlib.Path(os.environ.get("PAGODA_SHARED", ROOT.parent / "shared"))


def run(cmd):
    print("+", " ".join(map(str, cmd)), flush=True)
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"failed ({r.returncode}): {r.stderr.strip()}")
    return r.stdout


def budget(args, batch):
    """A token budget that prefills a batch's prompts in one step up to 8192 tokens: past that,
    first-touching the engine's scratch for a huge step costs more than the step (see
    docs/BENCHMARKS.md)."""
    return min(max(2048, batch * args.prompt_len), 8192)


def bench(args, model, batch, path):
    common = ["-m", model, "--prompt-len", args.prompt_len, "--output-len", args.output_len,
              "-t", args.threads, "--no-progress", "--json", path]
    if batch == 1:
        run([args.pagoda, "bench", "latency", *common, "--runs", 3, "--warmup", 1])
    else:
        run([args.pagoda, "bench", "throughput", *common, "-n", batch, "--max-seqs", batch,
             "--max-batched-tokens", budget(args, batch)])


def figures(batch, prompt_len, ttft_ms, last_ttft_ms, decode_ms):
    """decode tok/s = batch / time per output token; prefill tok/s = the batch's prompt tokens
    over the time to its last first token; TTFT = the mean."""
    last = last_ttft_ms if last_ttft_ms else ttft_ms
    return {"decode": batch * 1e3 / decode_ms, "prefill": batch * prompt_len * 1e3 / last,
            "ttft": ttft_ms}


def replay(args, model, hardware, reports, calibrate=None):
    """`pagoda estimate --check`: each report replayed on `hardware` (calibrated on one report
    when given): {batch: (measured figures, predicted figures)} and the estimate's JSON."""
    cmd = [args.pagoda, "estimate", "-m", model, "--hardware", hardware, "--kv-type", "f32",
           "--num-requests", 20, "--json", "-"]
    for r in reports.values():
        cmd += ["--check", r]
    if calibrate:
        cmd += ["--calibrate", calibrate]
    j = json.loads(run(cmd))
    by_path = {}
    for f in j["checks"]:
        by_path.setdefault(f["path"], {})[f["figure"]] = (f["measured_ms"], f["predicted_ms"])
    out = {}
    for b, path in reports.items():
        f = by_path[str(path)]
        last = f.get("last TTFT", (None, None))
        out[b] = (figures(b, args.prompt_len, f["TTFT"][0], last[0], f["decode per token"][0]),
                  figures(b, args.prompt_len, f["TTFT"][1], last[1], f["decode per token"][1]))
    return out, j


def probe(args, model, path):
    """The figures `--hardware this` measures now, for this model's products, written as a
    hardware file for `--hardware FILE`."""
    j = json.loads(run([args.pagoda, "estimate", "-m", model, "--hardware", "this", "--kv-type",
                        "f32", "--num-requests", 1, "--json", "-"]))
    figures = dict(j["hardware"]["figures"], name="this (probed)", kind="cpu")
    path.write_text(json.dumps(figures, indent=1))
    return figures


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--pagoda", default=ROOT / "build" / "pagoda")
    p.add_argument("--out", default=pathlib.Path("/tmp/pagoda-validate-estimate"), type=pathlib.Path)
    p.add_argument("--batches", default="1,4,16,64")
    p.add_argument("--prompt-len", type=int, default=512)
    p.add_argument("--output-len", type=int, default=32)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--models", default="")
    p.add_argument("--reuse", action="store_true", help="keep reports already in --out")
    args = p.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    args.out.mkdir(parents=True, exist_ok=True)
    models = [pathlib.Path(m) for m in args.models.split(",") if m]
    if not models:
        vocab = SHARED / "testdata" / "vocab" / "ggml-vocab-llama-bpe.gguf"
        for t in ("q4_0", "q4_k_m"):
            m = args.out / f"llama-3.2-1b-{t}.gguf"
            if not m.exists():
                run([args.pagoda, "synth", "--like", "llama-3.2-1b", "--type", t, "--vocab", vocab,
                     "-o", m])
            models.append(m)
        models.append(ROOT / "models" / "smollm2-135m-instruct-q4_1.gguf")

    # Each bench run is preceded by a probe: on a shared machine what another process takes
    # changes from minute to minute, so a run is predicted from the probe taken just before it,
    # and calibrated on a run of the same round (another batch size).
    rows = []  # (round, model, batch, measured, predicted, calibrated, other, probe)
    for rnd in range(args.rounds):
        for model in models:
            reports, probes = {}, {}
            for b in batches:
                path = args.out / f"{model.stem}-b{b}-r{rnd}-probe.json"
                probes[b] = (path, probe(args, model, path))
                reports[b] = args.out / f"{model.stem}-b{b}-r{rnd}.json"
                if not (args.reuse and reports[b].exists()):
                    bench(args, model, b, reports[b])
            for b in batches:
                plain, _ = replay(args, model, probes[b][0], {b: reports[b]})
                other = 16 if b != 16 and 16 in batches else 4
                cal, _ = replay(args, model, probes[b][0], {b: reports[b]}, reports[other])
                rows.append((rnd, model.stem, b, plain[b][0], plain[b][1], cal[b][1], other,
                             probes[b][1]))

    keys = (("decode", "decode tok/s"), ("prefill", "prefill tok/s"), ("ttft", "TTFT ms"))
    for rnd in range(args.rounds):
        print(f"\nround {rnd + 1}\n")
        print("| model | batch | probe GB/s, TOP/s | figure | measured | predicted | error | "
              "calibrated (on batch) | error |")
        print("|---|---|---|---|---|---|---|---|---|")
        for r, name, b, m, pl, ca, other, pr in rows:
            if r != rnd:
                continue
            for key, label in keys:
                e1, e2 = pl[key] / m[key] - 1, ca[key] / m[key] - 1
                print(f"| {name} | {b} | {pr['bandwidth_gbs']:.1f}, {pr['int8_tops']:.2f} | "
                      f"{label} | {m[key]:.1f} | {pl[key]:.1f} | {e1 * 100:+.0f}% | "
                      f"{ca[key]:.1f} ({other}) | {e2 * 100:+.0f}% |")

    def median(v):
        v = sorted(v)
        return v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2

    print("\nerrors over all rounds, |predicted / measured - 1|\n")
    print("| model | figure | uncalibrated median | largest | within 25 % | calibrated median | "
          "largest | within 10 % |")
    print("|---|---|---|---|---|---|---|---|")
    for model in models:
        for key, label in keys:
            e1 = [abs(row[4][key] / row[3][key] - 1) for row in rows if row[1] == model.stem]
            e2 = [abs(row[5][key] / row[3][key] - 1) for row in rows if row[1] == model.stem]
            print(f"| {model.stem} | {label} | {median(e1) * 100:.0f}% | {max(e1) * 100:.0f}% | "
                  f"{sum(e <= 0.25 for e in e1)}/{len(e1)} | {median(e2) * 100:.0f}% | "
                  f"{max(e2) * 100:.0f}% | {sum(e <= 0.10 for e in e2)}/{len(e2)} |")


if __name__ == "__main__":
    main()
