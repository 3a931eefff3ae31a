"""`pagoda quantize` through the real CLI on stories260K (F32): the per-tensor lines and their
round-trip errors, the summary, and the refusal to requantize an already quantized file unless
--allow-requantize is given."""
import os
import pty
import re
import subprocess

import numpy as np
import pytest

# quantize: [ 3/48] blk.0.attn_q.weight F32 -> Q8_0, 16.0 KiB -> 4.2 KiB, rel. RMS error 3.2e-03
CONVERTED = re.compile(r"^quantize: \[\s*(\d+)/(\d+)\] (\S+) (\w+) -> (\w+), .+ -> .+, "
                       r"rel\. RMS error (\S+)( \(requantized\))?$")
# quantize: [ 2/48] output_norm.weight F32, 256 B, copied
COPIED = re.compile(r"^quantize: \[\s*(\d+)/(\d+)\] (\S+) (\w+), .+, copied$")


@pytest.fixture(scope="module")
def stories(shared_dir):
    path = shared_dir / "models" / "stories260K.gguf"
    if not path.exists():
        pytest.skip(f"*** {path} is absent: SKIPPING pagoda quantize CLI tests ***")
    return path


def quantize(pagoda_bin, src, out, type_name, *extra):
    return subprocess.run([str(pagoda_bin), "quantize", "-i", str(src), "-o", str(out), "--type",
                           type_name, "-t", "2", *extra],
                          capture_output=True, text=True, timeout=120)


def tensor_lines(stderr):
    """{name: (from, to, error, requantized)} from the per-tensor lines; every stderr line that
    is no warning must be one, numbered 1..N in order."""
    tensors, numbers = {}, []
    for line in stderr.splitlines():
        if line.startswith("warning: "):
            continue
        m = CONVERTED.match(line)
        if m:
            tensors[m[3]] = (m[4], m[5], float(m[6]), m[7] is not None)
        else:
            m = COPIED.match(line)
            assert m, f"unexpected stderr line: {line!r}"
            tensors[m[3]] = (m[4], m[4], 0.0, False)
        numbers.append((int(m[1]), int(m[2])))
    assert numbers == [(i + 1, len(numbers)) for i in range(len(numbers))], numbers
    return tensors


@pytest.fixture(scope="module")
def q8(pagoda_bin, stories, tmp_path_factory):
    out = tmp_path_factory.mktemp("q8") / "stories-q8_0.gguf"
    r = quantize(pagoda_bin, stories, out, "q8_0")
    assert r.returncode == 0, r.stderr
    return out, r


def test_f32_to_q8_0_reports_every_tensor(q8, stories):
    """Not refused (the input is F32); one line per tensor whose errors are the ones the files
    give, and a summary naming the worst."""
    gguf = pytest.importorskip("gguf", reason="*** the gguf package is absent: SKIPPING ***")
    out, r = q8
    assert "warning" not in r.stderr and "\r" not in r.stderr and "\033" not in r.stderr
    lines = tensor_lines(r.stderr)
    src = {t.name: t for t in gguf.GGUFReader(stories).tensors}
    dst = {t.name: t for t in gguf.GGUFReader(out).tensors}
    assert set(lines) == set(src)
    worst = max((v[2], k) for k, v in lines.items() if v[0] != v[1])
    for name, (frm, to, error, requantized) in lines.items():
        assert frm == src[name].tensor_type.name and to == dst[name].tensor_type.name, name
        assert not requantized
        w = np.asarray(src[name].data, np.float64).reshape(-1)
        back = gguf.quants.dequantize(dst[name].data, dst[name].tensor_type).astype(np.float64)
        want = np.linalg.norm(w - back.reshape(-1)) / np.linalg.norm(w)
        # Printed with 4 significant digits.
        assert error == pytest.approx(want, rel=2e-3, abs=1e-12), name
        if to == "Q8_0":
            assert 1e-4 < error < 1e-2, (name, error)
    assert lines["blk.0.attn_q.weight"][:2] == ("F32", "Q8_0")
    assert lines["blk.0.attn_norm.weight"][:2] == ("F32", "F32")  # copied
    summary = r.stdout.splitlines()
    assert summary[0].startswith(f"wrote {out} (q8_0): {len(src)} tensors, "), summary
    m = re.fullmatch(r"worst tensor: (\S+) (\w+) -> (\w+), rel\. RMS error (\S+)", summary[1])
    assert m and m[1] == worst[1] and float(m[4]) == worst[0], summary


