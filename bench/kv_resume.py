#!/usr/bin/env python3
"""Resume after a restart (issue 36): the time to first token of one long prompt computed cold,
then after the server restarts, served from the --kv-disk folder the first server wrote, and
restored by name (/v1/kv/save in the first server, /v1/kv/restore in a fresh one without a disk
tier, the restore's own time counted). Greedy outputs are checked equal across the three.

    python3 bench/kv_resume.py --model models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf \\
        --prompt-file docs/SCHEDULER.md --prompt-bytes 8000

Every server runs with the same threads, KV memory and step budget; the folders are temporary.
"""
import argparse
import json
import tempfile
import time
import urllib.request

from benchutil import ROOT, Server, first_token, pagoda_serve_cmd, print_table


def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=1800) as r:
        return json.loads(r.read())


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--pagoda", default=str(ROOT / "build" / "pagoda"))
    p.add_argument("--model", required=True)
    p.add_argument("--prompt-file", default=str(ROOT / "docs" / "SCHEDULER.md"))
    p.add_argument("--prompt-bytes", type=int, default=8000)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--kv-tokens", type=int, default=8192)
    args = p.parse_args()
    prompt = open(args.prompt_file, encoding="utf-8").read()[:args.prompt_bytes]

    with tempfile.TemporaryDirectory() as tmp:
        disk = ["--kv-disk", f"{tmp}/disk", "--kv-save-dir", f"{tmp}/saved",
                "--max-model-len", str(args.kv_tokens)]
        cmd = pagoda_serve_cmd(args.pagoda, args.model, args.threads, args.kv_tokens, 512,
                               extra=disk)
        rows = []
        with Server("cold", cmd) as s:
            num_tokens = post(s.url + "/tokenize", {"prompt": prompt})["count"]
            cold, want = first_token(s.url, prompt)
            saved = post(s.url + "/v1/kv/save", {"name": "bench", "prompt": prompt})
        rows.append(["cold (computed)", f"{cold:.2f} s", "1.0x"])
        with Server("disk", cmd) as s:  # a restart on the same --kv-disk folder
            warm, got = first_token(s.url, prompt)
        assert got == want, (got, want)
        rows.append(["after a restart, from --kv-disk", f"{warm:.2f} s", f"{cold / warm:.1f}x"])
        restore_cmd = pagoda_serve_cmd(args.pagoda, args.model, args.threads, args.kv_tokens, 512,
                                       extra=["--kv-save-dir", f"{tmp}/saved", "--max-model-len",
                                              str(args.kv_tokens)])
        with Server("restore", restore_cmd) as s:
            start = time.perf_counter()
            restored = post(s.url + "/v1/kv/restore", {"name": "bench"})
            restore_s = time.perf_counter() - start
            after, got = first_token(s.url, prompt)
        assert got == want, (got, want)
        total = restore_s + after
        rows.append([f"after a restart, /v1/kv/restore ({restore_s:.2f} s) + request",
                     f"{total:.2f} s", f"{cold / total:.1f}x"])
    print(f"{num_tokens}-token prompt; {saved['num_tokens']} tokens saved "
          f"({saved['bytes'] / 2**20:.1f} MiB), {restored['num_restored_tokens']} restored")
    print_table(None, ["time to first token", "seconds", "vs cold"], rows)


if __name__ == "__main__":
    main()
