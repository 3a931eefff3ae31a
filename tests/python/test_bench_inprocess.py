"""pagoda bench latency / throughput / memory on small real models: the JSON fields and counts
add up, CSV parses, SVG charts are well-formed XML, Ctrl-C reports what was measured (exit 130),
and bad options give one-line errors. Speed is never asserted."""
import csv
import io
import json
import pathlib
import signal
import subprocess
import time
import xml.etree.ElementTree as ET

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SMOLLM = ROOT / "models" / "smollm2-135m-instruct-q4_1.gguf"
QWEN = ROOT / "models" / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
SUMMARY_KEYS = {"n", "mean", "median", "p90", "p99", "min", "max", "std"}
HEADER_KEYS = {"benchmark", "engine", "model", "model_path", "precision", "weight_types",
               "weight_bytes", "threads", "interrupted"}


def need(path):
    if not path.exists():
        pytest.skip(f"*** {path} is absent: run scripts/setup; SKIPPING ***")
    return path


@pytest.fixture(scope="module")
def stories(shared_dir):
    return need(shared_dir / "models" / "stories260K.gguf")


def bench(pagoda_bin, *args, timeout=120):
    r = subprocess.run([str(pagoda_bin), "bench", *map(str, args)], capture_output=True,
                       text=True, timeout=timeout)
    return r


def bench_json(pagoda_bin, *args):
    r = bench(pagoda_bin, *args, "--json", "-", "--no-progress")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout), r.stderr


def check_svg(path, *names):
    text = pathlib.Path(path).read_text()
    root = ET.fromstring(text)  # well-formed
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    assert "nan" not in text.lower().replace("nanosecond", "")
    for name in names:
        assert f">{name}</text>" in text, name


def read_csv(path):
    return list(csv.DictReader(io.StringIO(pathlib.Path(path).read_text(), newline="")))


def test_latency_reports_every_run(pagoda_bin, stories, tmp_path):
    d, table = bench_json(pagoda_bin, "latency", "-m", stories, "--prompt-len", 24,
                          "--output-len", 8, "--runs", 4, "--warmup", 2, "-t", 1,
                          "--csv", tmp_path / "l.csv", "--svg", tmp_path / "l.svg")
    assert HEADER_KEYS <= d.keys()
    assert d["benchmark"] == "latency" and d["engine"] == "pagoda" and not d["interrupted"]
    assert d["model"] == "stories260K.gguf" and d["precision"] == "F32"
    assert d["prompt_tokens"] == 24 and d["output_tokens"] == 8
    assert d["num_runs"] == 4 and d["num_warmup"] == 2 and len(d["runs"]) == 4
    for key in ("ttft_ms", "decode_ms_per_token", "e2e_ms"):
        assert set(d[key]) == SUMMARY_KEYS and d[key]["n"] == 4
        s = d[key]
        assert s["min"] <= s["median"] <= s["p90"] <= s["p99"] <= s["max"]
    for run in d["runs"]:
        assert run["output_tokens"] == 8
        assert 0 < run["ttft_ms"] < run["e2e_ms"]
        # e2e = TTFT + 7 decode gaps
        assert abs(run["ttft_ms"] + 7 * run["decode_ms_per_token"] - run["e2e_ms"]) < 1e-6
    assert d["kv_cache_bytes"] > 0 and d["peak_rss_bytes"] > 0
    # The table goes to stderr when the JSON takes stdout.
    assert "TTFT ms" in table and "stories260K.gguf" in table
    rows = read_csv(tmp_path / "l.csv")
    assert [r["metric"] for r in rows] == ["TTFT ms", "decode ms/token", "end-to-end ms"]
    assert float(rows[0]["mean"]) == pytest.approx(d["ttft_ms"]["mean"], abs=1e-3)
    check_svg(tmp_path / "l.svg", "time to first token", "decode per token", "p99")


def test_latency_with_text_prompt_and_one_token(pagoda_bin):
    d, _ = bench_json(pagoda_bin, "latency", "-m", need(SMOLLM), "-p", "The capital of France is",
                      "--output-len", 1, "--runs", 2, "--warmup", 0, "-t", 2)
    assert d["prompt_tokens"] >= 5 and d["num_runs"] == 2
    assert d["decode_ms_per_token"]["n"] == 0 and d["decode_ms_per_token"]["mean"] is None
    assert d["decode_tokens_per_s"] is None
    assert d["precision"] == "Q4_1"


