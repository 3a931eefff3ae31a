"""Hugging Face folders of the families beside Llama that pagoda runs and converts: Qwen2 (Q/K/V
biases, an untied output matrix, a byte-level BPE tokenizer), Qwen3 (per-head Q/K norm, a head
size other than hidden / heads, BF16 weights) and Gemma 3 (norm weights stored as w for 1 + w,
five sliding-window layers per global one with their own RoPE base, embeddings scaled by
sqrt(hidden), GELU, the multimodal wrapper's tensor names and vision tower). ../shared holds only a
Llama folder, so these are made here from seeded random weights.

The oracle is a forward pass in numpy (float64) written from transformers' definitions of each
family, not from pagoda's code: pagoda's logits at every position, from the folder and from the
GGUF file `pagoda convert` writes of it, must match it. The GGUF reading of each family is checked
against llama.cpp elsewhere (tests/conformance/test_logits_peer.cc), so together the two say the
converted file is what llama.cpp's converter would have written."""
import json
import math
import shutil
import subprocess

import numpy as np
import pytest

from conftest import find_tools

gguf = pytest.importorskip("gguf")

# transformers' byte-to-unicode table for byte-level BPE (GPT-2's): printable bytes stand for
# themselves, the others are shifted past 255.
_printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
              + list(range(ord("®"), ord("ÿ") + 1)))
BYTE_CHARS = {}
_n = 0
for _b in range(256):
    if _b in _printable:
        BYTE_CHARS[_b] = chr(_b)
    else:
        BYTE_CHARS[_b] = chr(256 + _n)
        _n += 1

QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
               r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
MERGES = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("Ġ", "a"), ("o", "n"), ("e", "r")]
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHATML = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def byte_level_tokenizer():
    """(tokenizer.json, tokenizer_config.json, number of tokens) of a small Qwen2-style vocabulary."""
    vocab = {BYTE_CHARS[b]: b for b in range(256)}
    for a, b in MERGES:
        vocab[a + b] = len(vocab)
    added = [{"id": len(vocab) + i, "content": s, "single_word": False, "lstrip": False,
              "rstrip": False, "normalized": False, "special": True}
             for i, s in enumerate(SPECIALS)]
    tok = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN2_SPLIT}, "behavior": "Isolated",
             "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
             "use_regex": False}]},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                           "use_regex": False},
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                    "use_regex": False},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": "", "end_of_word_suffix": "",
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": [f"{a} {b}" for a, b in MERGES]},
    }
    config = {"add_bos_token": False, "bos_token": None, "eos_token": "<|im_end|>",
              "pad_token": "<|endoftext|>", "chat_template": CHATML,
              "model_max_length": 256, "tokenizer_class": "Qwen2Tokenizer"}
    return tok, config, len(vocab) + len(SPECIALS)


def write_safetensors(path, tensors, dtype):
    """tensors: {name: float array}, written as F32 or as BF16 (whose values the caller rounded)."""
    header, blobs, offset = {}, [], 0
    for name, a in tensors.items():
        a = np.ascontiguousarray(a, dtype=np.float32)
        if dtype == "BF16" and a.ndim >= 1:
            raw = (a.view(np.uint32) >> 16).astype(np.uint16).tobytes()
        else:
            raw = a.tobytes()
        header[name] = {"dtype": dtype if dtype == "BF16" else "F32", "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little"))
        f.write(text)
        for b in blobs:
            f.write(b)


def bf16_round(a):
    """a rounded to BF16 (nearest, ties to even), still float32."""
    bits = a.astype(np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32)


FAMILIES = {
    # Q/K/V biases, an untied output matrix, vocabulary rows past the tokenizer's (padded).
    "qwen2": dict(model_type="qwen2", hidden=64, ff=128, layers=2, heads=4, kv_heads=2,
                  head_dim=16, vocab=272, tie=False, theta=1e6, bias=True, qk_norm=False,
                  dtype="F32"),
    # A head size (32) other than hidden / heads (16), BF16 weights, tied.
    "qwen3": dict(model_type="qwen3", hidden=64, ff=128, layers=2, heads=4, kv_heads=2,
                  head_dim=32, vocab=266, tie=True, theta=1e6, bias=False, qk_norm=True,
                  dtype="BF16"),
    # Six layers: five sliding-window ones (a window of 6 tokens) and one global.
    "gemma3": dict(model_type="gemma3_text", hidden=64, ff=128, layers=6, heads=4, kv_heads=2,
                   head_dim=32, vocab=None, tie=True, theta=1e6, bias=False, qk_norm=True,
                   dtype="F32", window=6, local_theta=1e4),
}


