"""pagoda estimate: memory arithmetic for presets and real files, as JSON and as a table."""
import json
import math
import pathlib
import re
import subprocess

import gguf
import pytest
from gguf_copy import copy_gguf

ROOT = pathlib.Path(__file__).resolve().parents[2]


def estimate(pagoda_bin, *args):
    return subprocess.run([pagoda_bin, "estimate", *map(str, args)], capture_output=True,
                          timeout=60)


def test_llama3_8b_on_24_gib(pagoda_bin):
    r = estimate(pagoda_bin, "--preset", "llama-3-8b", "--context", 8192, "--memory-gb", 24,
                 "--json", "-")
    assert r.returncode == 0, r.stderr.decode()
    j = json.loads(r.stdout)  # stdout holds the JSON and nothing else
    assert j["model"] == "llama-3-8b" and j["source"] == "preset"
    assert j["num_parameters"] == 8_030_261_248
    # F16 matrices, F32 norms (65 x 4096 parameters).
    norms = 65 * 4096
    assert j["weight_bytes"] == 2 * (8_030_261_248 - norms) + 4 * norms
    assert j["kv_bytes_per_token"] == 2 * 32 * 8 * 128 * 2 == 131072
    assert j["kv_bytes_per_token_without_gqa"] == 2 * 32 * 4096 * 2
    assert j["kv_bytes_total"] == 131072 * 8192
    assert j["batch"] == 1 and j["context"] == 8192
    assert j["memory_bytes"] == 24 * 2**30
    assert j["fits"] is True
    assert j["total_bytes"] == j["weight_bytes"] + j["kv_bytes_total"] + j["overhead_bytes"]
    free = j["memory_bytes"] - j["weight_bytes"] - j["overhead_bytes"]
    assert j["max_batch"] == free // (131072 * 8192) == 8


def test_batch_past_max_does_not_fit(pagoda_bin):
    r = estimate(pagoda_bin, "--preset", "llama-3-8b", "--context", 8192, "--memory-gb", 24,
                 "--batch", 9, "--json", "-")
    assert r.returncode == 0, r.stderr.decode()
    j = json.loads(r.stdout)
    assert j["fits"] is False and j["max_batch"] == 8
    assert j["kv_bytes_total"] == 9 * 131072 * 8192