def test_latency_names_the_files_precision(pagoda_bin):
    """A Q4_K_M file whose rows of 896 fall back to Q5_0 (the type holding most bytes) is
    still a Q4_K_M file."""
    d, _ = bench_json(pagoda_bin, "latency", "-m", need(QWEN), "--prompt-len", 4,
                      "--output-len", 1, "--runs", 1, "--warmup", 0, "-t", 2)
    assert d["precision"] == "Q4_K_M", d["precision"]
    assert d["weight_types"].startswith("Q5_0"), d["weight_types"]


def test_throughput_batched_and_sequential_add_up(pagoda_bin, stories, tmp_path):
    d, table = bench_json(pagoda_bin, "throughput", "-m", stories, "-n", 12, "--prompt-len",
                          "8:40", "--output-len", "4:12", "--sequential", "--max-seqs", 5,
                          "--max-batched-tokens", 64, "-t", 1, "--csv", tmp_path / "t.csv",
                          "--svg", tmp_path / "t.svg")
    assert HEADER_KEYS <= d.keys() and d["benchmark"] == "throughput"
    assert d["workload"] == {"source": "synthetic", "num_requests": 12, "prompt_len": "8:40",
                             "output_len": "4:12", "seed": 0}
    assert d["max_num_seqs"] == 5 and d["max_num_batched_tokens"] == 64
    assert d["num_kv_blocks"] * d["block_size"] >= 5 * 16
    batched, sequential = d["runs"]
    assert batched["mode"] == "batched" and sequential["mode"] == "sequential"
    for run in d["runs"]:
        assert run["num_requests"] == run["num_finished"] == 12 and not run["interrupted"]
        assert 12 * 8 <= run["prompt_tokens"] <= 12 * 40
        assert 12 * 4 <= run["output_tokens"] <= 12 * 12
        tokens = run["prompt_tokens"] + run["output_tokens"]
        assert run["total_tokens_per_s"] == pytest.approx(tokens / run["wall_s"])
        assert run["output_tokens_per_s"] == pytest.approx(run["output_tokens"] / run["wall_s"])
        assert run["requests_per_s"] == pytest.approx(12 / run["wall_s"])
        # Every prompt token computed once, every output token but each request's last fed back.
        assert run["mean_tokens_per_step"] * run["num_steps"] == pytest.approx(tokens - 12)
        assert 0 < run["kv_utilization_mean"] <= run["kv_utilization_peak"] <= 1
        assert run["ttft_ms"]["n"] == 12 and run["e2e_ms"]["n"] == 12
    assert batched["prompt_tokens"] == sequential["prompt_tokens"]
    assert batched["output_tokens"] == sequential["output_tokens"]
    assert 1 < batched["peak_running"] <= 5 and sequential["peak_running"] == 1
    assert sequential["mean_seqs_per_step"] == 1
    assert d["speedup_vs_sequential"] == pytest.approx(
        batched["total_tokens_per_s"] / sequential["total_tokens_per_s"])
    assert "batched / sequential total tokens/s" in table
    rows = read_csv(tmp_path / "t.csv")
    assert [r["run"] for r in rows] == ["batched", "sequential"]
    assert int(rows[0]["output tokens"]) == batched["output_tokens"]
    check_svg(tmp_path / "t.svg", "batched", "sequential", "total tokens/s")


def test_throughput_preempts_under_a_small_kv_budget(pagoda_bin, stories):
    d, _ = bench_json(pagoda_bin, "throughput", "-m", stories, "-n", 8, "--prompt-len", 40,
                      "--output-len", 40, "--kv-tokens", 160, "--block-size", 16, "-t", 1)
    run = d["runs"][0]
    assert run["num_finished"] == 8 and run["output_tokens"] == 8 * 40
    assert run["num_preemptions"] > 0 and run["kv_utilization_peak"] <= 1
    assert len(d["runs"]) == 1 and d["speedup_vs_sequential"] is None


def test_throughput_from_sharegpt_dataset(pagoda_bin, tmp_path):
    turns = [
        [("human", "Write a short poem about the sea, please."),
         ("gpt", "The sea is wide and " * 5)],
        [("gpt", "model first"), ("human", "skipped")],
        [("human", "Hi"), ("gpt", "Hello! How can I help you today?")],
        [("human", "What is the capital of France? Answer in one word."),
         ("gpt", "Paris, of course.")],
    ]
    data = [{"conversations": [{"from": f, "value": v} for f, v in c]} for c in turns]
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(data))
    d, _ = bench_json(pagoda_bin, "throughput", "-m", need(SMOLLM), "--dataset", path, "-n", 10,
                      "-t", 2)
    assert d["workload"]["source"] == "dataset" and d["workload"]["num_requests"] == 2
    assert d["workload"]["num_read"] == 4 and d["workload"]["num_skipped"] == 2
    assert d["runs"][0]["num_finished"] == 2
    d, _ = bench_json(pagoda_bin, "throughput", "-m", need(SMOLLM), "--dataset", path, "-n", 1,
                      "--output-len", 5, "-t", 2)
    assert d["runs"][0]["output_tokens"] == 5 and d["workload"]["output_len"] == 5


