"""Tokenizers never depend on the model's shape: tokenize, detokenize and inspect read the
vocabulary of a GGUF file whatever its architecture and however its hyper-parameters are written;
only the commands that need the weights (run, serve, bench) refuse such a file, in one line."""
import subprocess

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from gguf import GGUFValueType  # noqa: E402


def copy_tokenizer(src, writer):
    """Copies every tokenizer.* key of the GGUF file `src` into `writer`."""
    reader = gguf.GGUFReader(str(src))
    num_tokens = len(reader.fields["tokenizer.ggml.tokens"].data)
    for name, field in reader.fields.items():
        if not name.startswith("tokenizer."):
            continue
        if field.types[0] == GGUFValueType.ARRAY:
            writer.add_key_value(name, field.contents(), GGUFValueType.ARRAY,
                                 sub_type=field.types[-1])
        else:
            writer.add_key_value(name, field.contents(), field.types[0])
    return num_tokens


def write_model(path, vocab, arch, head_count_kv, with_weights=True, strings=None):
    """A file of architecture `arch` with `vocab`'s tokenizer; head_count_kv as given (an int or
    a per-layer list); `strings`: more string keys."""
    w = gguf.GGUFWriter(str(path), arch=arch)
    for key, value in (strings or {}).items():
        w.add_string(key, value)
    w.add_uint32(f"{arch}.block_count", 3)
    w.add_uint32(f"{arch}.embedding_length", 64)
    w.add_uint32(f"{arch}.feed_forward_length", 128)
    w.add_uint32(f"{arch}.attention.head_count", 4)
    w.add_uint32(f"{arch}.context_length", 256)
    if isinstance(head_count_kv, list):
        w.add_key_value(f"{arch}.attention.head_count_kv", head_count_kv, GGUFValueType.ARRAY,
                        sub_type=GGUFValueType.INT32)
    else:
        w.add_uint32(f"{arch}.attention.head_count_kv", head_count_kv)
    num_tokens = copy_tokenizer(vocab, w)
    if with_weights:  # one row per token, so that only the shape is at fault
        w.add_tensor("token_embd.weight", np.zeros((num_tokens, 64), dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def pagoda(pagoda_bin, *args):
    return subprocess.run([str(pagoda_bin), *map(str, args)], capture_output=True, text=True,
                          timeout=120)


@pytest.fixture
def vocab(shared_dir):
    return shared_dir / "testdata" / "vocab" / "ggml-vocab-gpt-2.gguf"


def want_ids(pagoda_bin, vocab):
    r = pagoda(pagoda_bin, "tokenize", "-m", vocab, "Hello world")
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.mark.parametrize("arch,kv", [("mystery", 2), ("mystery", [2, 1, 2]), ("llama", [2, 1, 2]),
                                     ("llama", [2, 2, 2])])
def test_tokenize_whatever_the_shape(pagoda_bin, vocab, tmp_path, arch, kv):
    path = tmp_path / "m.gguf"
    write_model(path, vocab, arch, kv)
    r = pagoda(pagoda_bin, "tokenize", "-m", path, "Hello world")
    assert r.returncode == 0, r.stderr
    assert r.stdout == want_ids(pagoda_bin, vocab)
    ids = r.stdout.split()
    d = pagoda(pagoda_bin, "detokenize", "-m", path, *ids)
    assert d.returncode == 0, d.stderr
    assert "Hello world" in d.stdout


def test_inspect_names_what_it_could_not_read(pagoda_bin, vocab, tmp_path):
    path = tmp_path / "m.gguf"
    write_model(path, vocab, "llama", [2, 1, 2], with_weights=False)
    r = pagoda(pagoda_bin, "inspect", path)
    assert r.returncode == 0, r.stderr  # a tokenizer file: nothing needs the hyper-parameters
    assert "not read:" in r.stdout and "llama.attention.head_count_kv" in r.stdout
    assert "vocabulary:" in r.stdout
    path = tmp_path / "w.gguf"
    write_model(path, vocab, "llama", [2, 1, 2])
    r = pagoda(pagoda_bin, "inspect", path)
    assert r.returncode == 1
    assert "vocabulary:" in r.stdout and "llama.attention.head_count_kv" in r.stdout


@pytest.mark.parametrize("arch,kv,why", [
    ("mystery", 2, "architecture 'mystery' is not supported"),
    ("llama", [2, 1, 2], "'llama.attention.head_count_kv' gives each layer its own value"),
])
def test_run_refuses_in_one_line(pagoda_bin, vocab, tmp_path, arch, kv, why):
    path = tmp_path / "m.gguf"
    write_model(path, vocab, arch, kv)
    r = pagoda(pagoda_bin, "run", "-m", path, "-p", "Hello", "-n", "1")
    assert r.returncode == 1
    assert why in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_gemma4_tokenizer_passes_llama_cpp_vectors(pagoda_bin, shared_dir):
    """llama.cpp's Gemma 4 vectors (in ../shared) on its vocabulary file, which ../shared lacks:
    looked for in $PAGODA_VOCAB_DIR, else models/vocab/ (llama-cpp-python 0.3.36's source
    package ships it under vendor/llama.cpp/models/)."""
    import os
    import pathlib
    root = pathlib.Path(__file__).resolve().parents[2]
    folder = pathlib.Path(os.environ.get("PAGODA_VOCAB_DIR", root / "models" / "vocab"))
    path = folder / "ggml-vocab-gemma-4.gguf"
    if not path.exists():
        pytest.skip(f"*** {path} is absent: Gemma 4 tokenizer vectors SKIPPED ***")
    vectors = shared_dir / "testdata" / "vocab" / "ggml-vocab-gemma-4.gguf"
    texts = vectors.with_suffix(".gguf.inp").read_text(encoding="utf-8")
    texts = texts.split("\n__ggml_vocab_test__\n")[:-1]
    want = vectors.with_suffix(".gguf.out").read_text().split("\n")
    assert len(texts) > 40
    for text, ids in zip(texts, want):
        r = subprocess.run([str(pagoda_bin), "tokenize", "-m", str(path), "--file", "/dev/stdin"],
                           input=text.encode(), capture_output=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert r.stdout.decode().split() == ids.split(), text