def make_weights(f, vocab, seed):
    rng = np.random.default_rng(seed)
    gemma = f["model_type"].startswith("gemma")
    h, ff, hd = f["hidden"], f["ff"], f["head_dim"]
    q_dim, kv_dim = f["heads"] * hd, f["kv_heads"] * hd

    def mat(rows, cols, scale=None):
        return rng.normal(0, scale or 1 / math.sqrt(cols), (rows, cols)).astype(np.float32)

    def norm(n):  # transformers' Gemma scales by 1 + w, the others by w
        return rng.normal(0 if gemma else 1, 0.2, n).astype(np.float32)

    w = {"model.embed_tokens.weight": mat(vocab, h, 0.3 if gemma else 1.0),
         "model.norm.weight": norm(h)}
    for l in range(f["layers"]):
        p = f"model.layers.{l}."
        w[p + "input_layernorm.weight"] = norm(h)
        w[p + "self_attn.q_proj.weight"] = mat(q_dim, h)
        w[p + "self_attn.k_proj.weight"] = mat(kv_dim, h)
        w[p + "self_attn.v_proj.weight"] = mat(kv_dim, h)
        w[p + "self_attn.o_proj.weight"] = mat(h, q_dim)
        if f["bias"]:
            for n, d in (("q", q_dim), ("k", kv_dim), ("v", kv_dim)):
                w[p + f"self_attn.{n}_proj.bias"] = rng.normal(0, 0.5, d).astype(np.float32)
        if f["qk_norm"]:
            w[p + "self_attn.q_norm.weight"] = norm(hd)
            w[p + "self_attn.k_norm.weight"] = norm(hd)
        w[p + "post_attention_layernorm.weight"] = norm(h)
        if gemma:
            w[p + "pre_feedforward_layernorm.weight"] = norm(h)
            w[p + "post_feedforward_layernorm.weight"] = norm(h)
        w[p + "mlp.gate_proj.weight"] = mat(ff, h)
        w[p + "mlp.up_proj.weight"] = mat(ff, h)
        w[p + "mlp.down_proj.weight"] = mat(h, ff)
    if not f["tie"]:
        w["lm_head.weight"] = mat(vocab, h)
    if f["dtype"] == "BF16":
        w = {k: bf16_round(v) for k, v in w.items()}
    return w


def hf_config(f, vocab):
    c = {"architectures": ["X"], "model_type": f["model_type"], "hidden_size": f["hidden"],
         "intermediate_size": f["ff"], "num_hidden_layers": f["layers"],
         "num_attention_heads": f["heads"], "num_key_value_heads": f["kv_heads"],
         "head_dim": f["head_dim"], "max_position_embeddings": 256, "rms_norm_eps": 1e-6,
         "rope_theta": f["theta"], "tie_word_embeddings": f["tie"], "vocab_size": vocab,
         "torch_dtype": "bfloat16" if f["dtype"] == "BF16" else "float32"}
    if f["model_type"].startswith("qwen"):
        c.update(use_sliding_window=False, sliding_window=4096, attention_bias=f["bias"])
    if f["model_type"].startswith("gemma"):
        c.update(sliding_window=f["window"], rope_local_base_freq=f["local_theta"],
                 query_pre_attn_scalar=f["head_dim"], hidden_activation="gelu_pytorch_tanh",
                 final_logit_softcapping=None, attn_logit_softcapping=None,
                 sliding_window_pattern=6,
                 layer_types=["full_attention" if (l + 1) % 6 == 0 else "sliding_attention"
                              for l in range(f["layers"])])
    return c


# --- transformers' forward passes, in float64 -----------------------------------------------

def rms_norm(x, w, eps, offset):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * (offset + w)