def test_q4_0_errors_exceed_q8_0(pagoda_bin, stories, q8, tmp_path):
    """F32 -> q4_0 is not refused either, and each matrix's error is larger than in Q8_0."""
    out = tmp_path / "stories-q4_0.gguf"
    r = quantize(pagoda_bin, stories, out, "q4_0")
    assert r.returncode == 0, r.stderr
    assert "warning" not in r.stderr
    q4_lines, q8_lines = tensor_lines(r.stderr), tensor_lines(q8[1].stderr)
    compared = 0
    for name, (frm, to, error, _) in q4_lines.items():
        if to == "Q4_0" and q8_lines[name][1] == "Q8_0":
            assert q8_lines[name][2] < error, (name, q8_lines[name][2], error)
            assert 1e-2 < error < 0.5, (name, error)
            compared += 1
    assert compared >= 10, compared


def test_requantizing_is_refused(pagoda_bin, q8, tmp_path):
    src = q8[0]
    out = tmp_path / "requantized.gguf"
    r = quantize(pagoda_bin, src, out, "q4_0")
    err = r.stderr.strip()
    assert r.returncode == 1, err
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err
    assert str(src) in err and "already quantized (Q8_0)" in err, err
    assert "--allow-requantize" in err and "loses quality" in err, err
    assert re.search(r"tensor (token_embd|output|blk\.\d+\.\w+)\.weight ", err), err
    assert not out.exists() and list(tmp_path.iterdir()) == [], list(tmp_path.iterdir())


def test_allow_requantize(pagoda_bin, q8, tmp_path):
    gguf = pytest.importorskip("gguf", reason="*** the gguf package is absent: SKIPPING ***")
    out = tmp_path / "requantized.gguf"
    r = quantize(pagoda_bin, q8[0], out, "q4_0", "--allow-requantize")
    assert r.returncode == 0, r.stderr
    warnings = [line for line in r.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 1 and "requantizing" in warnings[0], r.stderr
    lines = tensor_lines(r.stderr)
    assert lines["blk.0.attn_q.weight"][:2] == ("Q8_0", "Q4_0")
    assert lines["blk.0.attn_q.weight"][3], "requantized tensors are marked"
    assert lines["blk.0.ffn_down.weight"][:2] == ("F16", "F16")  # 172 columns: F16 in both
    types = {t.name: t.tensor_type.name for t in gguf.GGUFReader(out).tensors}
    assert types["blk.0.attn_q.weight"] == "Q4_0"
    assert "requantized" in r.stdout.splitlines()[0], r.stdout


def test_decoding_and_same_type_are_not_refused(pagoda_bin, q8, tmp_path):
    """Q8_0 -> f32 is an exact decoding (error 0); Q8_0 -> q8_0 changes no tensor's type."""
    r = quantize(pagoda_bin, q8[0], tmp_path / "f32.gguf", "f32")
    assert r.returncode == 0, r.stderr
    lines = tensor_lines(r.stderr)
    assert lines["blk.0.attn_q.weight"] == ("Q8_0", "F32", 0.0, False)
    r = quantize(pagoda_bin, q8[0], tmp_path / "again.gguf", "q8_0")
    assert r.returncode == 0, r.stderr
    assert all(frm == to for frm, to, _, _ in tensor_lines(r.stderr).values())
    assert "worst tensor" not in r.stdout


def test_quiet(pagoda_bin, stories, tmp_path):
    out = tmp_path / "quiet.gguf"
    r = quantize(pagoda_bin, stories, out, "q8_0", "--quiet")
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert r.stdout.startswith(f"wrote {out} (q8_0): ") and "worst tensor: " in r.stdout


def test_terminal_progress(pagoda_bin, stories, tmp_path):
    """On a terminal the bar is redrawn in place and cleared at the end; the lines stay."""
    leader, follower = pty.openpty()
    try:
        r = subprocess.run([str(pagoda_bin), "quantize", "-i", str(stories), "-o",
                            str(tmp_path / "tty.gguf"), "--type", "q4_0", "-t", "2"],
                           stdout=subprocess.PIPE, stderr=follower, timeout=120)
        os.close(follower)
        follower = -1
        chunks = []
        while True:
            try:
                data = os.read(leader, 65536)
            except OSError:  # EIO once the terminal's other end is closed and drained
                break
            if not data:
                break
            chunks.append(data)
    finally:
        if follower >= 0:
            os.close(follower)
        os.close(leader)
    text = b"".join(chunks).decode()
    assert r.returncode == 0, text
    assert "\r\033[Kquantize [" in text and "tensor 1/" in text, text[:500]
    assert text.endswith("\r\033[K"), text[-200:]
    lines = [line.split("\r\033[K")[-1] for line in text.replace("\r\n", "\n").split("\n")]
    assert sum(1 for line in lines if CONVERTED.match(line) or COPIED.match(line)) > 20


def test_help(pagoda_bin):
    r = subprocess.run([str(pagoda_bin), "quantize", "--help"], capture_output=True, text=True)
    assert r.returncode == 0
    for needle in ("--allow-requantize", "--quiet", "--type", "rel", "RMS"):
        assert needle in r.stdout, needle
