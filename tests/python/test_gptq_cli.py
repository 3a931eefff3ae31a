"""pagoda quantize --gptq through the CLI on stories260K: calibrated on the first half of
tinystories_valid_head.txt, the Q4_0 file is plain GGUF that runs, writes sane greedy text, says
how it was made, and is much closer to the F32 model than round-to-nearest on the second half;
with --awq too it rounds the matrices AWQ scaled."""
import gguf
import pytest

# The same model, text halves and runner as the --awq tests.
from test_awq_cli import halves, kl_to, model, pagoda  # noqa: F401 (fixtures)


@pytest.fixture(scope="module")
def quantized(pagoda_bin, model, halves, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gptq")
    rtn, gptq = tmp / "rtn.gguf", tmp / "gptq.gguf"
    r = pagoda(pagoda_bin, "quantize", "-i", model, "-o", rtn, "--type", "q4_0", "-q")
    assert r.returncode == 0, r.stderr
    r = pagoda(pagoda_bin, "quantize", "-i", model, "-o", gptq, "--type", "q4_0", "--gptq", halves[0],
               "--gptq-ctx", 128, "--gptq-chunks", 32, "-t", 2)
    assert r.returncode == 0, r.stderr
    return rtn, gptq, r


def test_reports_and_records_it(quantized, halves):
    _, gptq, r = quantized
    # 5 layers x q, k, v, attn_output, gate, up; ffn_down's 172-wide rows are no whole blocks of
    # 32 and are written as without --gptq.
    assert "gptq: 32 chunks (4096 tokens), 30 matrices rounded by GPTQ" in r.stdout, r.stdout
    reader = gguf.GGUFReader(gptq)
    f = reader.fields["quantize.gptq.dataset"]
    assert bytes(f.parts[f.data[0]]).decode() == str(halves[0])
    f = reader.fields["quantize.gptq.chunks_count"]
    assert int(f.parts[f.data[0]][0]) == 32
    types = {t.name: t.tensor_type.name for t in reader.tensors}
    assert types["blk.0.attn_q.weight"] == "Q4_0" and types["blk.4.ffn_up.weight"] == "Q4_0"


def test_greedy_text_is_sane(pagoda_bin, quantized):
    _, gptq, _ = quantized
    r = pagoda(pagoda_bin, "run", "-m", gptq, "-p", "Once upon a time", "-n", 32, "--temp", 0, "-t", 1)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("Once upon a time, there was a little"), r.stdout
    words = r.stdout.split()
    assert len(words) >= 20 and sum(w.strip(".,!?\"'").isalpha() for w in words) >= 0.9 * len(words)


def test_closer_to_f32_than_round_to_nearest(pagoda_bin, model, quantized, halves):
    rtn, gptq, _ = quantized

    def kl(path):
        return kl_to(pagoda_bin, path, model, halves[1])

    # Measured on 100 windows with these 32 chunks (2-core Zen 3, 2026-12-03): rtn 0.1067, GPTQ
    # 0.0750 (0.70x); 0.8x is the target for 4-bit methods.
    k_rtn, k_gptq = kl(rtn), kl(gptq)
    assert k_gptq < 0.8 * k_rtn, (k_gptq, k_rtn)


def test_with_awq_rounds_the_scaled_matrices(pagoda_bin, model, quantized, halves, tmp_path):
    rtn, _, _ = quantized
    both = tmp_path / "awq_gptq.gguf"
    r = pagoda(pagoda_bin, "quantize", "-i", model, "-o", both, "--type", "q4_0", "--gptq", halves[0],
               "--gptq-ctx", 128, "--gptq-chunks", 32, "--awq", halves[0], "--awq-ctx", 128,
               "--awq-chunks", 32, "-t", 2, "-q")
    assert r.returncode == 0, r.stderr
    assert "30 matrices rounded by GPTQ" in r.stdout, r.stdout
    fields = gguf.GGUFReader(both).fields
    assert "quantize.awq.dataset" in fields and "quantize.gptq.dataset" in fields

    def kl(path):
        return kl_to(pagoda_bin, path, model, halves[1])

    # GPTQ must see the scaled matrices' inputs (x / s): measured with 64 chunks and 200 windows
    # (2026-12-04), AWQ + GPTQ 0.0706 against GPTQ alone 0.0752 and plain rounding 0.1087.
    k_rtn, k_both = kl(rtn), kl(both)
    assert k_both < 0.75 * k_rtn, (k_both, k_rtn)