def rope(x, base):
    """Rotate-halves RoPE (transformers' rotate_half) of x [tokens, heads, dim]."""
    half = x.shape[-1] // 2
    inv = base ** (-np.arange(half) * 2.0 / x.shape[-1])
    ang = np.arange(x.shape[0])[:, None] * inv[None, :]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)


def gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def reference_logits(f, w, ids, rope_fn=rope):
    """`rope_fn(x, base)` rotates q and k (plain RoPE unless a test scales it)."""
    w = {k: v.astype(np.float64) for k, v in w.items()}
    gemma = f["model_type"].startswith("gemma")
    off, eps, hd = (1.0 if gemma else 0.0), 1e-6, f["head_dim"]
    heads, kv_heads, n = f["heads"], f["kv_heads"], len(ids)
    x = w["model.embed_tokens.weight"][ids]
    if gemma:
        x = x * math.sqrt(f["hidden"])
    for l in range(f["layers"]):
        p = f"model.layers.{l}."
        h = rms_norm(x, w[p + "input_layernorm.weight"], eps, off)

        def proj(name, count):
            y = h @ w[p + f"self_attn.{name}_proj.weight"].T
            if f["bias"]:
                y = y + w[p + f"self_attn.{name}_proj.bias"]
            return y.reshape(n, count, hd)

        q, k, v = proj("q", heads), proj("k", kv_heads), proj("v", kv_heads)
        if f["qk_norm"]:
            q = rms_norm(q, w[p + "self_attn.q_norm.weight"], eps, off)
            k = rms_norm(k, w[p + "self_attn.k_norm.weight"], eps, off)
        sliding = gemma and (l + 1) % 6 != 0
        base = f["local_theta"] if sliding else f["theta"]
        q, k = rope_fn(q, base), rope_fn(k, base)
        i, j = np.arange(n)[:, None], np.arange(n)[None, :]
        allowed = j <= i
        if sliding:
            allowed &= i - j < f["window"]
        out = np.zeros((n, heads, hd))
        for hh in range(heads):
            g = hh // (heads // kv_heads)
            s = q[:, hh] @ k[:, g].T / math.sqrt(hd)
            s = np.where(allowed, s, -np.inf)
            s = np.exp(s - s.max(-1, keepdims=True))
            out[:, hh] = (s / s.sum(-1, keepdims=True)) @ v[:, g]
        o = out.reshape(n, heads * hd) @ w[p + "self_attn.o_proj.weight"].T
        if gemma:
            x = x + rms_norm(o, w[p + "post_attention_layernorm.weight"], eps, off)
            h = rms_norm(x, w[p + "pre_feedforward_layernorm.weight"], eps, off)
            gate = gelu_tanh(h @ w[p + "mlp.gate_proj.weight"].T)
        else:
            x = x + o
            h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps, off)
            g_in = h @ w[p + "mlp.gate_proj.weight"].T
            gate = g_in / (1 + np.exp(-g_in))
        m = (gate * (h @ w[p + "mlp.up_proj.weight"].T)) @ w[p + "mlp.down_proj.weight"].T
        if gemma:
            m = rms_norm(m, w[p + "post_feedforward_layernorm.weight"], eps, off)
        x = x + m
    x = rms_norm(x, w["model.norm.weight"], eps, off)
    out = w["model.embed_tokens.weight"] if f["tie"] else w["lm_head.weight"]
    return x @ out.T


# --- the folders ---------------------------------------------------------------------------

