"""Tensor parallelism over MPI: `mpirun -np N pagoda run|serve` gives what one process gives.

Each rank holds its KV heads, its feed-forward columns and its vocabulary rows; rank 0 runs the
engine (and the server) and sends each step to the others. On this 2-core machine the ranks are
oversubscribed: these tests check results, not speed (bench/tensor_parallel.py measures)."""
import concurrent.futures
import json
import os
import pathlib
import signal
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.request

import pytest

from server_util import GEMMA, QWEN, SMOLLM, Server, need

MPIRUN = shutil.which("mpirun")


def mpirun(n):
    if MPIRUN is None:
        pytest.skip("*** mpirun is absent (scripts/setup installs OpenMPI): SKIPPING tensor "
                    "parallel tests ***")
    # --oversubscribe: more ranks than cores; root in containers needs the two --allow flags.
    return [MPIRUN, "--oversubscribe", "--allow-run-as-root", "-np", str(n),
            "-x", "OMPI_MCA_rmaps_base_oversubscribe=1"]


def run(cmd, timeout=600):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return subprocess.run(list(map(str, cmd)), capture_output=True, text=True, timeout=timeout,
                          env=env)


def generate(pagoda_bin, model, ranks, prompt, n):
    args = [pagoda_bin, "run", "-m", model, "-p", prompt, "-n", n, "--temp", "0", "-t", "1"]
    r = run((mpirun(ranks) if ranks > 1 else []) + args)
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.fixture(scope="module")
def stories(shared_dir):
    return shared_dir / "models" / "stories260K.gguf"


# Every shared model whose KV heads split: stories260K (8 heads over 4 KV heads, F32, vocabulary
# 512, feed-forward 172), llama-2-tiny-random (2 KV heads, Llama 2's 32000 tokens) and
# tinystories-656k (a Hugging Face safetensors folder, 4 KV heads).
@pytest.mark.parametrize("model,ranks", [
    ("stories260K.gguf", 2), ("stories260K.gguf", 4),
    ("llama-2-tiny-random/llama-2-tiny-random.gguf", 2),
    ("tinystories-656k", 2), ("tinystories-656k", 4)])
def test_greedy_text_equals_one_process_shared_models(pagoda_bin, shared_dir, model, ranks):
    path = shared_dir / "models" / model
    alone = generate(pagoda_bin, path, 1, "Once upon a time", 48)
    split = generate(pagoda_bin, path, ranks, "Once upon a time", 48)
    assert split == alone
    assert len(alone) > 40


def test_greedy_text_equals_one_process_qwen(pagoda_bin):
    # Qwen2.5-Coder-0.5B Q4_K_M: 14 heads over 2 KV heads, Q/K/V biases, Q6_K down projection
    # cut on its 256-wide blocks (19 blocks: 10 and 9), tied-free vocabulary of 151936 rows.
    model = need(QWEN)
    prompt = "def fibonacci(n):"
    assert generate(pagoda_bin, model, 2, prompt, 24) == generate(pagoda_bin, model, 1, prompt, 24)


def test_ranks_that_do_not_divide_the_kv_heads_are_refused(pagoda_bin):
    r = run(mpirun(2) + [pagoda_bin, "run", "-m", need(SMOLLM), "-p", "hi", "-n", "2", "-t", "1"],
            timeout=120)
    assert r.returncode != 0
    assert "2 ranks do not divide the model's 3 KV heads (9 query heads)" in r.stderr


def test_gemma_says_it_runs_as_one_process(pagoda_bin):
    r = run(mpirun(2) + [pagoda_bin, "run", "-m", need(GEMMA), "-p", "hi", "-n", "2", "-t", "1"],
            timeout=120)
    assert r.returncode != 0
    assert "tensor parallelism is not built for Gemma 3 yet" in r.stderr


def rank_pid(mpirun_pid, rank):
    """The pid of `rank` among mpirun's children (OpenMPI puts the rank in each one's env)."""
    children = pathlib.Path(f"/proc/{mpirun_pid}/task/{mpirun_pid}/children").read_text().split()
    for pid in children:
        env = pathlib.Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        if f"OMPI_COMM_WORLD_RANK={rank}".encode() in env:
            return int(pid)
    raise AssertionError(f"no rank {rank} among {children}")


