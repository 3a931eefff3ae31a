"""`pagoda convert` on tinystories-656k (a Hugging Face Llama folder, F32 safetensors): the GGUF
file it writes is what the `gguf` package reads (architecture, tensors, tokenizer), holds the
folder's values (Q/K rows permuted for GGUF's RoPE layout, everything else as it was), and runs
and tokenizes in pagoda exactly as the folder does; bad input gets a one-line error, exit 1."""
import json
import shutil
import subprocess

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

PROMPT = "Once upon a time"
TEXTS = ["Once upon a time", "The little dog said \"hi!\"\nThen they played.",
         "  two  spaces, émoji 🐶 and 123 numbers", "<|start_story|>Tom was happy."]
HEADS, KV_HEADS, HEAD_DIM = 8, 4, 16  # tinystories-656k's config.json


@pytest.fixture(scope="module")
def folder(shared_dir):
    path = shared_dir / "models" / "tinystories-656k"
    if not path.is_dir():
        pytest.skip(f"*** {path} is absent: SKIPPING pagoda convert tests ***")
    return path


def pagoda(pagoda_bin, *args, timeout=120):
    return subprocess.run([str(pagoda_bin), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def converted(pagoda_bin, folder, tmp_path_factory):
    """{type: (path, completed process)} for f32 and f16."""
    out = {}
    d = tmp_path_factory.mktemp("convert")
    for t in ("f32", "f16"):
        path = d / f"tinystories-{t}.gguf"
        r = pagoda(pagoda_bin, "convert", folder, "-o", path, "--type", t)
        assert r.returncode == 0, r.stderr
        out[t] = (path, r)
    return out


def safetensors_arrays(path):
    """{name: float32 array} from an F32 .safetensors file (shapes as torch writes them)."""
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    arrays = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", name
        a, b = info["data_offsets"]
        arrays[name] = np.frombuffer(raw[8 + n + a:8 + n + b], dtype=np.float32).reshape(info["shape"])
    return arrays


def rope_pairs(w, heads):
    """HF's rotate-halves rows of each head reordered to GGUF llama's adjacent pairs."""
    rows = w.shape[0]
    return w.reshape(heads, 2, rows // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def field(reader, key):
    f = reader.fields[key]
    return f.contents() if hasattr(f, "contents") else f.parts[f.data[0]]


def test_summary_line(converted):
    for t, (path, r) in converted.items():
        lines = r.stdout.strip().splitlines()
        assert len(lines) == 1, r.stdout
        assert lines[0].startswith(f"wrote {path} (llama, {t}): 20 tensors, "), lines[0]
        assert "2048 tokens (llama), 4 Q/K tensors permuted" in lines[0], lines[0]


def test_gguf_package_reads_metadata_and_tensors(converted):
    for t, (path, _) in converted.items():
        reader = gguf.GGUFReader(str(path))
        assert field(reader, "general.architecture") == "llama"
        assert field(reader, "general.file_type") == {"f32": 0, "f16": 1}[t]
        assert field(reader, "llama.block_count") == 2
        assert field(reader, "llama.embedding_length") == 128
        assert field(reader, "llama.feed_forward_length") == 384
        assert field(reader, "llama.attention.head_count") == HEADS
        assert field(reader, "llama.attention.head_count_kv") == KV_HEADS
        assert field(reader, "llama.rope.dimension_count") == HEAD_DIM
        assert field(reader, "llama.context_length") == 512
        assert field(reader, "tokenizer.ggml.model") == "llama"
        assert len(reader.fields["tokenizer.ggml.tokens"].data) == 2048
        assert len(reader.fields["tokenizer.ggml.scores"].data) == 2048
        assert field(reader, "tokenizer.ggml.bos_token_id") == 1
        assert field(reader, "tokenizer.ggml.eos_token_id") == 2
        assert field(reader, "tokenizer.ggml.add_bos_token") is True
        tensors = {x.name: x for x in reader.tensors}
        expected = {"token_embd.weight": [128, 2048], "output_norm.weight": [128]}
        for layer in range(2):
            p = f"blk.{layer}."
            expected.update({p + "attn_norm.weight": [128], p + "ffn_norm.weight": [128],
                             p + "attn_q.weight": [128, 128], p + "attn_k.weight": [128, 64],
                             p + "attn_v.weight": [128, 64], p + "attn_output.weight": [128, 128],
                             p + "ffn_gate.weight": [128, 384], p + "ffn_up.weight": [128, 384],
                             p + "ffn_down.weight": [384, 128]})
        assert sorted(tensors) == sorted(expected)  # tied: no output.weight
        for name, shape in expected.items():
            x = tensors[name]
            assert [int(d) for d in x.shape] == shape, name
            want = "F32" if len(shape) == 1 or t == "f32" else "F16"
            assert x.tensor_type.name == want, name


def test_values_match_the_folder(converted, folder):
    hf = safetensors_arrays(folder / "model.safetensors")
    for t, (path, _) in converted.items():
        reader = gguf.GGUFReader(str(path))
        tensors = {x.name: x for x in reader.tensors}
        for hf_name, w in hf.items():
            if hf_name == "lm_head.weight":  # the tied table, this file's only copy of it
                hf_name = "model.embed_tokens.weight"
            name = (hf_name.replace("model.embed_tokens", "token_embd")
                    .replace("model.norm", "output_norm").replace("model.layers.", "blk.")
                    .replace("input_layernorm", "attn_norm")
                    .replace("post_attention_layernorm", "ffn_norm")
                    .replace("self_attn.q_proj", "attn_q").replace("self_attn.k_proj", "attn_k")
                    .replace("self_attn.v_proj", "attn_v").replace("self_attn.o_proj", "attn_output")
                    .replace("mlp.gate_proj", "ffn_gate").replace("mlp.up_proj", "ffn_up")
                    .replace("mlp.down_proj", "ffn_down"))
            if name.endswith("attn_q.weight"):
                w = rope_pairs(w, HEADS)
            elif name.endswith("attn_k.weight"):
                w = rope_pairs(w, KV_HEADS)
            if t == "f16" and w.ndim == 2:
                w = w.astype(np.float16)
            got = np.asarray(tensors[name].data).reshape(w.shape)
            assert np.array_equal(got, w), name


def test_inspect_reads_it(pagoda_bin, converted):
    for path, _ in converted.values():
        r = pagoda(pagoda_bin, "inspect", path)
        assert r.returncode == 0, r.stderr
        assert "llama" in r.stdout


def test_greedy_text_matches_the_folder(pagoda_bin, folder, converted):
    args = ["-p", PROMPT, "-n", "24", "--temp", "0", "-t", "2"]
    want = pagoda(pagoda_bin, "run", "-m", folder, *args)
    assert want.returncode == 0, want.stderr
    got = pagoda(pagoda_bin, "run", "-m", converted["f32"][0], *args)
    assert got.returncode == 0, got.stderr
    assert got.stdout == want.stdout
    assert len(want.stdout) > len(PROMPT)
    f16 = pagoda(pagoda_bin, "run", "-m", converted["f16"][0], *args)
    assert f16.returncode == 0, f16.stderr
    assert f16.stdout.startswith(PROMPT) and len(f16.stdout) > len(PROMPT)


def test_tokenize_matches_the_folder(pagoda_bin, folder, converted):
    for text in TEXTS:
        for extra in ([], ["--bos", "--special"]):
            want = pagoda(pagoda_bin, "tokenize", "-m", folder, *extra, text)
            assert want.returncode == 0, want.stderr
            for path, _ in converted.values():
                got = pagoda(pagoda_bin, "tokenize", "-m", path, *extra, text)
                assert got.returncode == 0, got.stderr
                assert got.stdout == want.stdout, (text, extra)


def one_line_error(r):
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    return lines[0]


def test_errors(pagoda_bin, folder, tmp_path):
    out = tmp_path / "out.gguf"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "config.json" in one_line_error(pagoda(pagoda_bin, "convert", empty, "-o", out))
    assert "no such folder" in one_line_error(
        pagoda(pagoda_bin, "convert", tmp_path / "absent", "-o", out))

    msg = one_line_error(pagoda(pagoda_bin, "convert", folder, "-o", out, "--type", "q4_0"))
    assert "unknown --type 'q4_0'" in msg and "f16" in msg

    no_weights = tmp_path / "no_weights"
    no_weights.mkdir()
    shutil.copy(folder / "config.json", no_weights)
    assert "safetensors" in one_line_error(pagoda(pagoda_bin, "convert", no_weights, "-o", out))

    no_tokenizer = tmp_path / "no_tokenizer"
    no_tokenizer.mkdir()
    for name in ("config.json", "model.safetensors"):
        (no_tokenizer / name).symlink_to(folder / name)
    assert "tokenizer.json" in one_line_error(
        pagoda(pagoda_bin, "convert", no_tokenizer, "-o", out))

    other = tmp_path / "other_arch"
    other.mkdir()
    config = json.loads((folder / "config.json").read_text())
    config["model_type"] = "gpt_neox"
    (other / "config.json").write_text(json.dumps(config))
    for name in ("model.safetensors", "tokenizer.json"):
        (other / name).symlink_to(folder / name)
    msg = one_line_error(pagoda(pagoda_bin, "convert", other, "-o", out))
    assert "architecture 'gpt_neox'" in msg
    assert not out.exists()