def test_memory_fit_and_resident_memory(pagoda_bin, tmp_path):
    d, table = bench_json(pagoda_bin, "memory", "-m", need(SMOLLM), "--kv-tokens", 4096,
                          "--seq-len", 100, "--max-model-len", 1024, "-n", 2, "--output-len", 2,
                          "-t", 2, "--csv", tmp_path / "m.csv", "--svg", tmp_path / "m.svg")
    assert HEADER_KEYS <= d.keys() and d["benchmark"] == "memory"
    assert d["num_kv_blocks"] == 256 and d["block_size"] == 16 and d["kv_tokens"] == 4096
    assert d["kv_cache_bytes"] == d["kv_bytes_per_token"] * 4096
    # SmolLM2-135M: 30 layers x 3 KV heads x 64, K and V, F16 (the default).
    assert d["kv_bytes_per_token"] == 2 * 30 * 3 * 64 * 2
    assert d["fit"] == {"seq_len": 100, "contiguous": 4, "paged": 256 // 7, "gain": 36 / 4}
    assert [f["seq_len"] for f in d["fit_table"]] == [16, 64, 100, 256, 512, 1024]
    for f in d["fit_table"]:
        assert f["paged"] == 256 // -(-f["seq_len"] // 16) and f["contiguous"] == 4
    rss = d["rss_bytes"]
    assert 0 < rss["start"] <= d["peak_rss_bytes"] and rss["engine"] <= d["peak_rss_bytes"]
    assert d["estimated_bytes"] > d["weight_bytes"] + d["kv_cache_bytes"]
    assert d["workload"]["num_finished"] == 2 and d["workload"]["output_tokens"] == 4
    assert "KV per token" in table
    rows = read_csv(tmp_path / "m.csv")
    assert [int(r["sequence length"]) for r in rows] == [16, 64, 100, 256, 512, 1024]
    check_svg(tmp_path / "m.svg", "100", "1024")
    full, _ = bench_json(pagoda_bin, "memory", "-m", need(SMOLLM), "--kv-tokens", 4096,
                         "--kv-type", "f32", "-n", 1, "--output-len", 2, "-t", 2)
    assert full["kv_cache_bytes"] == d["kv_cache_bytes"] * 2
    # Q8_0 / FP8: 64 one-byte codes and two F16 scales per head.
    for kv_type in ("q8_0", "fp8"):
        q, _ = bench_json(pagoda_bin, "memory", "-m", need(SMOLLM), "--kv-tokens", 4096,
                          "--kv-type", kv_type, "-n", 1, "--output-len", 2, "-t", 2)
        assert q["kv_bytes_per_token"] == 2 * 30 * 3 * (64 + 4), kv_type
        assert q["workload"]["num_finished"] == 1, kv_type


def test_ctrl_c_prints_what_was_measured(pagoda_bin):
    p = subprocess.Popen([str(pagoda_bin), "bench", "throughput", "-m", str(need(SMOLLM)),
                          "-n", "64", "--prompt-len", "64", "--output-len", "256",
                          "--max-seqs", "8", "-t", "1", "--json", "-", "--no-progress"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(2.0)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    d = json.loads(out)
    assert d["interrupted"] and d["runs"][0]["interrupted"]
    run = d["runs"][0]
    assert run["num_finished"] < 64 and run["output_tokens"] < 64 * 256
    assert "(interrupted)" in err


@pytest.mark.parametrize("args, message", [
    (["throughput", "--prompt-len", "0:5"], "--prompt-len"),
    (["throughput", "--output-len", "9:3"], "--output-len"),
    (["throughput", "--kv-cache-gb", "1", "--kv-tokens", "64"], "not both"),
    (["throughput", "--kv-type", "q8"], "q8"),
    (["memory", "--seq-len", "5000", "--max-model-len", "4096"], "--seq-len"),
    (["throughput", "--dataset", "/nonexistent/sharegpt.json"], "/nonexistent/sharegpt.json"),
])
def test_bad_options_give_one_line_errors(pagoda_bin, stories, args, message):
    r = bench(pagoda_bin, args[0], "-m", stories, *args[1:])
    assert r.returncode != 0
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], r.stderr
