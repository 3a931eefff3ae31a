#!/usr/bin/env python3
"""Tensor parallelism over MPI on one machine: for 1, 2 and 4 ranks on a synthetic model (the
Llama-3.2-1B shape, Q4_0 by default), each rank's peak resident memory, decode throughput of one
sequence (`pagoda run`), batched throughput of 16 concurrent requests through `pagoda serve`,
and the time each rank spends in all-reduces (the lines every rank prints at exit).

On a machine with fewer cores than ranks x threads this measures what the split costs
(communication, oversubscription), not a speed-up.

    python3 bench/tensor_parallel.py [--pagoda build/pagoda] [--like llama-3.2-1b] [--type q4_0]
"""
import argparse
import concurrent.futures
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request

from benchutil import free_port, print_table, synth_model, wait_healthy

RANK_LINE = re.compile(r"rank (\d+) of (\d+): peak resident ([\d.]+) MiB, (\d+) all-reduces, "
                       r"([\d.]+) s in them")


def launcher(ranks):
    if ranks == 1:  # GNU time gives the one process's peak resident memory
        return ["/usr/bin/time", "-f", "maxrss %M kB"]
    return ["mpirun", "--oversubscribe", "--allow-run-as-root", "-np", str(ranks)]


def rank_lines(text):
    return [tuple(float(x) for x in m.groups()) for m in RANK_LINE.finditer(text)]


def decode(args, model, ranks, threads):
    cmd = launcher(ranks) + [args.pagoda, "run", "-m", model, "-p", "Once upon a time", "-n",
                             str(args.tokens), "--temp", "0", "--ignore-eos", "-t", str(threads)]
    r = subprocess.run(cmd, capture_output=True, text=True, check=True)
    tps = float(re.search(r"decode: \d+ tokens at ([\d.]+) tok/s", r.stderr).group(1))
    single = re.search(r"maxrss (\d+) kB", r.stderr)
    ranks_seen = rank_lines(r.stderr)
    if single:
        ranks_seen = [(0, 1, int(single.group(1)) / 1024, 0, 0)]
    return tps, ranks_seen


def complete(url, prompt, n):
    body = json.dumps({"prompt": prompt, "max_tokens": n, "temperature": 0,
                       "ignore_eos": True}).encode()
    req = urllib.request.Request(url + "/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=1200) as r:
        return json.loads(r.read())["usage"]["completion_tokens"]


def batched(args, model, ranks, threads):
    port = free_port()
    log = tempfile.TemporaryFile(mode="w+")
    proc = subprocess.Popen(launcher(ranks) + [args.pagoda, "serve", "-m", model, "--port",
                                               str(port), "-t", str(threads), "--kv-tokens",
                                               "8192", "--log-format", "none"],
                            stdout=subprocess.DEVNULL, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc)
        complete(url, "warm up", 2)
        start = time.time()
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            tokens = sum(pool.map(lambda i: complete(url, f"Story number {i}:", args.tokens),
                                  range(16)))
        tps = tokens / (time.time() - start)
    finally:
        # Rank 0 ends the others; SIGTERM to it (mpirun would exit 1 when signalled).
        target = proc.pid
        if ranks > 1:
            children = pathlib.Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text()
            for pid in children.split():
                env = pathlib.Path(f"/proc/{pid}/environ").read_bytes()
                if b"OMPI_COMM_WORLD_RANK=0\0" in env:
                    target = int(pid)
        os.kill(target, signal.SIGTERM)
        proc.wait(120)
    log.seek(0)
    return tps, rank_lines(log.read())


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pagoda", default="build/pagoda")
    p.add_argument("--like", default="llama-3.2-1b")
    p.add_argument("--type", default="q4_0")
    p.add_argument("--tokens", type=int, default=32, help="output tokens per request")
    p.add_argument("--ranks", default="1,2,4")
    p.add_argument("--models", default=str(pathlib.Path(tempfile.gettempdir()) / "pagoda-synth"))
    args = p.parse_args()
    if shutil.which("mpirun") is None:
        raise SystemExit("mpirun is absent: scripts/setup installs OpenMPI")
    os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    pathlib.Path(args.models).mkdir(parents=True, exist_ok=True)
    model = synth_model(args.pagoda, args.like, args.type, args.models)
    cores = os.cpu_count() or 1
    rows = []
    for ranks in map(int, args.ranks.split(",")):
        threads = max(1, cores // ranks)
        d_tps, d_ranks = decode(args, model, ranks, threads)
        b_tps, b_ranks = batched(args, model, ranks, threads)
        rss = " / ".join(f"{r[2]:.0f}" for r in sorted(d_ranks))
        # Time inside the all-reduce includes waiting for the slowest rank to arrive.
        per_reduce = (f"{int(d_ranks[0][3])} calls, {1e6 * d_ranks[0][4] / d_ranks[0][3]:.0f} us "
                      f"each, {d_ranks[0][4]:.2f} s in all" if ranks > 1 else "-")
        rows.append([ranks, threads, rss, f"{d_tps:.1f}", f"{b_tps:.1f}", per_reduce])
        print(rows[-1], flush=True)
    print_table(f"{args.like} {args.type}, {cores} cores, {args.tokens} output tokens",
                ["ranks", "threads each", "peak resident MiB per rank (decode run)",
                 "decode tok/s", "16 concurrent, tok/s", "rank 0 all-reduces in the decode run (waits included)"],
                rows)


if __name__ == "__main__":
    main()
