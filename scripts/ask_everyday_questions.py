#!/usr/bin/env python3
"""Asks a chat model the ten everyday questions of scripts/everyday_questions.txt, each as a
fresh one-turn chat (`pagoda run --chat`, greedy, so the answers are reproducible), and writes
the answers with their speed to docs/chat_models/<model stem>.md: the evidence behind the choice
of the default chat model (docs/chat_models/).

    scripts/ask_everyday_questions.py MODEL.gguf [MODEL.gguf ...] [--bin build/pagoda] [-n 256]
"""
import argparse
import pathlib
import re
import subprocess
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="+", type=pathlib.Path)
    ap.add_argument("--bin", default=str(ROOT / "build" / "pagoda"))
    ap.add_argument("-n", type=int, default=256)
    ap.add_argument("-t", "--threads", type=int, default=0)
    args = ap.parse_args()
    questions = (ROOT / "scripts" / "everyday_questions.txt").read_text().splitlines()
    out_dir = ROOT / "docs" / "chat_models"
    out_dir.mkdir(parents=True, exist_ok=True)
    for model in args.models:
        lines = [f"# {model.name}: ten everyday questions", "",
                 f"`pagoda run -m {model.name} --chat --temp 0 -n {args.n} -p QUESTION`, one "
                 "fresh chat per question (written by scripts/ask_everyday_questions.py).", ""]
        for i, q in enumerate(questions, 1):
            start = time.time()
            r = subprocess.run([args.bin, "run", "-m", str(model), "--chat", "--temp", "0",
                                "-n", str(args.n), "-t", str(args.threads), "-p", q],
                               capture_output=True, text=True, timeout=1800)
            seconds = time.time() - start
            if r.returncode != 0:
                raise SystemExit(f"{model}: {q}: {r.stderr.strip()}")
            stats = r.stderr.strip().splitlines()[-1]
            m = re.search(r"decode: (\d+) tokens at ([\d.]+) tok/s", stats)
            speed = f"{m.group(1)} tokens at {m.group(2)} tok/s" if m else stats
            lines += [f"## {i}. {q}", "", f"({speed}; {seconds:.1f} s in all)", ""]
            lines += ["> " + l if l else ">" for l in r.stdout.rstrip("\n").split("\n")]
            lines.append("")
            print(f"{model.name}: {i}/{len(questions)} ({seconds:.1f} s)", flush=True)
        (out_dir / (model.stem + ".md")).write_text("\n".join(lines))


if __name__ == "__main__":
    main()
