"""Quality of pagoda's quantizer beside llama.cpp's on the same F32 source: for each weight type,
round-to-nearest (no importance matrix) and with an importance matrix (pagoda imatrix /
llama-imatrix on the same calibration text), the KL divergence of each quantized model's token
distributions from the F32 model's (mean and p99), top-1 agreement and the perplexity ratio, by
`pagoda bench quality` on held-out text. fp8 (pagoda's own FP8_E4M3 type: E4M3 codes with an F16
scale per 32) has no llama.cpp counterpart: its rows are pagoda's alone, and say so.

    python3 bench/quant_quality.py --llama-quantize PATH --llama-imatrix PATH \\
        [--model ../shared/models/stories260K.gguf] [--types q4_0 q4_k_m ...]

The text (../shared/testdata/text/tinystories_valid_head.txt) is split in two halves by lines:
the first calibrates, the second is scored. The peer's tools come from llama-cpp-python's source
package (vendor/llama.cpp, built with cmake); they need LD_LIBRARY_PATH to find their libraries.
Prints a Markdown table.
"""
import argparse
import json
import pathlib
import subprocess
import sys
import tempfile

from benchutil import ROOT, SHARED, print_table

TYPES = ["q4_0", "q4_k_m", "q5_k_m", "q6_k", "q8_0", "fp8"]
LLAMA_NAMES = {"q4_0": "Q4_0", "q4_1": "Q4_1", "q5_0": "Q5_0", "q5_1": "Q5_1", "q8_0": "Q8_0",
               "q4_k_m": "Q4_K_M", "q5_k_m": "Q5_K_M", "q6_k": "Q6_K", "q4_k": "Q4_K_S",
               "iq4_nl": "IQ4_NL", "iq4_xs": "IQ4_XS"}


def run(cmd):
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, errors="replace")
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(map(str, cmd))}\n{r.stderr[-2000:]}")
    return r.stdout


def quality(args, model, ref, text):
    j = json.loads(run([args.pagoda, "bench", "quality", "-m", model, "--ref", ref, "-f", text,
                        "-c", args.ctx, "--max-windows", args.windows, "-t", args.threads,
                        "--json", "-"]))
    return j


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pagoda", default=str(ROOT / "build" / "pagoda"))
    p.add_argument("--llama-quantize", help="llama.cpp's llama-quantize (omit: pagoda only)")
    p.add_argument("--llama-imatrix", help="llama.cpp's llama-imatrix")
    p.add_argument("--model", default=str(SHARED / "models" / "stories260K.gguf"), help="an F32 GGUF")
    p.add_argument("--types", nargs="+", default=TYPES)
    p.add_argument("--ctx", type=int, default=128)
    p.add_argument("--chunks", type=int, default=64, help="calibration chunks of --ctx tokens")
    p.add_argument("--windows", type=int, default=200, help="scored windows of --ctx tokens")
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("--peer-imatrix", choices=["llama", "pagoda"], default="llama",
                   help="whose importance matrix llama-quantize gets: llama-imatrix's (default), or "
                        "pagoda's, for a model llama-imatrix cannot read the text with (the two "
                        "tools' matrices agree within 1.5e-6 where both run)")
    args = p.parse_args()
    text = SHARED / "testdata/text/tinystories_valid_head.txt"
    lines = text.read_text().splitlines(keepends=True)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        calib, evaluate = tmp / "calibrate.txt", tmp / "evaluate.txt"
        calib.write_text("".join(lines[:len(lines) // 2]))
        evaluate.write_text("".join(lines[len(lines) // 2:]))
        imatrix = {"pagoda": tmp / "pagoda.imatrix.gguf", "llama.cpp": tmp / "llama.imatrix.gguf"}
        run([args.pagoda, "imatrix", "-m", args.model, "-f", calib, "-c", args.ctx, "--chunks",
             args.chunks, "-o", imatrix["pagoda"], "-t", args.threads])
        peers = bool(args.llama_quantize and args.llama_imatrix)
        if peers and args.peer_imatrix == "pagoda":
            imatrix["llama.cpp"] = imatrix["pagoda"]
        elif peers:
            run([args.llama_imatrix, "-m", args.model, "-f", calib, "-c", args.ctx, "--chunks",
                 args.chunks, "--no-ppl", "-ctk", "f32", "-ctv", "f32", "-fa", "off", "-t",
                 args.threads, "-o", imatrix["llama.cpp"]])
        rows = []
        for wtype in args.types:
            for method in ("rtn", "imatrix"):
                results = {}
                # A type llama.cpp lacks (fp8) is quantized by pagoda alone.
                engines = ("pagoda", "llama.cpp") if peers and wtype in LLAMA_NAMES else ("pagoda",)
                for engine in engines:
                    out = tmp / f"{engine}-{wtype}-{method}.gguf"
                    if engine == "pagoda":
                        cmd = [args.pagoda, "quantize", "-i", args.model, "-o", out, "--type", wtype, "-q"]
                        if method == "imatrix":
                            cmd += ["--imatrix", imatrix["pagoda"]]
                    else:
                        cmd = [args.llama_quantize]
                        if method == "imatrix":
                            cmd += ["--imatrix", imatrix["llama.cpp"]]
                        cmd += [args.model, out, LLAMA_NAMES[wtype], str(args.threads)]
                    run(cmd)
                    results[engine] = quality(args, out, args.model, evaluate)
                    print(f"{wtype} {method} {engine}: KL {results[engine]['kl_mean']:.5f}",
                          file=sys.stderr)
                for engine, q in results.items():
                    rows.append([wtype, method, engine, f"{q['kl_mean']:.5f}", f"{q['kl_p99']:.4f}",
                                 f"{q['top1_agreement_pct']:.2f}", f"{q['ppl_ratio']:.4f}"])
                if peers and wtype not in LLAMA_NAMES:
                    rows.append([wtype, method, "llama.cpp", "no counterpart", "", "", ""])
        print_table(f"{pathlib.Path(args.model).name}: quantized against F32 ({args.windows} windows "
                    f"of {args.ctx} tokens of the text's second half; imatrix from {args.chunks} "
                    f"chunks of its first half; llama-quantize given "
                    f"{'pagoda' if args.peer_imatrix == 'pagoda' else 'llama-imatrix'}'s matrix)",
                    ["type", "method", "quantizer", "mean KL", "p99 KL", "top-1 %", "PPL ratio"], rows)


if __name__ == "__main__":
    main()
