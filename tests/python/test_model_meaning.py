"""Model files whose bytes are all in bounds but whose meaning is broken: `run` and `serve`
refuse them in one line, `inspect` shows them, lists the problems and exits non-zero. Each case
patches one field of a copy of stories260K.gguf in place with the `gguf` package."""
import shutil
import subprocess

import gguf
import pytest


def run(pagoda_bin, *args, timeout=120):
    return subprocess.run([str(pagoda_bin), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


def set_field(reader, key, value):
    field = reader.fields[key]
    field.parts[field.data[0]][0] = value


def context_zero(r):
    set_field(r, "llama.context_length", 0)


def epsilon_zero(r):
    set_field(r, "llama.attention.layer_norm_rms_epsilon", 0.0)


def bos_out_of_range(r):
    set_field(r, "tokenizer.ggml.bos_token_id", 999999)


def overlapping_tensors(r):
    # The second tensor's data moved onto the first one's (an aligned offset inside it).
    first, second = sorted(r.tensors, key=lambda t: t.data_offset)[:2]
    assert first.n_bytes > 32
    base = min(t.field.parts[-1][0] for t in r.tensors)
    second.field.parts[-1][0] = base + 32


def kv_heads_not_dividing(r):
    heads = int(r.fields["llama.attention.head_count"].parts[-1][0])
    set_field(r, "llama.attention.head_count_kv", heads + 1)


CASES = [
    (context_zero, "context length"),
    (epsilon_zero, "norm epsilon"),
    (bos_out_of_range, "BOS token id 999999"),
    (overlapping_tensors, "overlap"),
    (kv_heads_not_dividing, "not a multiple"),
]


@pytest.fixture
def stories(shared_dir):
    return shared_dir / "models" / "stories260K.gguf"


@pytest.mark.parametrize("patch,problem", CASES, ids=[c[0].__name__ for c in CASES])
def test_refused_by_run_and_serve_shown_by_inspect(pagoda_bin, stories, tmp_path, patch, problem):
    bad = tmp_path / "bad.gguf"
    shutil.copy(stories, bad)
    reader = gguf.GGUFReader(bad, "r+")
    patch(reader)
    reader.data.flush()
    del reader

    for cmd in (["run", "-m", bad, "-p", "Once", "-n", "2"], ["serve", "-m", bad, "--port", "0"]):
        r = run(pagoda_bin, *cmd, timeout=60)
        assert r.returncode == 1, (cmd[0], r.stderr)
        lines = [line for line in r.stderr.splitlines() if line.startswith("error:")]
        assert len(lines) == 1 and problem in lines[0] and str(bad) in lines[0], r.stderr

    r = run(pagoda_bin, "inspect", bad)
    assert r.returncode == 1, r.stdout
    assert "problems:" in r.stdout or problem in r.stderr, r.stdout
    assert problem in r.stdout + r.stderr


def test_the_real_files_have_no_problems(pagoda_bin, stories, shared_dir):
    for path in [stories, shared_dir / "models" / "tinystories-656k"]:
        r = run(pagoda_bin, "inspect", path)
        assert r.returncode == 0 and "problems:" not in r.stdout, r.stdout + r.stderr
