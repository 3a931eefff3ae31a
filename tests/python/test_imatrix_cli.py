"""pagoda imatrix through the CLI on stories260K: the file is llama.cpp's GGUF imatrix format as
the `gguf` package reads it (keys, names, shapes) with the values llama-imatrix measured
(tests/data/imatrix/stories260K.json); pagoda quantize --imatrix uses it and says so in the
summary and the output's metadata; bad input gives one-line errors."""
import json
import pathlib
import subprocess

import gguf
import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PEER = json.loads((ROOT / "tests/data/imatrix/stories260K.json").read_text())


def pagoda(pagoda_bin, *args):
    return subprocess.run([str(pagoda_bin), *map(str, args)], capture_output=True, text=True,
                          timeout=300)


def field(reader, key):
    f = reader.fields[key]
    if f.types[0] == gguf.GGUFValueType.ARRAY:
        return [bytes(f.parts[i]).decode() for i in f.data]
    value = f.parts[f.data[0]]
    return bytes(value).decode() if f.types[0] == gguf.GGUFValueType.STRING else int(value[0])


@pytest.fixture(scope="module")
def model(shared_dir):
    return shared_dir / "models" / "stories260K.gguf"


@pytest.fixture(scope="module")
def text(shared_dir):
    return shared_dir / PEER["text"]


@pytest.fixture(scope="module")
def imatrix(pagoda_bin, model, text, tmp_path_factory):
    out = tmp_path_factory.mktemp("imatrix") / "stories260K.imatrix.gguf"
    r = pagoda(pagoda_bin, "imatrix", "-m", model, "-f", text, "-c", PEER["ctx"], "--chunks",
               PEER["chunks"], "-o", out, "-t", 2)
    assert r.returncode == 0, r.stderr
    assert f"{out}: 35 weight matrices, 4 chunks of 128 tokens" in r.stdout
    return out


def test_file_is_llama_cpp_format_with_its_values(imatrix, text):
    reader = gguf.GGUFReader(imatrix)
    assert field(reader, "general.type") == "imatrix"
    assert field(reader, "imatrix.datasets") == [str(text)]
    assert field(reader, "imatrix.chunk_count") == 4
    assert field(reader, "imatrix.chunk_size") == 128
    names = [t.name for t in reader.tensors]
    # llama-imatrix's order: entries by name, each's sums then its counts.
    assert names == [n + s for n in sorted(PEER["entries"]) for s in (".in_sum2", ".counts")]
    for t in reader.tensors:
        name, kind = t.name.rsplit(".", 1)
        want = np.array(PEER["entries"][name][kind])
        assert t.tensor_type == gguf.GGMLQuantizationType.F32
        got = np.asarray(t.data, dtype=np.float64).reshape(-1)
        assert got.shape == want.shape, t.name
        np.testing.assert_allclose(got, want, rtol=2e-5, err_msg=t.name)


def test_quantize_uses_it(pagoda_bin, model, imatrix, tmp_path):
    out = tmp_path / "q4_0.gguf"
    r = pagoda(pagoda_bin, "quantize", "-i", model, "-o", out, "--type", "q4_0", "--imatrix",
               imatrix, "-q")
    assert r.returncode == 0, r.stderr
    # Every quantized blk.* matrix has an entry; the token table (and the tied output) has none.
    assert "importance matrix: 30 tensors weighted, 2 without an entry" in r.stdout, r.stdout
    reader = gguf.GGUFReader(out)
    assert field(reader, "quantize.imatrix.entries_count") == 35
    assert field(reader, "quantize.imatrix.chunks_count") == 4
    plain = tmp_path / "plain.gguf"
    assert pagoda(pagoda_bin, "quantize", "-i", model, "-o", plain, "--type", "q4_0", "-q").returncode == 0
    weighted = {t.name: bytes(t.data) for t in reader.tensors}
    differ = [t.name for t in gguf.GGUFReader(plain).tensors
              if t.name.startswith("blk.") and bytes(t.data) != weighted[t.name]]
    assert len(differ) >= 20, differ  # the weights changed the rounding of most matrices


def test_errors_are_one_line(pagoda_bin, model, text, tmp_path):
    r = pagoda(pagoda_bin, "quantize", "-i", model, "-o", tmp_path / "x.gguf", "--type", "q4_0",
               "--imatrix", model)
    assert r.returncode == 1 and "not an importance matrix" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    short = tmp_path / "short.txt"
    short.write_text("Once upon a time")
    r = pagoda(pagoda_bin, "imatrix", "-m", model, "-f", short, "-o", tmp_path / "i.gguf")
    assert r.returncode == 1 and "not enough for one chunk of -c 512" in r.stderr, r.stderr
    r = pagoda(pagoda_bin, "imatrix", "-m", model, "-f", tmp_path / "none.txt", "-o", tmp_path / "i.gguf")
    assert r.returncode == 1 and "none.txt" in r.stderr
