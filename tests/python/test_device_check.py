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
