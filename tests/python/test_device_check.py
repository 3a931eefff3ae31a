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
