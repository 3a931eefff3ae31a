"""pagoda estimate: memory arithmetic for presets and real files, as JSON and as a table."""
import json
import re
import subprocess

import gguf


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
