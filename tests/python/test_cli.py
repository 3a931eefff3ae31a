"""The pagoda command line: inspect, tokenize and detokenize on real files, and bad input."""
import pathlib
import subprocess

import pytest


def run(pagoda_bin, *args, input_bytes=None):
    return subprocess.run([str(pagoda_bin), *map(str, args)], capture_output=True,
                          input=input_bytes, timeout=120)


def model_files(shared_dir):
    files = sorted(shared_dir.glob("models/*.gguf")) + sorted(shared_dir.glob("models/*/*.gguf"))
    files += sorted(shared_dir.glob("testdata/vocab/*.gguf"))
    return files + [shared_dir / "models" / "tinystories-656k"]


def test_inspect_every_shared_model(pagoda_bin, shared_dir):
    files = model_files(shared_dir)
    assert len(files) >= 15
    for path in files:
        r = run(pagoda_bin, "inspect", path)
        out = r.stdout.decode()
        assert r.returncode == 0, f"{path}: {r.stderr.decode()}"
        assert "architecture:" in out and "vocabulary:" in out, path


def test_inspect_reports_gqa_kv_bytes(pagoda_bin, shared_dir):
    out = run(pagoda_bin, "inspect", shared_dir / "models" / "stories260K.gguf").stdout.decode()
    # 5 layers, 4 KV heads of 8 dims (8 query heads): 2 * 5 * 4 * 8 * 2 bytes.
    assert "KV cache (F16):  640 bytes per token" in out
    assert "(1280 without grouped-query attention)" in out
    assert "48 tensors" in out


def test_inspect_bad_files(pagoda_bin, tmp_path):
    missing = run(pagoda_bin, "inspect", tmp_path / "nope.gguf")
    assert missing.returncode != 0
    assert b"nope.gguf" in missing.stderr
    text = tmp_path / "notes.gguf"
    text.write_bytes(b"hello, this is not a model\n")
    r = run(pagoda_bin, "inspect", text)
    assert r.returncode != 0
    assert r.stderr.decode().count("\n") == 1, r.stderr
    assert "notes.gguf" in r.stderr.decode()
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(b"GGUF\x03\x00\x00\x00\x05")
    r = run(pagoda_bin, "inspect", truncated)
    assert r.returncode != 0 and b"truncated" in r.stderr


def test_tokenize_matches_vectors(pagoda_bin, shared_dir):
    vocab = shared_dir / "testdata" / "vocab" / "ggml-vocab-llama-bpe.gguf"
    r = run(pagoda_bin, "tokenize", "-m", vocab, "Hello world")
    assert r.returncode == 0, r.stderr
    assert r.stdout.decode().split() == ["9906", "1917"]
    spm = shared_dir / "testdata" / "vocab" / "ggml-vocab-llama-spm.gguf"
    assert run(pagoda_bin, "tokenize", "-m", spm, " Hello world").stdout.decode().split() == [
        "29871", "15043", "3186"]
    with_bos = run(pagoda_bin, "tokenize", "-m", spm, "--bos", "Hello").stdout.decode().split()
    assert with_bos[0] == "1"


def test_tokenize_file_exact_bytes_and_roundtrip(pagoda_bin, shared_dir, tmp_path):
    vocab = shared_dir / "testdata" / "vocab" / "ggml-vocab-gpt-2.gguf"
    text = "  two leading spaces, a tab\tand a trailing newline\n"
    f = tmp_path / "in.txt"
    f.write_bytes(text.encode())
    ids = run(pagoda_bin, "tokenize", "-m", vocab, "--file", f).stdout.decode().split()
    assert ids
    back = run(pagoda_bin, "detokenize", "-m", vocab, *ids)
    assert back.returncode == 0
    assert back.stdout.decode()[:-1] == text  # detokenize ends its output with one newline


def test_special_tokens_only_when_asked(pagoda_bin, shared_dir):
    spm = shared_dir / "testdata" / "vocab" / "ggml-vocab-llama-spm.gguf"
    plain = run(pagoda_bin, "tokenize", "-m", spm, "<s>").stdout.decode().split()
    special = run(pagoda_bin, "tokenize", "-m", spm, "--special", "<s>").stdout.decode().split()
    assert special == ["1"]
    assert plain != ["1"] and len(plain) > 1


def test_detokenize_rejects_bad_ids(pagoda_bin, shared_dir):
    spm = shared_dir / "testdata" / "vocab" / "ggml-vocab-llama-spm.gguf"
    r = run(pagoda_bin, "detokenize", "-m", spm, "1", "99999999")
    assert r.returncode != 0 and b"99999999" in r.stderr
