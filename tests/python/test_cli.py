"""The pagoda command line: inspect, tokenize and detokenize on real files, and bad input."""
import json
import pathlib
import re
import subprocess
import urllib.request

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


STORIES = ("models", "stories260K.gguf")


def test_llama_cpp_spellings_mean_the_same(pagoda_bin, shared_dir):
    model = shared_dir.joinpath(*STORIES)
    ours = run(pagoda_bin, "run", "-m", model, "-p", "Once", "--temp", "0", "-c", "64", "-n", "8")
    theirs = run(pagoda_bin, "run", "-m", model, "-p", "Once", "--temperature", "0",
                 "--ctx-size", "64", "--n-predict", "8")
    assert ours.returncode == 0 and theirs.returncode == 0, theirs.stderr
    assert ours.stdout == theirs.stdout and len(ours.stdout.split()) > 4


def test_ngl_without_a_gpu_warns_and_runs_on_the_cpu(pagoda_bin, shared_dir):
    model = shared_dir.joinpath(*STORIES)
    r = run(pagoda_bin, "run", "-m", model, "-p", "Once", "--temp", "0", "-n", "4", "-ngl", "99")
    err = r.stderr.decode()
    assert r.returncode == 0, err
    if "the whole model goes on the GPU" not in err:  # a CUDA build on a machine with a GPU
        assert re.search(r"^warning: -ngl 99: (this pagoda has no CUDA backend|no CUDA device "
                         r"here); running on the CPU$", err, re.M), err
    r = run(pagoda_bin, "run", "-m", model, "-p", "Once", "-ngl", "1", "--backend", "cpu")
    assert r.returncode == 2 and "-ngl 1 asks for the GPU but --backend is cpu" in r.stderr.decode()
    # A command without the option names it as typed.
    r = run(pagoda_bin, "tokenize", "-m", model, "-ngl", "1", "hi")
    assert r.returncode == 2 and "unknown option '-ngl' for 'pagoda tokenize'" in r.stderr.decode()


def test_serve_takes_the_llama_cpp_spellings_too(pagoda_bin, shared_dir):
    from server_util import Server
    s = Server(pagoda_bin, shared_dir.joinpath(*STORIES), "-t", "1", "-ngl", "99", "-c", "64")
    try:
        log = "".join(s.log)
        if "the whole model goes on the GPU" not in log:
            assert "warning: -ngl 99:" in log and "running on the CPU" in log, log
        with urllib.request.urlopen(s.url + "/v1/models", timeout=10) as r:
            assert json.loads(r.read())["data"][0]["max_model_len"] == 64
    finally:
        s.stop()
    r = run(pagoda_bin, "serve", "-m", shared_dir.joinpath(*STORIES), "-ngl", "1", "--backend", "cpu")
    assert r.returncode == 2 and "-ngl 1 asks for the GPU but --backend is cpu" in r.stderr.decode()


@pytest.mark.parametrize("option, hint", [
    ("--temperatur", "--temperature"), ("--ctx", "--ctx-size"), ("--predict", "--n-predict"),
    ("--top_k", "--top-k"), ("--gpu-layers", "--n-gpu-layers"), ("--threads-batch", "--threads"),
    ("--tmep", "--temp"),
])
def test_unknown_options_get_the_nearest(pagoda_bin, option, hint):
    r = run(pagoda_bin, "run", "-m", "x", option, "1")
    err = r.stderr.decode()
    assert r.returncode == 2 and err.count("\n") == 1, err
    assert f"unknown option '{option}' for 'pagoda run' (did you mean '{hint}'?)" in err, err


@pytest.mark.parametrize("args, needle", [
    (["--temp", "abc"], "pagoda run: --temp/--temperature takes a number, not 'abc'"),
    (["-n", "gl"], "pagoda run: -n/--num-tokens/--n-predict takes a whole number from 0 to "
                   "1048576, not 'gl'"),
    (["-ngl", "x"], "pagoda run: --n-gpu-layers takes a whole number from 0 to 1048576, not 'x'"),
    (["--kv-type", "f8"], "pagoda run: --kv-type takes one of f32, f16, q8_0, fp8, not 'f8'"),
    (["--top-k", "many"], "pagoda run: --top-k takes a whole number, not 'many'"),
])
def test_bad_values_are_worded_as_pagoda_errors(pagoda_bin, args, needle):
    r = run(pagoda_bin, "run", "-m", "x", "-p", "hi", *args)
    err = r.stderr.decode()
    assert r.returncode == 2 and err.count("\n") == 1, err
    assert needle in err and "Could not convert" not in err and "Value " not in err, err


def test_naming_a_speculation_method_turns_it_on(pagoda_bin, shared_dir):
    r = run(pagoda_bin, "run", "-m", shared_dir.joinpath(*STORIES), "--temp", "0", "-n", "24",
            "-p", "the cat the cat the cat the cat the cat", "--spec-method", "ngram")
    assert r.returncode == 0, r.stderr
    assert re.search(r"proposed \d+, accepted \d+", r.stderr.decode()), r.stderr


def test_server_doc_defaults_match_serve_help(pagoda_bin):
    """Each option docs/SERVER.md gives a plain default for shows the same one in --help."""
    doc = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "SERVER.md").read_text()
    help_text = run(pagoda_bin, "serve", "--help").stdout.decode()
    checked = 0
    for option, default in re.findall(r"^\| `(--[a-z-]+)` \| `?([a-z0-9_.]+)`? \|", doc, re.M):
        m = re.search(re.escape(option) + r"\b[^\n]*?=(\S+)", help_text)
        if m:
            assert m.group(1) == default, f"{option}: docs say {default}, --help {m.group(1)}"
            checked += 1
    assert checked >= 5
