"""A LoRA adapter of stories260K made from a formula, not a random generator, so that the script
that asks llama.cpp for its logits (scripts/make_lora_vectors.py) and the test that compares
pagoda's with them (test_lora_peer.py) write the same bytes on any machine."""
import gguf
import numpy as np

# Every matrix of every layer that llama.cpp's converter would give an adapter, and the output.
MATRICES = ["attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"]
LAYERS = 5
RANK = 4


def pair(rows, cols, index):
    """A (rank x cols) and B (rows x rank), smooth in their indices, different per matrix."""
    r = np.arange(RANK, dtype=np.float64)[:, None]
    a = 0.3 * np.sin(0.37 * (index + 1) * (r + 1) + 0.11 * np.arange(cols)[None, :])
    b = 0.3 * np.cos(0.23 * (index + 2) * (np.arange(rows)[:, None] + 1) + 0.7 * r.T)
    return a.astype(np.float32), b.astype(np.float32)


def write(path, base, alpha):
    """Writes the adapter for `base` (stories260K.gguf) to `path` in llama.cpp's GGUF form."""
    shapes = {t.name: (int(t.shape[1]), int(t.shape[0])) for t in gguf.GGUFReader(str(base)).tensors
              if len(t.shape) == 2}  # (rows, cols)
    names = [f"blk.{layer}.{m}.weight" for layer in range(LAYERS) for m in MATRICES]
    names.append("output.weight")
    w = gguf.GGUFWriter(str(path), arch="llama")
    w.add_string("general.type", "adapter")
    w.add_string("adapter.type", "lora")
    w.add_float32("adapter.lora.alpha", alpha)
    for index, name in enumerate(names):
        a, b = pair(*shapes[name], index)
        w.add_tensor(name + ".lora_a", a)
        w.add_tensor(name + ".lora_b", b)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