def test_without_memory_fits_is_null(pagoda_bin):
    r = estimate(pagoda_bin, "--preset", "qwen2-7b", "--kv-type", "q8_0", "--json", "-")
    assert r.returncode == 0, r.stderr.decode()
    j = json.loads(r.stdout)
    assert j["context"] == 32768  # the model's own
    assert j["kv_bytes_per_token"] == 2 * 28 * (4 * 128 // 32) * 34
    assert j["fits"] is None and j["max_batch"] is None and j["memory_bytes"] is None


def test_table_and_json_file(pagoda_bin, tmp_path):
    out = tmp_path / "e.json"
    r = estimate(pagoda_bin, "--preset", "llama-2-70b", "--weights-type", "q4_k_m",
                 "--context", 4096, "--memory-gb", 80, "--json", out)
    assert r.returncode == 0, r.stderr.decode()
    text = r.stdout.decode()
    assert "KV per token:" in text and "= 327680 bytes" in text
    assert "without GQA:" in text and "= 2621440 bytes (8.0x)" in text
    j = json.loads(out.read_text())
    assert j["weights_type"] == "q4_k_m"
    assert re.search(rf"largest batch of 4096-token sequences: {j['max_batch']}\b", text)


def test_unknown_preset_lists_known_ones(pagoda_bin):
    r = estimate(pagoda_bin, "--preset", "gpt-5")
    assert r.returncode == 1
    err = r.stderr.decode()
    assert "unknown preset 'gpt-5'" in err
    for name in ("llama-2-7b", "llama-2-13b", "llama-2-70b", "llama-3-8b", "llama-3-70b",
                 "qwen2-7b", "qwen2-72b"):
        assert name in err


def test_help_lists_presets(pagoda_bin):
    r = estimate(pagoda_bin, "--help")
    assert r.returncode == 0
    assert b"qwen2-72b" in r.stdout and b"q4_k_m" in r.stdout


def test_file_weights_match_inspect_and_gguf(pagoda_bin, shared_dir):
    model = shared_dir / "models" / "stories260K.gguf"
    r = estimate(pagoda_bin, "-m", model, "--json", "-")
    assert r.returncode == 0, r.stderr.decode()
    j = json.loads(r.stdout)
    assert j["source"] == "file"
    reader = gguf.GGUFReader(model)
    assert j["weight_bytes"] == sum(int(t.n_bytes) for t in reader.tensors)
    assert j["num_parameters"] == sum(int(t.n_elements) for t in reader.tensors)
    inspect = subprocess.run([pagoda_bin, "inspect", model], capture_output=True, timeout=60)
    m = re.search(rb"weights: +\S+ \S+ \((\d+) bytes, (\d+) parameters", inspect.stdout)
    assert m, inspect.stdout.decode()
    assert j["weight_bytes"] == int(m.group(1)) and j["num_parameters"] == int(m.group(2))
    m = re.search(rb"KV cache \(F16\): +(\d+) bytes per token", inspect.stdout)
    assert j["kv_bytes_per_token"] == int(m.group(1))


def test_weights_type_is_for_presets_only(pagoda_bin, shared_dir):
    model = shared_dir / "models" / "stories260K.gguf"
    r = estimate(pagoda_bin, "-m", model, "--weights-type", "q4_0")
    assert r.returncode == 1 and b"--weights-type is for presets" in r.stderr


# --- the deployment: hardware, speed, capacity, cost, calibration, the seed's table ---------

def estimate_json(pagoda_bin, *args):
    r = estimate(pagoda_bin, *args, "--json", "-")
    assert r.returncode == 0, r.stderr.decode()
    return json.loads(r.stdout)


LLAMA2_7B_LAYER_PARAMS = 32 * (4 * 4096 * 4096 + 3 * 4096 * 11008)
LLAMA3_70B_LAYER_PARAMS = 80 * (2 * 8192 * 8192 + 2 * 1024 * 8192 + 3 * 28672 * 8192)


def test_decode_at_batch_one_from_the_spec_sheet(pagoda_bin):
    j = estimate_json(pagoda_bin, "--preset", "llama-2-7b", "--hardware", "a100-80gb",
                      "--prompt-len", 512, "--output-len", 256)
    # By hand: an A100 80 GB moves 2039 GB/s x 0.8 and multiplies 312 TFLOP/s x 0.6; a step
    # costs 1 ms + 20 us a layer. Decode reads every matrix but the token table (32000 x 4096
    # F16) and the K/V of 512 + 256 / 2 tokens (524288 bytes each).
    bandwidth, flops = 2039e9 * 0.8, 312e12 * 0.6
    weights = j["weight_bytes"] - 32000 * 4096 * 2
    products = 2 * (LLAMA2_7B_LAYER_PARAMS + 32000 * 4096)
    attention = 4 * 128 * 32 * 32 * 640
    step = (1e-3 + 32 * 20e-6 + max(weights / bandwidth, products / flops)
            + max(640 * 524288 / bandwidth, attention / flops))
    b1 = j["speed"]["batches"][0]
    assert b1["batch"] == 1 and b1["decode_bound"] == "memory"
    assert abs(b1["decode_step_ms"] / (step * 1e3) - 1) < 1e-9
    assert abs(b1["decode_tokens_per_s"] * step - 1) < 1e-9
    # Prefill of one 512-token prompt is bound by flops: all layers for 512 rows but the last
    # layer's o and FFN (and the output matrix) for the one that samples.
    tail = 4096 * 4096 + 3 * 4096 * 11008
    prefill_products = 2 * (LLAMA2_7B_LAYER_PARAMS * 512 - tail * 511 + 32000 * 4096)
    prefill_attention = 4 * 128 * 32 * 32 * (512 * 513 // 2)
    ttft = (1e-3 + 32 * 20e-6 + prefill_products / flops
            + max(512 * 524288 / bandwidth, prefill_attention / flops))
    assert abs(b1["ttft_ms"] / (ttft * 1e3) - 1) < 1e-9
    assert abs(b1["prefill_tokens_per_s"] * ttft / 512 - 1) < 1e-9
    assert j["speed"]["ttft_ms"] == b1["ttft_ms"]
    # Throughput grows with the batch up to the largest that fits; the last row is that batch.
    sizes = [b["batch"] for b in j["speed"]["batches"]]
    assert sizes[:4] == [1, 2, 4, 8] and sizes[-1] == j["per_device"]["max_batch"]
    rates = [b["decode_tokens_per_s"] for b in j["speed"]["batches"]]
    assert rates == sorted(rates)
    for b in j["speed"]["batches"]:
        assert set(b) >= {"decode_tokens_per_s", "prefill_tokens_per_s", "tpot_ms", "ttft_ms"}


def test_two_gpus_split_the_model_and_pay_for_all_reduces(pagoda_bin):
    j = estimate_json(pagoda_bin, "--preset", "llama-3-70b", "--weights-type", "awq-4bit",
                      "--hardware", "a100-80gb", "--gpus", 2, "--context", 4096)
    d = j["per_device"]
    assert d["weight_bytes"] == (j["weight_bytes"] + 1) // 2
    assert d["kv_bytes_per_token"] == 327680 // 2  # 8 K/V heads, 4 on each
    assert d["seq_len"] == 4096 and j["context"] == 4096
    usable = int(80 * 2**30 * 0.9)
    assert d["usable_bytes"] == usable
    assert d["kv_capacity_tokens"] == (usable - d["weight_bytes"] - d["overhead_bytes"]) // 163840
    assert d["max_batch"] == d["kv_capacity_tokens"] // 4096 == j["max_batch"]
    assert j["hardware"]["num_devices"] == 2
    # Batch 1 by hand: half of every matrix (AWQ layers, F16 output) and half the K/V on each
    # device, plus 2 all-reduces a layer of 8192 F16 values: 2 x 1/2 of them over 300 GB/s and
    # 2 hops of 10 us.
    bandwidth, flops = 2039e9 * 0.8, 312e12 * 0.6
    weights = (j["weight_bytes"] - 128256 * 8192 * 2) / 2
    products = 2 * (LLAMA3_70B_LAYER_PARAMS + 128256 * 8192) / 2
    context = 512 + 128
    attention = 4 * 128 * 64 * 80 * context / 2
    comm = 2 * 80 * (8192 * 2 / 300e9 + 2 * 10e-6)
    step = (1e-3 + 80 * 20e-6 + max(weights / bandwidth, products / flops)
            + max(context * 327680 / 2 / bandwidth, attention / flops) + comm)
    assert abs(j["speed"]["batches"][0]["decode_step_ms"] / (step * 1e3) - 1) < 1e-9
    # One device holds the 37 GiB of weights too, with less room for K/V.
    one = estimate_json(pagoda_bin, "--preset", "llama-3-70b", "--weights-type", "awq-4bit",
                        "--hardware", "a100-80gb", "--context", 4096)
    assert one["per_device"]["fits"] and one["per_device"]["max_batch"] < d["max_batch"] / 2


def test_hybrid_deployment_holds_a_recurrent_state_per_sequence(pagoda_bin):
    """qwen3.5-0.8b's Gated DeltaNet layers: each sequence a step runs holds a state slot beside
    its K/V, so fewer sequences fit, and the slots (--max-seqs or fewer) come out of the K/V's
    room; a model without recurrent layers plans as before."""
    args = ["--hardware", "a10", "--context", 4096, "--max-seqs", 64, "--num-requests", 20]
    j = estimate_json(pagoda_bin, "--preset", "qwen3.5-0.8b", *args)
    d = j["per_device"]
    state = j["state_bytes_per_sequence"]  # the memory estimate's figure
    assert state > 0 and d["state_bytes_per_sequence"] == state
    room = d["usable_bytes"] - d["weight_bytes"] - d["overhead_bytes"]
    assert d["max_batch"] == room // (d["kv_bytes_per_token"] * 4096 + state) == j["max_batch"]
    assert d["max_batch"] < room // (d["kv_bytes_per_token"] * 4096)  # the K/V alone
    assert d["state_slots"] == min(d["max_batch"], 64)
    assert d["state_bytes"] == d["state_slots"] * state
    assert d["kv_capacity_tokens"] == (room - d["state_bytes"]) // d["kv_bytes_per_token"]
    r = estimate(pagoda_bin, "--preset", "qwen3.5-0.8b", *args)
    assert r.returncode == 0, r.stderr.decode()
    assert re.search(rf"recurrent state [0-9.]+ GiB \({d['state_slots']} sequences at {state} "
                     "bytes\\)", r.stdout.decode())
    plain = estimate_json(pagoda_bin, "--preset", "llama-3-8b", *args)["per_device"]
    assert plain["state_bytes_per_sequence"] == plain["state_slots"] == plain["state_bytes"] == 0
    plain_room = plain["usable_bytes"] - plain["weight_bytes"] - plain["overhead_bytes"]
    assert plain["kv_capacity_tokens"] == plain_room // plain["kv_bytes_per_token"]
    assert plain["max_batch"] == plain["kv_capacity_tokens"] // 4096


def test_capacity_and_cost(pagoda_bin):
    j = estimate_json(pagoda_bin, "--preset", "llama-3-8b", "--weights-type", "fp8", "--hardware",
                      "h100", "--prompt-len", 1000, "--output-len", 200, "--num-requests", 300,
                      "--qps", 50)
    c, cost = j["capacity"], j["cost"]
    assert c["num_requests"] == 300 and c["mean_prompt_len"] == 1000
    assert c["slo"] == {"percentile": 90, "ttft_ms": 2000, "tpot_ms": 100}
    assert 0 < c["max_qps"] <= c["saturated_qps"]
    assert c["ttft_ms_at_max"] <= 2000 and c["tpot_ms_at_max"] <= 100
    assert c["limited_by"] in ("TTFT", "TPOT", "throughput")
    assert abs(c["input_tokens_per_s"] - c["max_qps"] * 1000) < 1e-6 * c["input_tokens_per_s"]
    assert abs(c["output_tokens_per_s"] - c["max_qps"] * 200) < 1e-6 * c["output_tokens_per_s"]
    # An H100 at $2.90 an hour; 730 hours a month; input and output share the hour by busy time.
    assert cost["usd_per_hour"] == 2.90
    assert abs(cost["usd_per_month"] - 2.90 * 730) < 1e-9
    per_s = 2.90 / 3600
    total = per_s / (c["max_qps"] * 1200) * 1e6
    assert abs(cost["usd_per_million_tokens"] / total - 1) < 1e-9
    out = per_s * (1 - c["prefill_share"]) / (c["max_qps"] * 200) * 1e6
    assert abs(cost["usd_per_million_output_tokens"] / out - 1) < 1e-9
    inp = per_s * c["prefill_share"] / (c["max_qps"] * 1000) * 1e6
    assert abs(cost["usd_per_million_input_tokens"] / inp - 1) < 1e-9
    replicas = -(-50 // c["max_qps"])
    assert cost["target_replicas"] == replicas and cost["target_devices"] == replicas
    assert abs(cost["target_usd_per_month"] - replicas * 2.90 * 730) < 1e-6


def test_a_tighter_service_level_serves_fewer_requests(pagoda_bin):
    loose = estimate_json(pagoda_bin, "--preset", "llama-3-8b", "--weights-type", "awq-4bit",
                          "--hardware", "l4", "--num-requests", 200)
    tight = estimate_json(pagoda_bin, "--preset", "llama-3-8b", "--weights-type", "awq-4bit",
                          "--hardware", "l4", "--num-requests", 200, "--slo-tpot-ms", 40)
    assert 0 < tight["capacity"]["max_qps"] < loose["capacity"]["max_qps"]
    never = estimate_json(pagoda_bin, "--preset", "llama-3-8b", "--weights-type", "awq-4bit",
                          "--hardware", "l4", "--num-requests", 200, "--slo-ttft-ms", 1)
    assert never["capacity"]["max_qps"] == 0 and never["capacity"]["limited_by"] == "nothing meets"
    assert never["cost"]["usd_per_million_tokens"] is None


def test_quantization_and_kv_type_change_the_fit(pagoda_bin):
    def fit(*args):
        return estimate_json(pagoda_bin, "--preset", "llama-3-70b", "--hardware", "h100",
                             "--context", 4096, *args)["per_device"]
    assert not fit()["fits"]  # 141 GB of F16 weights
    fp8, awq = fit("--weights-type", "fp8"), fit("--weights-type", "awq-4bit")
    assert fp8["fits"] and awq["max_batch"] > fp8["max_batch"]
    fp8_cache = fit("--weights-type", "fp8", "--kv-type", "fp8")
    assert fp8_cache["kv_bytes_per_token"] == fp8["kv_bytes_per_token"] // 2 == 163840
    assert fp8_cache["kv_capacity_tokens"] in (2 * fp8["kv_capacity_tokens"],
                                               2 * fp8["kv_capacity_tokens"] + 1)


def test_hardware_file_and_overrides(pagoda_bin, tmp_path):
    hw = tmp_path / "my-gpu.json"
    hw.write_text(json.dumps({"base": "h100", "name": "rented-h100", "price_per_hour": 5.0}))
    j = estimate_json(pagoda_bin, "--preset", "llama-3-8b", "--hardware", hw, "--hw",
                      "bandwidth_gbs=1000", "--memory-gb", 40)
    h = j["hardware"]
    assert h["name"] == "rented-h100"
    assert h["figures"]["price_per_hour"] == 5.0 and h["sources"]["price_per_hour"].startswith("file")
    assert h["figures"]["bandwidth_gbs"] == 1000 and h["sources"]["bandwidth_gbs"] == "--hw"
    assert h["figures"]["memory_gib"] == 40 and h["sources"]["memory_gib"] == "--memory-gb"
    assert h["figures"]["f16_tflops"] == 989 and h["sources"]["f16_tflops"] == "spec sheet"
    assert abs(h["effective"]["bandwidth_gbs"] - 800) < 1e-9
    assert j["per_device"]["usable_bytes"] == int(40 * 2**30 * 0.9)


def test_cpu_box_by_cores_and_channels(pagoda_bin):
    j = estimate_json(pagoda_bin, "--preset", "llama-2-7b", "--weights-type", "q4_0",
                      "--hardware", "cpu-16c-8ch-128gb", "--num-requests", 50)
    h = j["hardware"]
    assert h["kind"] == "cpu" and h["figures"]["memory_gib"] == 128
    assert h["figures"]["bandwidth_gbs"] == 8 * 38.4
    # Q4_0 products run on the 8-bit integer figure; attention in F32 on a CPU.
    assert abs(h["effective"]["matmul_tflops"] - 16 * 2.5e9 * 32 * 4 / 1e12 * 0.5) < 1e-9
    assert abs(h["effective"]["attention_tflops"] - 16 * 2.5e9 * 32 / 1e12 * 0.5) < 1e-9


def one_line_error(r, *needles):
    assert r.returncode == 1
    err = r.stderr.decode().strip()
    assert len(err.splitlines()) == 1, err
    for n in needles:
        assert n in err, err


def test_user_errors_are_one_line(pagoda_bin, tmp_path):
    one_line_error(estimate(pagoda_bin, "--preset", "llama-3-8b", "--hardware", "tpu"),
                   "--hardware", "unknown hardware 'tpu'", "a100-80gb")
    one_line_error(estimate(pagoda_bin, "--preset", "llama-3-8b", "--hardware", "h100", "--hw",
                            "bandwidth=3"), "unknown hardware figure 'bandwidth'")
    one_line_error(estimate(pagoda_bin, "--preset", "llama-3-8b", "--hardware", "h100", "--hw",
                            "price_per_hour=-1"), "price_per_hour = -1 is out of range")
    one_line_error(estimate(pagoda_bin, "--preset", "llama-3-8b", "--hardware", "cpu-8c-2ch",
                            "--gpus", 2), "--gpus 2", "link_gbs")
    one_line_error(estimate(pagoda_bin, "--preset", "llama-3-8b", "--prompt-len", 100),
                   "--prompt-len", "--hardware")
    one_line_error(estimate(pagoda_bin, "--preset", "llama-3-8b", "--hardware", "h100",
                            "--prompt-len", "0"), "--prompt-len")
    one_line_error(estimate(pagoda_bin, "--table", "--preset", "llama-3-8b"), "--table",
                   "--preset")
    one_line_error(estimate(pagoda_bin, "--preset", "llama-3-8b", "--hardware", "h100",
                            "--dataset", tmp_path / "none.json"), "--dataset", "--tokenizer")
    bad = tmp_path / "bad.json"
    bad.write_text('{"benchmark": "quality", "model_path": "x"}')
    one_line_error(estimate(pagoda_bin, "--preset", "llama-3-8b", "--calibrate", bad),
                   "--calibrate", "bad.json", "model_path x")
    hw = tmp_path / "hw.json"
    hw.write_text('{"kind": "gpu", "bandwidth_gbs": 100}')
    one_line_error(estimate(pagoda_bin, "--preset", "llama-3-8b", "--hardware", hw),
                   "hw.json", "memory_gib: missing")


def test_the_seeds_table(pagoda_bin):
    r = estimate(pagoda_bin, "--table", "--num-requests", 200, "--json", "-")
    assert r.returncode == 0, r.stderr.decode()
    rows = json.loads(r.stdout)["table"]
    assert [row["deployment"] for row in rows] == [
        "7B AWQ-4bit on one A10 24 GB", "13B on an A100 40 GB", "70B AWQ-4bit on 2 x A100 80 GB",
        "70B FP8 on one H100", "7B GGUF Q4 on a 32 GB CPU box"]
    a10, _, two_a100, _, cpu = rows
    assert a10["seed_figure"].startswith("10-20 QPS")
    # The seed's $200 a month against the A10's list price: 0.86 x 730 = $628.
    assert abs(a10["cost"]["usd_per_month"] - 0.86 * 730) < 1e-6
    assert any("$200/month is $0.27/h" in n for n in a10["notes"])
    # 70B at 4 bits is 37 GiB: one 80 GB A100 holds it; the note says what the second buys.
    assert two_a100["hardware"]["num_devices"] == 2
    assert any("one a100-80gb already holds it" in n for n in two_a100["notes"])
    assert cpu["hardware"]["kind"] == "cpu"
    assert any("this machine" in n and "scaled by bandwidth" in n for n in cpu["notes"])
    for row in rows:
        assert row["speed"]["batches"][0]["decode_tokens_per_s"] > 0
    text = estimate(pagoda_bin, "--table", "--num-requests", 200)
    assert text.returncode == 0
    out = text.stdout.decode()
    assert out.count("   seed:    ") == 5 and "note:" in out


def run_latency_report(pagoda_bin, model, path):
    r = subprocess.run([str(pagoda_bin), "bench", "latency", "-m", str(model), "--prompt-len",
                        "64", "--output-len", "16", "--runs", "2", "--no-progress", "--json",
                        str(path)], capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr.decode()


def calibrate_json(pagoda_bin, model, report):
    return estimate_json(pagoda_bin, "-m", model, "--calibrate", report, "--hardware",
                         "cpu-2c-1ch-8gb", "--kv-type", "f32", "--prompt-len", 64,
                         "--output-len", 16, "--num-requests", 50)


def log_misfit(figures, key):
    return sum(math.log(f[key] / f["measured_ms"]) ** 2 for f in figures)


def test_calibrate_on_a_real_bench_report(pagoda_bin, shared_dir, tmp_path):
    model = shared_dir / "models" / "stories260K.gguf"
    report = tmp_path / "latency.json"
    run_latency_report(pagoda_bin, model, report)
    j = calibrate_json(pagoda_bin, model, report)
    cal = j["calibration"]
    measured = json.loads(report.read_text())
    figures = {f["figure"]: f for f in cal["figures"]}
    assert set(figures) == {"TTFT", "decode per token"}
    assert abs(figures["TTFT"]["measured_ms"] - measured["ttft_ms"]["mean"]) < 1e-9
    assert abs(figures["decode per token"]["measured_ms"] -
               measured["decode_ms_per_token"]["mean"]) < 1e-9
    # What this machine measured decides whether the three knobs can reproduce both figures
    # (a prefill slower per token than the model allows cannot be); either way the fit is no
    # worse than the profile as given, and the report says which case it is.
    assert log_misfit(cal["figures"], "predicted_after_ms") <= \
        log_misfit(cal["figures"], "predicted_before_ms") + 1e-6
    worst = max(abs(f["predicted_after_ms"] / f["measured_ms"] - 1) for f in cal["figures"])
    assert abs(cal["worst_error"] - worst) < 1e-9
    assert cal["misfit"] == (worst > 0.05)
    states = [cal["bandwidth"], cal["compute"], cal["overheads"]]
    assert cal["underdetermined"] or "modelled" in states
    sources = j["hardware"]["sources"]
    for state, key in zip(states, ["bandwidth_efficiency", "compute_efficiency",
                                   "step_overhead_ms"]):
        assert sources[key] == ("calibrated" if state == "measured" else "modelled"), key


@pytest.mark.parametrize("ttft_ms,decode_ms,reachable", [(0.75, 0.08, True), (1.5, 0.04, True),
                                                         (2.226, 0.02, False)])
def test_calibrate_reproduces_what_the_model_can_reach(pagoda_bin, shared_dir, tmp_path, ttft_ms,
                                                       decode_ms, reachable):
    """A real report with its means set: two figures, three parameters. Where the model can
    reach them the fit reproduces both; a TTFT over 100 decode steps for 64 prompt tokens is
    out of its reach (prefill costs at most about a decode step a token there), and the text
    says the misfit instead of passing it off as a fit."""
    model = shared_dir / "models" / "stories260K.gguf"
    report = tmp_path / "latency.json"
    run_latency_report(pagoda_bin, model, report)
    doc = json.loads(report.read_text())
    doc["ttft_ms"]["mean"] = ttft_ms
    doc["decode_ms_per_token"]["mean"] = decode_ms
    report.write_text(json.dumps(doc))
    cal = calibrate_json(pagoda_bin, model, report)["calibration"]
    worst = max(abs(f["predicted_after_ms"] / f["measured_ms"] - 1) for f in cal["figures"])
    text = estimate(pagoda_bin, "-m", model, "--calibrate", report, "--hardware",
                    "cpu-2c-1ch-8gb", "--kv-type", "f32").stdout.decode()
    if reachable:
        assert worst < 0.02 and not cal["misfit"]
        assert "no setting of the three" not in text
    else:
        assert worst > 0.05 and cal["misfit"]
        assert "no setting of the three reproduces every figure" in text


def test_dataset_workload(pagoda_bin, shared_dir, tmp_path):
    model = shared_dir / "models" / "stories260K.gguf"
    data = tmp_path / "sharegpt.json"
    story = "Once upon a time there was a little girl who liked to play in the park. " * 3
    data.write_text(json.dumps([
        {"conversations": [{"from": "human", "value": story},
                           {"from": "gpt", "value": story + story}]},
        {"conversations": [{"from": "gpt", "value": "skipped"}]},
        {"conversations": [{"from": "human", "value": story + story},
                           {"from": "gpt", "value": story}]},
    ]))
    j = estimate_json(pagoda_bin, "-m", model, "--hardware", "cpu-4c-2ch", "--dataset", data)
    assert j["workload"].startswith("dataset") and j["capacity"]["num_requests"] == 2
    # Its first prompt and reply as the file's tokenizer counts them (with BOS).
    tok = subprocess.run([str(pagoda_bin), "tokenize", "-m", str(model), "--bos", story],
                         capture_output=True, timeout=60)
    n = len(tok.stdout.split())
    assert abs(j["capacity"]["mean_prompt_len"] - 1.5 * n) <= 2


def test_readme_question(pagoda_bin):
    # How many concurrent 4K-token chats does Llama-3-70B at 4-bit serve on two A100 80 GB, and
    # at what cost per million tokens.
    r = estimate(pagoda_bin, "--preset", "llama-3-70b", "--weights-type", "awq-4bit",
                 "--hardware", "a100-80gb", "--gpus", 2, "--prompt-len", 3584, "--output-len", 512)
    assert r.returncode == 0, r.stderr.decode()
    text = r.stdout.decode()
    assert re.search(r"largest batch of 4096-token sequences: \d+", text)
    assert re.search(r"per million tokens: +\$[\d.]+ input, \$[\d.]+ output", text)


def test_the_speed_table_ends_where_throughput_stops_growing(pagoda_bin):
    # A 2-core box with room for hundreds of sequences: decode turns compute-bound after a few,
    # so the table ends where a larger batch adds under 5 % more tokens a second, far below
    # what fits (and below the 256 sequences a step holds).
    j = estimate_json(pagoda_bin, "--preset", "qwen2-7b", "--weights-type", "q4_k_m",
                      "--hardware", "cpu-2c-1ch-64gb", "--prompt-len", 512, "--output-len", 128)
    rows = j["speed"]["batches"]
    rates = [b["decode_tokens_per_s"] for b in rows]
    assert j["speed"]["batches_end"] == "throughput"
    assert j["per_device"]["max_batch"] > 256 > rows[-1]["batch"]
    assert len(rows) >= 3 and rates[-1] < 1.05 * rates[-2]
    for before, after in zip(rates[:-2], rates[1:-1]):
        assert after >= 1.05 * before
    text = estimate(pagoda_bin, "--preset", "qwen2-7b", "--weights-type", "q4_k_m",
                    "--hardware", "cpu-2c-1ch-64gb", "--prompt-len", 512, "--output-len", 128)
    assert f"(ends at {rows[-1]['batch']}: it decodes less than 5 % more" in text.stdout.decode()


def predicted_and_measured(pagoda_bin, model):
    """`estimate --hardware this` (it times a short request through the engine) for a 256-token
    prompt, then `bench latency` on it: [(figure, predicted ms, measured ms)]."""
    r = subprocess.run([str(pagoda_bin), "estimate", "-m", str(model), "--hardware", "this",
                        "--prompt-len", "256", "--output-len", "32", "--json", "-"],
                       capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr.decode()
    j = json.loads(r.stdout)
    figures = {f["figure"] for f in j["calibration"]["figures"] if f["path"] == "engine probe"}
    assert figures == {"TTFT", "decode per token"}
    predicted = j["speed"]["batches"][0]
    r = subprocess.run([str(pagoda_bin), "bench", "latency", "-m", str(model), "--prompt-len",
                        "256", "--output-len", "32", "--runs", "2", "--no-progress", "--json",
                        "-"], capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr.decode()
    measured = json.loads(r.stdout)
    return [("TTFT", predicted["ttft_ms"], measured["ttft_ms"]["mean"]),
            ("decode", predicted["tpot_ms"], measured["decode_ms_per_token"]["mean"])]


def test_this_machine_predicts_what_bench_latency_measures(pagoda_bin, shared_dir):
    # `--hardware this` with a model file times a short request through the engine on it, so
    # its prediction for a longer prompt follows what `bench latency` then measures. CTest runs
    # this beside other tests on two cores, so the load can change between the probe and the
    # measurement (0.62 and 2.87 seen in CI-like runs): the bound is wide, and a pair outside it
    # is taken again, up to three times, since a load spike passes and a wrong model does not.
    # The errors measured on this machine are in docs/BENCHMARKS.md.
    model = ROOT / "models" / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    if not model.exists():
        pytest.skip(f"*** {model.name} is not installed (scripts/setup): SKIPPING ***")
    misses = []
    for _ in range(3):
        pairs = predicted_and_measured(pagoda_bin, model)
        misses = [f"{name}: predicted {p:.1f} ms, measured {m:.1f} ms" for name, p, m in pairs
                  if not 1 / 2.5 < p / m < 2.5]
        if not misses:
            return
    pytest.fail("; ".join(misses) + " (in each of three tries)")


def test_this_machine_without_a_runnable_model_uses_the_kernel_probe(pagoda_bin, shared_dir,
                                                                     tmp_path):
    # The estimate needs only the file's shape; the engine needs every tensor. Without one the
    # engine probe says why in one line and the estimate goes on from the kernel probe.
    broken = tmp_path / "broken.gguf"
    copy_gguf(shared_dir / "models" / "stories260K.gguf", broken, dropped={"blk.0.attn_q.weight"})
    r = estimate(pagoda_bin, "-m", broken, "--hardware", "this", "--prompt-len", 64,
                 "--output-len", 16, "--json", "-")
    assert r.returncode == 0, r.stderr.decode()
    assert "the engine cannot run the model" in r.stderr.decode()
    assert "blk.0.attn_q.weight" in r.stderr.decode()
    j = json.loads(r.stdout)
    assert j["calibration"] is None and j["speed"]["batches"][0]["decode_tokens_per_s"] > 0
