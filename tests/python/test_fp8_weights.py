"""FP8_E4M3 weights (pagoda's own type: blocks of 32 E4M3 codes after an F16 scale, type number
0xF8E4) through the real CLI on stories260K (F32): `pagoda quantize --type fp8` writes every
matrix whose rows are whole blocks of 32 in it (the rest F16, as for every 32-block type), with
round-trip errors above Q8_0's and below Q4_0's; the file holds the private type number, which
the gguf package refuses; it runs and inspects, and its token distributions stay close to the
F32 model's (KL well below Q4_0's); with an importance matrix the file still runs and every
tensor's error stays near round to nearest's."""
import json
import re
import struct
import subprocess

import pytest

# quantize: [ 3/48] blk.0.attn_q.weight F32 -> FP8_E4M3, 16.0 KiB -> 4.2 KiB, rel. RMS error 3.2e-02
CONVERTED = re.compile(r"^quantize: \[\s*\d+/\d+\] (\S+) (\w+) -> (\w+), .+, rel\. RMS error (\S+)")
TEXT = "testdata/text/tinystories_valid_head.txt"


@pytest.fixture(scope="module")
def stories(shared_dir):
    path = shared_dir / "models" / "stories260K.gguf"
    if not path.exists():
        pytest.skip(f"*** {path} is absent: SKIPPING FP8 weight tests ***")
    return path


def quantize(pagoda_bin, src, out, type_name, *extra):
    r = subprocess.run([str(pagoda_bin), "quantize", "-i", str(src), "-o", str(out), "--type",
                        type_name, "-t", "2", *map(str, extra)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return r


def converted(stderr):
    """{name: (to, rel. RMS error)} of the tensors quantize converted."""
    out = {}
    for line in stderr.splitlines():
        m = CONVERTED.match(line)
        if m:
            out[m[1]] = (m[3], float(m[4]))
    return out


def gguf_tensor_types(path):
    """{name: type number} from a GGUF file's header, read by hand (the gguf package refuses
    type 0xF8E4)."""
    data = path.read_bytes()
    pos = 8
    version, = struct.unpack_from("<I", data, 4)
    assert version == 3
    num_tensors, num_kv = struct.unpack_from("<QQ", data, pos)
    pos += 16

    def string():
        nonlocal pos
        n, = struct.unpack_from("<Q", data, pos)
        pos += 8 + n
        return data[pos - n:pos].decode()

    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

    def value(kind):
        nonlocal pos
        if kind == 8:
            string()
        elif kind == 9:
            inner, n = struct.unpack_from("<IQ", data, pos)
            pos += 12
            for _ in range(n):
                value(inner)
        else:
            pos += sizes[kind]

    for _ in range(num_kv):
        string()
        kind, = struct.unpack_from("<I", data, pos)
        pos += 4
        value(kind)
    types = {}
    for _ in range(num_tensors):
        name = string()
        n_dims, = struct.unpack_from("<I", data, pos)
        pos += 4 + 8 * n_dims
        types[name], = struct.unpack_from("<I", data, pos)
        pos += 4 + 8
    return types


@pytest.fixture(scope="module")
def files(pagoda_bin, stories, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fp8")
    out = {}
    for recipe in ("fp8", "q8_0", "q4_0"):
        path = tmp / f"stories-{recipe}.gguf"
        out[recipe] = (path, converted(quantize(pagoda_bin, stories, path, recipe).stderr))
    return out


def test_every_whole_block_matrix_is_fp8(files):
    path, tensors = files["fp8"]
    assert tensors, "no converted tensors"
    q8, q4 = files["q8_0"][1], files["q4_0"][1]
    num_fp8 = 0
    for name, (to, err) in tensors.items():
        assert to in ("FP8_E4M3", "F16"), (name, to)
        if to != "FP8_E4M3":
            continue
        num_fp8 += 1
        # E4M3 keeps 3 mantissa bits: a relative error of a few percent, between Q8_0's
        # uniform 8-bit grid and Q4_0's 4-bit one, tensor by tensor (the q4_0 recipe's output
        # matrix is Q8_0, its more-bits type's fallback).
        assert q8[name][1] < err, (name, q8[name][1], err)
        if q4[name][0] == "Q4_0":
            assert err < q4[name][1], (name, err, q4[name][1])
        assert 0.01 < err < 0.05, (name, err)
    assert num_fp8 >= 10


def test_file_holds_the_private_type_number(files):
    path, tensors = files["fp8"]
    types = gguf_tensor_types(path)
    fp8 = {n for n, (to, _) in tensors.items() if to == "FP8_E4M3"}
    assert {n for n, t in types.items() if t == 0xF8E4} == fp8
    gguf = pytest.importorskip("gguf")
    with pytest.raises(Exception):
        gguf.GGUFReader(path)


def test_runs_and_inspects(pagoda_bin, files):
    path, _ = files["fp8"]
    r = subprocess.run([str(pagoda_bin), "run", "-m", str(path), "-p", "Once upon a time", "-n",
                        "16", "--temp", "0", "-t", "2"], capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout.decode().startswith("Once upon a time")
    assert len(r.stdout.decode()) > len("Once upon a time ") + 10
    r = subprocess.run([str(pagoda_bin), "inspect", str(path)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert "FP8_E4M3" in r.stdout


def kl(pagoda_bin, model, ref, shared_dir):
    r = subprocess.run([str(pagoda_bin), "bench", "quality", "-m", str(model), "--ref", str(ref),
                        "-f", str(shared_dir / TEXT), "-c", "128", "--max-windows", "20", "-t",
                        "2", "--json", "-"], capture_output=True, timeout=600)
    assert r.returncode == 0, r.stderr.decode()
    return json.loads(r.stdout)


def test_quality_between_q8_0_and_q4_0(pagoda_bin, files, stories, shared_dir):
    q = {recipe: kl(pagoda_bin, files[recipe][0], stories, shared_dir)
         for recipe in ("fp8", "q4_0")}
    # Measured on these 20 windows: fp8 KL 0.0083, top-1 95.1 %; q4_0 0.086, 84.9 % (q8_0:
    # 0.00077, its uniform 8-bit grid finer than E4M3's 3 mantissa bits).
    assert 0 < q["fp8"]["kl_mean"] < 0.3 * q["q4_0"]["kl_mean"], q
    assert q["fp8"]["top1_agreement_pct"] > q["q4_0"]["top1_agreement_pct"], q


def test_imatrix_weighs_every_matrix(pagoda_bin, stories, shared_dir, tmp_path):
    imatrix = tmp_path / "stories.imatrix.gguf"
    r = subprocess.run([str(pagoda_bin), "imatrix", "-m", str(stories), "-f",
                        str(shared_dir / TEXT), "-c", "128", "--chunks", "8", "-o", str(imatrix),
                        "-t", "2"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "stories-fp8-imatrix.gguf"
    plain = converted(quantize(pagoda_bin, stories, tmp_path / "plain.gguf", "fp8").stderr)
    weighted = converted(quantize(pagoda_bin, stories, out, "fp8", "--imatrix", imatrix).stderr)
    assert weighted.keys() == plain.keys()
    # The search trades plain error for weighted error, but stays close to round to nearest.
    for name, (to, err) in weighted.items():
        assert to == plain[name][0]
        if to == "FP8_E4M3":
            assert err < 1.5 * plain[name][1], (name, err, plain[name][1])
    r = subprocess.run([str(pagoda_bin), "run", "-m", str(out), "-p", "Once upon a time", "-n",
                        "8", "--temp", "0", "-t", "2"], capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr.decode()