def make_folder(path, name, shared_dir, wrapped=False):
    """A Hugging Face folder of family `name`; `wrapped`: Gemma 3 as the multimodal wrapper names
    it (language_model.model.*, a vision tower). Returns (family, weights in plain names, ntok)."""
    f = FAMILIES[name]
    path.mkdir()
    if name == "gemma3":
        # A SentencePiece-style BPE vocabulary, as Gemma's tokenizer.json is.
        src = shared_dir / "models" / "tinystories-656k"
        shutil.copy(src / "tokenizer.json", path / "tokenizer.json")
        shutil.copy(src / "tokenizer_config.json", path / "tokenizer_config.json")
        ntok = len(json.loads((src / "tokenizer.json").read_text())["model"]["vocab"])
        vocab = ntok
    else:
        tok, tok_config, ntok = byte_level_tokenizer()
        (path / "tokenizer.json").write_text(json.dumps(tok))
        (path / "tokenizer_config.json").write_text(json.dumps(tok_config))
        vocab = f["vocab"]
    w = make_weights(f, vocab, seed=sorted(FAMILIES).index(name) + 1)
    config = hf_config(f, vocab)
    stored = dict(w)
    if wrapped:
        config = {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
                  "text_config": config, "vision_config": {"hidden_size": 8},
                  "tie_word_embeddings": True}
        stored = {"language_model." + k: v for k, v in w.items()}
        stored["vision_tower.vision_model.embeddings.patch_embedding.weight"] = (
            np.ones((8, 3, 2, 2), np.float32))
        stored["multi_modal_projector.mm_input_projection_weight"] = np.ones((8, 64), np.float32)
    (path / "config.json").write_text(json.dumps(config))
    write_safetensors(path / "model.safetensors", stored, f["dtype"])
    return f, w, ntok


