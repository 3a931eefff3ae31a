"""An independent numpy BERT forward pass over a Hugging Face folder's model.safetensors, written
from transformers' BertModel (embeddings: word + position + token type 0, LayerNorm; each layer:
self-attention over the whole sequence, dense + residual + LayerNorm, intermediate dense with GELU
in its erf form, output dense + residual + LayerNorm) and sentence-transformers' Pooling (mean over
the tokens) and Normalize modules. Computed in float64."""
import json
import math
import pathlib
import struct

import numpy as np

_DTYPES = {"F32": np.float32, "F16": np.float16}


def read_safetensors(path):
    """{name: float64 array} of a .safetensors file (F32 / F16 tensors; others are skipped)."""
    data = pathlib.Path(path).read_bytes()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__" or info["dtype"] not in _DTYPES:
            continue
        begin, end = info["data_offsets"]
        raw = np.frombuffer(data[8 + n + begin:8 + n + end], dtype=_DTYPES[info["dtype"]])
        out[name] = raw.astype(np.float64).reshape(info["shape"])
    return out


def _layer_norm(x, w, b, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w + b


_erf = np.vectorize(math.erf)


def _gelu(x):
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


class Bert:
    def __init__(self, folder):
        folder = pathlib.Path(folder)
        self.cfg = json.loads((folder / "config.json").read_text())
        self.t = read_safetensors(folder / "model.safetensors")

    def hidden(self, ids):
        """The last layer's hidden state of every token, [len(ids), hidden]."""
        t, c = self.t, self.cfg
        eps = c.get("layer_norm_eps", 1e-12)
        heads = c["num_attention_heads"]
        x = (t["embeddings.word_embeddings.weight"][ids]
             + t["embeddings.position_embeddings.weight"][: len(ids)]
             + t["embeddings.token_type_embeddings.weight"][0])
        x = _layer_norm(x, t["embeddings.LayerNorm.weight"], t["embeddings.LayerNorm.bias"], eps)
        for layer in range(c["num_hidden_layers"]):
            p = f"encoder.layer.{layer}."

            def dense(name, v):
                return v @ t[p + name + ".weight"].T + t[p + name + ".bias"]

            n, d = x.shape
            hd = d // heads
            q = dense("attention.self.query", x).reshape(n, heads, hd).transpose(1, 0, 2)
            k = dense("attention.self.key", x).reshape(n, heads, hd).transpose(1, 0, 2)
            v = dense("attention.self.value", x).reshape(n, heads, hd).transpose(1, 0, 2)
            s = q @ k.transpose(0, 2, 1) / math.sqrt(hd)
            s = np.exp(s - s.max(-1, keepdims=True))
            s /= s.sum(-1, keepdims=True)
            a = (s @ v).transpose(1, 0, 2).reshape(n, d)
            x = _layer_norm(dense("attention.output.dense", a) + x,
                            t[p + "attention.output.LayerNorm.weight"],
                            t[p + "attention.output.LayerNorm.bias"], eps)
            h = _gelu(dense("intermediate.dense", x))
            x = _layer_norm(dense("output.dense", h) + x, t[p + "output.LayerNorm.weight"],
                            t[p + "output.LayerNorm.bias"], eps)
        return x

    def embed(self, ids, pooling="mean", normalize=True):
        h = self.hidden(ids)
        v = {"mean": h.mean(0), "cls": h[0], "last": h[-1]}[pooling]
        return v / np.linalg.norm(v) if normalize else v


def cosine(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
