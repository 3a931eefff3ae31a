"""scripts/device-check --decode --dry-run: the device run's steps rehearsed on the CPU backend
(synth, old and new kernels' latency and throughput, the table and its JSON), so that the script
a lent GPU runs once has already run here."""
import json
import os
import pathlib
import subprocess

from conftest import ROOT


def test_decode_dry_run_writes_the_table_and_json(pagoda_bin, shared_dir, tmp_path):
    tests_bin = pathlib.Path(pagoda_bin).parent / "tests" / "pagoda_tests"
    env = dict(os.environ, OUT=str(tmp_path), PAGODA_BIN=str(pagoda_bin),
               PAGODA_TESTS_BIN=str(tests_bin), PAGODA_SHARED=str(shared_dir))
    run = subprocess.run([str(ROOT / "scripts" / "device-check"), "--decode", "--dry-run"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "decode tok/s" in run.stdout and "launches/step" in run.stdout
    files = list(tmp_path.glob("device-*.json"))
    assert len(files) == 1, run.stdout[-2000:]
    result = json.loads(files[0].read_text())
    assert result["gpu"] == "dry run (CPU)"
    runs = [r for r in result["runs"] if r["engine"] == "pagoda"]
    assert sorted(r["kernels"] for r in runs) == ["new", "old"]
    for r in runs:
        assert r["decode_tok_s"] > 0 and r["prefill512_tok_s"] > 0
        assert r["throughput64_tok_s"] > 0
        assert r["type"] == "q4_0"
    assert [r for r in runs if r["kernels"] == "new"][0]["throughput64_q8_tok_s"] > 0
    assert (tmp_path / "decode-results.tgz").exists()


def test_table_counts_per_decode_step_and_reads_llama_bench(tmp_path):
    """bench/device_decode.py on made-up results: launches per decode step are the difference of
    the full and half runs' counts over the steps between them; llama-bench's rows are read."""
    name = "llama-3.2-1b-q4_0"
    (tmp_path / "meta.json").write_text('{"runs": 2, "output": 128}')
    (tmp_path / "peaks.json").write_text('{"copy_gb_s": 1000, "f16_tflop_s": 500}')
    lat = {"decode_tokens_per_s": 500.0, "prefill_tokens_per_s": 9000.0,
           "step_weight_bytes": 1e9, "step_parameters": 1.2e9}
    (tmp_path / f"lat-new-{name}.json").write_text(json.dumps(lat))
    full = {"launches": 1000 + 2 * 128 * 210, "syncs": 50 + 2 * 128, "mallocs": 300,
            "memsets": 200, "uploads": 400 + 2 * 128 * 3, "downloads": 2 * 129}
    half = {"launches": 1000 + 2 * 64 * 210, "syncs": 50 + 2 * 64, "mallocs": 300,
            "memsets": 200, "uploads": 400 + 2 * 64 * 3, "downloads": 2 * 65}
    (tmp_path / f"counts-new-{name}.txt").write_text("log line\ncuda counts: " + json.dumps(full) + "\n")
    (tmp_path / f"counts-half-new-{name}.txt").write_text("cuda counts: " + json.dumps(half) + "\n")
    (tmp_path / f"llama-{name}.json").write_text(json.dumps(
        [{"n_prompt": 512, "n_gen": 0, "avg_ts": 12000.0}, {"n_prompt": 0, "n_gen": 128, "avg_ts": 400.0}]))
    out = tmp_path / "out.json"
    run = subprocess.run(["python3", str(ROOT / "bench" / "device_decode.py"), str(tmp_path),
                          "--gpu", "test", "--date", "2026-12-06", "--json", str(out)],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    result = json.loads(out.read_text())
    pagoda, llama = result["runs"]
    assert pagoda["launches_per_step"] == 210 and pagoda["syncs_per_step"] == 1
    assert pagoda["mallocs_per_step"] == 0 and pagoda["uploads_per_step"] == 3
    assert abs(pagoda["decode_bandwidth_fraction"] - 0.5) < 1e-9
    assert llama["engine"] == "llama.cpp" and llama["decode_tok_s"] == 400.0
    assert abs(llama["decode_bandwidth_fraction"] - 0.4) < 1e-9
    assert llama["prefill512_tok_s"] == 12000.0


def test_prefill_dry_run_writes_the_table_and_json(pagoda_bin, shared_dir, tmp_path):
    """scripts/device-check --prefill --dry-run: issue 41's run rehearsed on the CPU backend
    (the host tests of the tile products and attention, synth, old and new kernels' prefill of
    a short and a long prompt, perplexity beside the CPU backend's, the table and its JSON)."""
    tests_bin = pathlib.Path(pagoda_bin).parent / "tests" / "pagoda_tests"
    env = dict(os.environ, OUT=str(tmp_path), PAGODA_BIN=str(pagoda_bin),
               PAGODA_TESTS_BIN=str(tests_bin), PAGODA_SHARED=str(shared_dir))
    run = subprocess.run([str(ROOT / "scripts" / "device-check"), "--prefill", "--dry-run"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "prefill 64 tok/s" in run.stdout and "minus CPU's" in run.stdout
    assert "CudaMmq.LegacyTileProductsAreTheCpuBackendsBitForBit" not in run.stdout  # passed
    files = list(tmp_path.glob("prefill-*.json"))
    assert len(files) == 1, run.stdout[-2000:]
    result = json.loads(files[0].read_text())
    assert result["gpu"] == "dry run (CPU)"
    runs = [r for r in result["runs"] if r["engine"] == "pagoda"]
    assert sorted(r["kernels"] for r in runs) == ["new", "old"]
    for r in runs:
        assert r["prefill512_tok_s"] > 0 and r["prefill4096_tok_s"] > 0
        assert r["nll_difference"] == 0  # the CPU backend against itself
    assert (tmp_path / "prefill-results.tgz").exists()


def test_prefill_table_fractions_llama_rows_and_mismatch(tmp_path):
    """bench/device_prefill.py on made-up results: fractions of the F16 peak from the step's
    parameters, llama-bench's prompt rows read, and a new-kernel perplexity off the CPU
    backend's fails the run."""
    name = "llama-3.1-8b-q4_0"
    (tmp_path / "peaks.json").write_text('{"copy_gb_s": 1000, "f16_tflop_s": 500}')
    for k, tok_s in (("old", 5000.0), ("new", 25000.0)):
        (tmp_path / f"p512-{k}-{name}.json").write_text(json.dumps(
            {"prefill_tokens_per_s": tok_s, "step_parameters": 5e9}))
        (tmp_path / f"p4096-{k}-{name}.json").write_text(json.dumps(
            {"prefill_tokens_per_s": tok_s / 2, "step_parameters": 5e9}))
    (tmp_path / f"q-old-{name}.json").write_text('{"mean_nll": 11.0}')
    (tmp_path / f"q-new-{name}.json").write_text('{"mean_nll": 11.001}')
    (tmp_path / f"q-cpu-{name}.json").write_text('{"mean_nll": 11.0}')
    (tmp_path / f"llama-{name}.json").write_text(json.dumps(
        [{"n_prompt": 512, "n_gen": 0, "avg_ts": 20000.0}, {"n_prompt": 4096, "n_gen": 0, "avg_ts": 10000.0}]))
    (tmp_path / "tests.txt").write_text(
        "  timing prefill Q4_0  ffn_up    14336x4096   n=512   old    1000.0 us   60.1 TFLOP/s"
        "   new     500.0 us  120.3 TFLOP/s\n")
    out = tmp_path / "out.json"
    cmd = ["python3", str(ROOT / "bench" / "device_prefill.py"), str(tmp_path), "--gpu", "test",
           "--date", "2026-12-06", "--json", str(out)]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    result = json.loads(out.read_text())
    old, new, llama = result["runs"]
    assert abs(new["prefill512_peak_fraction"] - 0.5) < 1e-9  # 25000 * 2 * 5e9 = 250 of 500
    assert abs(old["prefill4096_peak_fraction"] - 0.05) < 1e-9
    assert abs(new["nll_difference"] - 0.001) < 1e-9
    assert llama["engine"] == "llama.cpp" and llama["prefill4096_tok_s"] == 10000.0
    assert abs(llama["prefill512_peak_fraction"] - 0.4) < 1e-9
    assert result["products"][0]["new_tflop_s"] == 120.3 and result["products"][0]["tokens"] == 512
    (tmp_path / f"q-new-{name}.json").write_text('{"mean_nll": 11.5}')
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert run.returncode == 1 and "MISMATCH" in run.stdout