def pagoda(pagoda_bin, *args, timeout=120):
    return subprocess.run([str(pagoda_bin), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


def prompt_logits(model, ids, backend, vocab):
    tool = find_tools("prompt_logits") / "prompt_logits"
    r = subprocess.run([str(tool), str(model), "--backend", backend, *map(str, ids)],
                       capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr.decode()
    return np.frombuffer(r.stdout, dtype=np.float32).reshape(len(ids), vocab)


# The largest difference from the numpy pass, over every position and token of the 40-token
# sequence, measured on a 2-core AMD EPYC with AVX2 kernels (2026-12-03), the same for the folder
# and its converted file: reference backend 5.2e-7 (qwen2), 4.0e-6 (qwen3), 2.6e-6 (gemma3); CPU
# backend 8.6e-7, 9.7e-6, 3.7e-6. The bound is 3x the largest: F32 sums in another order.
BOUND = 3e-5


@pytest.fixture(scope="module")
def folders(shared_dir, tmp_path_factory):
    d = tmp_path_factory.mktemp("families")
    return {name: (d / name, *make_folder(d / name, name, shared_dir)) for name in FAMILIES}


@pytest.fixture(scope="module")
def converted(pagoda_bin, folders, tmp_path_factory):
    d = tmp_path_factory.mktemp("families_gguf")
    out = {}
    for name, (folder, *_) in folders.items():
        path = d / f"{name}.gguf"
        r = pagoda(pagoda_bin, "convert", folder, "-o", path, "--type", "f32")
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith(f"wrote {path} ({name}, f32): "), r.stdout
        out[name] = path
    return out


@pytest.mark.parametrize("name", sorted(FAMILIES))
@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_folder_and_converted_file_match_transformers_math(folders, converted, name, backend):
    folder, f, w, ntok = folders[name]
    vocab = w["model.embed_tokens.weight"].shape[0]
    ids = np.random.default_rng(7).integers(0, ntok, 40).tolist()
    want = reference_logits(f, w, ids)
    for model in (folder, converted[name]):
        got = prompt_logits(model, ids, backend, vocab)
        diff = np.abs(got - want).max()
        print(f"{name} {backend} {model.name}: largest difference {diff:.3g}")
        assert diff < BOUND, (name, backend, str(model), diff)
        assert (got.argmax(-1) == want.argmax(-1)).all()


def field(reader, key):
    f = reader.fields[key]
    return f.contents() if hasattr(f, "contents") else f.parts[f.data[0]]


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_converted_tensors_are_the_folders(folders, converted, name):
    _, f, w, _ = folders[name]
    reader = gguf.GGUFReader(str(converted[name]))
    assert field(reader, "general.architecture") == name
    assert field(reader, f"{name}.attention.key_length") == f["head_dim"]
    tensors = {t.name: np.asarray(t.data) for t in reader.tensors}
    gemma = name == "gemma3"
    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    layer = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
             "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
             "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm",
             "post_attention_layernorm": "post_attention_norm" if gemma else "ffn_norm",
             "pre_feedforward_layernorm": "ffn_norm", "post_feedforward_layernorm": "post_ffw_norm",
             "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
    expected = set()
    for hf_name, a in w.items():
        if hf_name in names:
            g = names[hf_name]
        else:
            parts = hf_name.split(".")
            rest = ".".join(parts[3:-1])
            g = f"blk.{parts[2]}.{layer[rest]}.{parts[-1]}"
        if gemma and g.endswith("norm.weight"):
            a = a + 1  # GGUF files store Gemma's 1 + w
        expected.add(g)
        got = tensors[g].reshape(a.shape)
        assert np.array_equal(got, a.astype(np.float32)), (hf_name, g)  # no Q/K permutation
    assert set(tensors) == expected


def test_byte_level_tokenizer_is_written_as_qwen2(pagoda_bin, folders, converted):
    reader = gguf.GGUFReader(str(converted["qwen2"]))
    assert field(reader, "tokenizer.ggml.model") == "gpt2"
    assert field(reader, "tokenizer.ggml.pre") == "qwen2"
    assert len(reader.fields["tokenizer.ggml.tokens"].data) == 272  # padded to the embedding
    assert len(reader.fields["tokenizer.ggml.merges"].data) == len(MERGES)
    assert "<|im_start|>" in field(reader, "tokenizer.chat_template")
    for text in ["the then in on a", "Hello, world! 123\n\n  x", "<|im_start|>user\nhi<|im_end|>"]:
        want = pagoda(pagoda_bin, "tokenize", "-m", folders["qwen2"][0], "--special", text)
        assert want.returncode == 0, want.stderr
        got = pagoda(pagoda_bin, "tokenize", "-m", converted["qwen2"], "--special", text)
        assert got.stdout == want.stdout, text


def test_gemma3_multimodal_wrapper_converts_to_the_same_tensors(pagoda_bin, shared_dir, converted,
                                                               tmp_path):
    folder = tmp_path / "gemma3_wrapped"
    make_folder(folder, "gemma3", shared_dir, wrapped=True)
    out = tmp_path / "wrapped.gguf"
    r = pagoda(pagoda_bin, "convert", folder, "-o", out, "--type", "f32")
    assert r.returncode == 0, r.stderr
    plain = {t.name: np.asarray(t.data) for t in gguf.GGUFReader(str(converted["gemma3"])).tensors}
    wrapped = {t.name: np.asarray(t.data) for t in gguf.GGUFReader(str(out)).tensors}
    assert sorted(plain) == sorted(wrapped)  # the vision tower and projector left out
    for name, a in plain.items():
        assert np.array_equal(a, wrapped[name]), name
    run = pagoda(pagoda_bin, "run", "-m", folder, "-p", "Once upon a time", "-n", "8", "--temp", "0")
    want = pagoda(pagoda_bin, "run", "-m", converted["gemma3"], "-p", "Once upon a time", "-n", "8",
                  "--temp", "0")
    assert run.returncode == 0 and want.returncode == 0, run.stderr + want.stderr
    assert run.stdout == want.stdout


def one_line_error(r):
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    return lines[0]


@pytest.mark.parametrize("change, message", [
    ({"sliding_window_pattern": 4}, "sliding_window_pattern 4"),
    ({"layer_types": ["full_attention"] * 6}, "layer_types[0]"),
    ({"rope_local_base_freq": 20000.0}, "rope_local_base_freq 20000"),
    ({"query_pre_attn_scalar": 64}, "query_pre_attn_scalar 64"),
    ({"final_logit_softcapping": 30.0}, "final_logit_softcapping"),
])
def test_gemma3_settings_pagoda_does_not_compute_are_refused(pagoda_bin, folders, tmp_path, change,
                                                           message):
    src = folders["gemma3"][0]
    folder = tmp_path / "changed"
    folder.mkdir()
    config = json.loads((src / "config.json").read_text())
    config.update(change)
    (folder / "config.json").write_text(json.dumps(config))
    for name in ("model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        (folder / name).symlink_to(src / name)
    out = tmp_path / "out.gguf"
    assert message in one_line_error(pagoda(pagoda_bin, "convert", folder, "-o", out))
    assert message in one_line_error(pagoda(pagoda_bin, "run", "-m", folder, "-p", "x", "-n", "1"))
    assert not out.exists()
