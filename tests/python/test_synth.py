"""pagoda synth: random weights, real shapes and a real vocabulary, readable by the gguf package
and runnable by pagoda itself. That llama.cpp reads synth's files and computes what pagoda does
on them is checked by the teacher-forced vectors of two synthetic files
(tests/conformance/test_logits_peer.cc, made once by scripts/make_logit_vectors.py)."""
import subprocess

import gguf


def test_synth_smollm_shape(pagoda_bin, shared_dir, tmp_path):
    vocab = shared_dir / "testdata" / "vocab" / "ggml-vocab-gpt-2.gguf"
    out = tmp_path / "smol.gguf"
    r = subprocess.run([pagoda_bin, "synth", "--like", "smollm2-135m", "--type", "q4_k_m",
                        "--vocab", vocab, "-o", out], capture_output=True, timeout=600)
    assert r.returncode == 0, r.stderr.decode()
    reader = gguf.GGUFReader(out)
    tensors = {t.name: t for t in reader.tensors}
    assert len(tensors) == 2 + 30 * 9
    emb = tensors["token_embd.weight"]
    assert list(emb.shape) == [576, 50257]
    # Tied embeddings: the token table is the output matrix, Q6_K as in llama.cpp; but 576 is no
    # multiple of the K-quant super-block, so it falls back to Q8_0 as llama.cpp's does.
    assert emb.tensor_type == gguf.GGMLQuantizationType.Q8_0
    assert list(tensors["blk.0.attn_k.weight"].shape) == [576, 192]
    assert list(tensors["blk.0.ffn_down.weight"].shape) == [1536, 576]
    assert tensors["blk.0.ffn_down.weight"].tensor_type == gguf.GGMLQuantizationType.Q6_K
    # llama.cpp's rule: the first and last eighth of the layers, and every third between.
    assert tensors["blk.3.ffn_down.weight"].tensor_type == gguf.GGMLQuantizationType.Q4_K
    assert tensors["blk.5.ffn_down.weight"].tensor_type == gguf.GGMLQuantizationType.Q6_K
    field = reader.fields["tokenizer.ggml.pre"]
    assert bytes(field.parts[field.data[0]]).decode() == "gpt-2"
    run = subprocess.run([pagoda_bin, "run", "-m", out, "-p", "Hello", "-n", "2", "--temp", "0"],
                         capture_output=True, timeout=600)
    assert run.returncode == 0, run.stderr.decode()
    assert b"decode: " in run.stderr


def test_synth_rejects_unknown_shape(pagoda_bin, shared_dir, tmp_path):
    vocab = shared_dir / "testdata" / "vocab" / "ggml-vocab-gpt-2.gguf"
    r = subprocess.run([pagoda_bin, "synth", "--like", "gpt-5", "--vocab", vocab, "-o",
                        tmp_path / "x.gguf"], capture_output=True, timeout=60)
    assert r.returncode != 0
    assert b"unknown model shape 'gpt-5'" in r.stderr and b"llama-3.2-1b" in r.stderr
    assert not (tmp_path / "x.gguf").exists()

