"""What the numpy forward passes of the synthetic families share (test_gemma4.py,
test_qwen35.py): a seeded `pagoda synth` file in F32, and its tensors and metadata read back."""
import subprocess

import numpy as np
import gguf


def synth(pagoda_bin, vocab, out, like, seed=1):
    """Writes `pagoda synth --like LIKE --type f32 --seed SEED --vocab VOCAB` to `out`."""
    r = subprocess.run([str(pagoda_bin), "synth", "--like", like, "--type", "f32", "--seed",
                        str(seed), "--vocab", str(vocab), "-o", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr


def read(path):
    """(tensors by name as float64 arrays in row-major order, field(key) -> its value or list)."""
    reader = gguf.GGUFReader(path)
    tensors = {}
    for t in reader.tensors:
        shape = [int(d) for d in reversed(t.shape)]
        tensors[t.name] = np.asarray(t.data, dtype=np.float64).reshape(shape)

    def field(key):
        f = reader.fields[key]
        values = [f.parts[i][0].item() for i in f.data]
        return values if len(values) > 1 or f.types[0] == gguf.GGUFValueType.ARRAY else values[0]
    return tensors, field


def worst_against_vectors(doc, reference_logits, tie_margin=0.0):
    """Largest |numpy - llama.cpp| over every position's recorded top tokens of a committed
    logit-vector document (tests/data/logits), `reference_logits(ids)` giving the numpy pass's
    rows; the argmax must agree except where llama.cpp's top two are within `tie_margin`."""
    worst = 0.0
    for seq in doc["sequences"]:
        mine = reference_logits(seq["ids"])
        for p, top in enumerate(seq["top"]):
            ids, values = [t for t, _ in top], np.array([v for _, v in top])
            worst = max(worst, float(np.abs(mine[p, ids] - values).max()))
            assert mine[p].argmax() == ids[0] or values[0] - values[1] < tie_margin, (p, top[:2])
    return worst