def complete(url, prompt, n):
    body = json.dumps({"prompt": prompt, "max_tokens": n, "temperature": 0}).encode()
    req = urllib.request.Request(url + "/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.loads(r.read())["choices"][0]["text"]


def test_serve_16_concurrent_requests_give_what_they_give_alone(pagoda_bin, stories):
    prompts = [f"Once upon a time there was a {w}" for w in
               ("cat", "dog", "girl", "boy", "bird", "king", "tree", "fish",
                "frog", "queen", "bear", "ball", "car", "sun", "moon", "cake")]
    os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    s = Server(pagoda_bin, stories, "-t", "1", "--kv-tokens", "8192", launcher=mpirun(2))
    try:
        alone = [complete(s.url, p, 24) for p in prompts]
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            together = list(pool.map(lambda p: complete(s.url, p, 24), prompts))
        assert together == alone
        # Rank 0 finishes what is in flight, tells the other rank to stop, and both exit 0.
        # (SIGTERM to mpirun reaches every rank and ends the same way, but mpirun itself then
        # exits 1, as it does whenever it was signalled.)
        os.kill(rank_pid(s.proc.pid, 0), signal.SIGTERM)
        assert s.proc.wait(60) == 0
        assert "serve: stopped" in "".join(s.log)
    finally:
        s.stop()
    # And they are what one process gives.
    one = Server(pagoda_bin, stories, "-t", "1", "--kv-tokens", "8192")
    try:
        assert [complete(one.url, p, 24) for p in prompts[:4]] == alone[:4]
    finally:
        one.stop()


def test_estimate_tp_counts_per_rank_memory_and_the_ranks_needed(pagoda_bin):
    base = [pagoda_bin, "estimate", "--preset", "llama-3-70b", "--weights-type", "q4_k_m",
            "--context", "4096", "--batch", "8", "--memory-gb", "24", "--json", "-"]
    whole = json.loads(run(base).stdout)
    r = run(base + ["--tp", "4"])
    assert r.returncode == 0, r.stderr
    tp = json.loads(r.stdout)["tensor_parallel"]
    assert tp["ranks"] == 4
    assert abs(tp["weights_bytes_per_rank"] * 4 - whole["weight_bytes"]) < 4
    assert abs(tp["kv_bytes_per_rank"] * 4 - whole["kv_bytes_total"]) < 4
    # 70B at 4.8 bits is 39.6 GiB: two ranks hold 19.8 GiB of weights each plus 5 GiB of KV,
    # past 24 GiB; four fit.
    assert tp["ranks_needed"] == 4
    bad = run(base + ["--tp", "3"])
    assert bad.returncode == 1
    assert "--tp 3 does not divide the model's 8 KV heads" in bad.stderr


@pytest.fixture
def two_hosts(tmp_path):
    """Two "hosts": network namespaces joined by a veth pair, 10.231.<k>.1 and .2, and an
    rsh agent for mpirun that starts a host's processes in its namespace (and notes each start
    in `starts`). Made and removed here; skipped where namespaces cannot be made."""
    if shutil.which("ip") is None:
        pytest.skip("*** iproute2 is absent: SKIPPING the two-host tensor parallel test ***")
    k = os.getpid() % 200 + 20
    ns = [f"pagoda-tp-{os.getpid()}-a", f"pagoda-tp-{os.getpid()}-b"]
    addr = [f"10.231.{k}.1", f"10.231.{k}.2"]
    veth = [f"pgtp{os.getpid() % 100000}a", f"pgtp{os.getpid() % 100000}b"]
    made = subprocess.run(["ip", "netns", "add", ns[0]], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"*** cannot make network namespaces ({made.stderr.strip()}): SKIPPING the "
                    "two-host tensor parallel test ***")
    starts = tmp_path / "starts"
    try:
        steps = [["ip", "netns", "add", ns[1]],
                 ["ip", "link", "add", veth[0], "type", "veth", "peer", "name", veth[1]]]
        for i in range(2):
            steps += [["ip", "link", "set", veth[i], "netns", ns[i]],
                      ["ip", "-n", ns[i], "addr", "add", addr[i] + "/24", "dev", veth[i]],
                      ["ip", "-n", ns[i], "link", "set", veth[i], "up"],
                      ["ip", "-n", ns[i], "link", "set", "lo", "up"]]
        for step in steps:
            subprocess.run(step, check=True, capture_output=True)
        agent = tmp_path / "rsh"
        agent.write_text("#!/bin/sh\nhost=\"$1\"; shift\n"
                         f"case \"$host\" in {addr[0]}) ns={ns[0]} ;; {addr[1]}) ns={ns[1]} ;; "
                         "*) echo \"unknown host $host\" >&2; exit 1 ;; esac\n"
                         f"echo \"$ns\" >> {starts}\n"
                         "exec ip netns exec \"$ns\" sh -c \"$*\"\n")
        agent.chmod(0o755)
        yield ns, addr, agent, starts
    finally:
        for n in ns:
            subprocess.run(["ip", "netns", "del", n], capture_output=True)


def test_two_hosts_over_tcp_give_what_one_process_gives(pagoda_bin, stories, two_hosts):
    ns, addr, agent, starts = two_hosts
    if MPIRUN is None:
        pytest.skip("*** mpirun is absent: SKIPPING the two-host tensor parallel test ***")
    subnet = addr[0].rsplit(".", 1)[0] + ".0/24"
    # Rank 0 on the first host, rank 1 on the second; the ranks talk over TCP on the veth pair
    # only (no shared memory), as two machines would.
    cmd = ["ip", "netns", "exec", ns[0], MPIRUN, "--allow-run-as-root",
           "--host", ",".join(addr), "-np", "2", "--mca", "plm_rsh_agent", agent,
           "--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include", subnet,
           "--mca", "oob_tcp_if_include", subnet,
           "-x", "OMPI_ALLOW_RUN_AS_ROOT", "-x", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM",
           pagoda_bin, "run", "-m", stories, "-p", "Once upon a time", "-n", "32", "--temp", "0",
           "-t", "1"]
    r = run(cmd, timeout=300)
    assert r.returncode == 0, r.stderr
    assert ns[1] in starts.read_text().split()  # the second host's processes were started there
    assert "rank 1 of 2" in r.stderr
    assert r.stdout == generate(pagoda_bin, stories, 1, "Once upon a time", 32)


def test_a_rank_that_dies_fails_the_requests_in_flight_with_a_500(pagoda_bin):
    # Qwen2.5-0.5B on one thread a rank decodes ~10 tokens/s: 400 tokens are still running when
    # rank 1 is killed.
    s = Server(pagoda_bin, need(QWEN), "-t", "1", "--kv-tokens", "4096", launcher=mpirun(2))
    try:
        results = {}

        def plain():
            body = json.dumps({"prompt": "Once", "max_tokens": 400, "ignore_eos": True}).encode()
            req = urllib.request.Request(s.url + "/v1/completions", data=body)
            try:
                urllib.request.urlopen(req, timeout=120)
                results["plain"] = (200, "")
            except urllib.error.HTTPError as e:
                results["plain"] = (e.code, e.read().decode())

        def streamed():
            body = json.dumps({"prompt": "Once", "max_tokens": 400, "ignore_eos": True,
                               "stream": True}).encode()
            req = urllib.request.Request(s.url + "/v1/completions", data=body)
            with urllib.request.urlopen(req, timeout=120) as r:
                results["stream"] = r.read().decode()

        threads = [threading.Thread(target=f) for f in (plain, streamed)]
        for t in threads:
            t.start()
        time.sleep(3)
        os.kill(rank_pid(s.proc.pid, 1), signal.SIGKILL)
        for t in threads:
            t.join(60)
        assert s.proc.wait(60) != 0  # no hang, and not a success
        status, body = results["plain"]
        assert status == 500
        assert "rank 1 of 2 is gone" in json.loads(body)["error"]["message"]
        events = [line[6:] for line in results["stream"].split("\n") if line.startswith("data: ")]
        assert events[-1] == "[DONE]"
        assert "rank 1 of 2 is gone" in json.loads(events[-2])["error"]["message"]
        assert "serve: tensor parallel: rank 1 of 2 is gone" in "".join(s.log)
    finally:
        s.stop()
