"""LoRA adapters applied unmerged (`run --lora`, model/lora.h): the logits with an adapter equal
those of the base model whose weights numpy merged, W + scale * B @ A, run without one; and a
bad adapter is one clear line.

The adapters are made here with numpy in llama.cpp's GGUF adapter layout (general.type adapter,
adapter.type lora, adapter.lora.alpha, NAME.lora_a [rank, cols] and NAME.lora_b [rows, rank])."""
import concurrent.futures
import json
import subprocess
import urllib.request

import gguf
import numpy as np
import pytest

from conftest import find_tools
from gguf_copy import copy_gguf
from server_util import SMOLLM, Server, need, post_json
from test_convert_families import write_safetensors

IDS = [1, 403, 261, 159, 395, 263, 216, 298, 322, 278, 479, 338, 164, 289, 450, 112]
TARGETS = ["blk.0.attn_q.weight", "blk.0.attn_v.weight", "blk.1.ffn_down.weight",
           "blk.2.attn_output.weight", "blk.4.ffn_up.weight", "output.weight"]


def base_model(shared_dir):
    path = shared_dir / "models" / "stories260K.gguf"
    if not path.exists():
        pytest.skip(f"*** {path} is absent: SKIPPING ***")
    return path


def tensors_of(path):
    return {t.name: np.array(t.data) for t in gguf.GGUFReader(str(path)).tensors}


def write_adapter(path, arch, pairs, alpha, extra=None):
    w = gguf.GGUFWriter(str(path), arch=arch)
    w.add_string("general.type", "adapter")
    w.add_string("adapter.type", "lora")
    w.add_float32("adapter.lora.alpha", alpha)
    for key, value in (extra or {}).items():
        w.add_string(key, value)
    for name, (a, b) in pairs.items():
        w.add_tensor(name + ".lora_a", a.astype(np.float32))
        w.add_tensor(name + ".lora_b", b.astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def random_pairs(base, rank, seed, targets=TARGETS):
    rng = np.random.default_rng(seed)
    weights = tensors_of(base)
    pairs = {}
    for name in targets:
        rows, cols = weights[name].shape
        pairs[name] = (rng.normal(0, 0.3, (rank, cols)), rng.normal(0, 0.3, (rows, rank)))
    return pairs


def merged(base, dst, pairs, scale):
    weights = tensors_of(base)
    replaced = {name: (weights[name].astype(np.float64) + scale * (b @ a)).astype(np.float32)
                for name, (a, b) in pairs.items()}
    copy_gguf(base, dst, replaced)


def prompt_logits(model, backend, *extra):
    tool = find_tools("prompt_logits") / "prompt_logits"
    r = subprocess.run([str(tool), str(model), "--backend", backend, *map(str, extra),
                        *map(str, IDS)], capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr.decode()
    return np.frombuffer(r.stdout, dtype=np.float32).reshape(len(IDS), -1)


# The bound is relative to the largest logit (about 20 here); the adapter moves the logits by
# more than 1 (checked below), so it tells a missing or misplaced product apart from rounding.
# llama.cpp (llama-cpp-python 0.3.36, lora_path / lora_scale 0.5) on the same adapter, alpha 8:
# at most 0.048 from pagoda's logits, against 0.018 for the base model alone (its F16 K/V);
# the adapter's effect there is 20.3, so both read the file and the scale rule alike.
@pytest.mark.parametrize("backend", ["reference", "cpu"])
@pytest.mark.parametrize("alpha,user_scale", [(8.0, 1.0), (0.0, 0.5)])
def test_unmerged_adapter_equals_merged_weights(shared_dir, tmp_path, backend, alpha,
                                                user_scale):
    base = base_model(shared_dir)
    rank = 4
    pairs = random_pairs(base, rank, seed=7)
    adapter = tmp_path / "adapter.gguf"
    write_adapter(adapter, "llama", pairs, alpha)
    scale = user_scale * alpha / rank if alpha else user_scale  # llama.cpp's rule
    merged_path = tmp_path / "merged.gguf"
    merged(base, merged_path, pairs, scale)
    want = prompt_logits(merged_path, backend)
    got = prompt_logits(base, backend, "--lora", adapter, "--lora-scale", user_scale)
    plain = prompt_logits(base, backend)
    assert np.abs(want - plain).max() > 1.0, "the adapter should change the logits"
    assert np.abs(got - want).max() < 1e-4 * max(1.0, np.abs(want).max())


def test_scale_zero_is_the_base_model(shared_dir, tmp_path):
    base = base_model(shared_dir)
    adapter = tmp_path / "adapter.gguf"
    write_adapter(adapter, "llama", random_pairs(base, 2, seed=1), 4.0)
    got = prompt_logits(base, "cpu", "--lora", adapter, "--lora-scale", 0)
    assert np.abs(got - prompt_logits(base, "cpu")).max() < 1e-5


def test_run_with_an_adapter_writes_the_merged_models_text(pagoda_bin, shared_dir, tmp_path):
    base = base_model(shared_dir)
    pairs = random_pairs(base, 4, seed=3)
    adapter = tmp_path / "adapter.gguf"
    write_adapter(adapter, "llama", pairs, 4.0)
    merged_path = tmp_path / "merged.gguf"
    merged(base, merged_path, pairs, 1.0)

    def run(model, *extra):
        r = subprocess.run([str(pagoda_bin), "run", "-m", str(model), "--temp", "0", "-n", "40",
                            *map(str, extra), "-p", "Once upon a time"], capture_output=True,
                           timeout=120)
        assert r.returncode == 0, r.stderr.decode()
        return r.stdout.decode(), r.stderr.decode()

    with_adapter, log = run(base, "--lora", adapter)
    assert "lora: " in log and "6 weights" in log
    assert with_adapter == run(merged_path)[0]
    assert with_adapter != run(base)[0]


def bad_adapter_error(pagoda_bin, base, adapter):
    r = subprocess.run([str(pagoda_bin), "run", "-m", str(base), "--lora", str(adapter), "-n", "1", "-p",
                        "Hi"], capture_output=True, timeout=60)
    assert r.returncode == 1
    lines = r.stderr.decode().strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_bad_adapters_are_one_line_each(pagoda_bin, shared_dir, tmp_path):
    base = base_model(shared_dir)
    pairs = random_pairs(base, 4, seed=5, targets=["blk.0.attn_q.weight"])
    other_arch = tmp_path / "qwen.gguf"
    write_adapter(other_arch, "qwen2", pairs, 4.0)
    assert "an adapter for 'qwen2', the model is 'llama'" in \
        bad_adapter_error(pagoda_bin, base, other_arch)

    a, b = pairs["blk.0.attn_q.weight"]
    wrong_shape = tmp_path / "shape.gguf"
    write_adapter(wrong_shape, "llama", {"blk.0.attn_k.weight": (a, b)}, 4.0)
    assert "'blk.0.attn_k.weight' is 64 x 32 but its lora_a is 64 x 4" in \
        bad_adapter_error(pagoda_bin, base, wrong_shape)

    missing = tmp_path / "missing.gguf"
    write_adapter(missing, "llama", {"blk.9.attn_q.weight": (a, b)}, 4.0)
    assert "which the model does not have" in bad_adapter_error(pagoda_bin, base, missing)

    assert "not 'adapter': not a LoRA adapter file" in bad_adapter_error(pagoda_bin, base, base)

    alora = tmp_path / "alora.gguf"
    write_adapter(alora, "llama", pairs, 4.0, extra={"adapter.alora.invocation_tokens": "x"})
    assert "activated LoRA" in bad_adapter_error(pagoda_bin, base, alora)


# ---- serve --lora NAME=PATH: adapters as model ids, mixed in one step ----

PROMPT = ("Once upon a time, there was a little girl named Lily. She loved to play outside in "
          "the park with her friends.")


def complete(server, model, max_tokens=24):
    status, body = post_json(server, "/v1/completions",
                             {"model": model, "prompt": PROMPT, "max_tokens": max_tokens,
                              "temperature": 0})
    assert status == 200, body
    assert body["model"] == model
    return body["choices"][0]["text"]


@pytest.fixture(scope="module")
def served(pagoda_bin, shared_dir, tmp_path_factory):
    """A server with adapters a and b on stories260K, and a server on each merged file."""
    base = base_model(shared_dir)
    tmp = tmp_path_factory.mktemp("lora")
    servers = {}
    try:
        for name, seed in [("a", 11), ("b", 12)]:
            pairs = random_pairs(base, 4, seed=seed)
            write_adapter(tmp / f"{name}.gguf", "llama", pairs, 4.0)
            merged(base, tmp / f"merged-{name}.gguf", pairs, 1.0)
            servers["merged-" + name] = Server(pagoda_bin, tmp / f"merged-{name}.gguf")
        servers["lora"] = Server(pagoda_bin, base, "--lora", f"a={tmp / 'a.gguf'}", "--lora",
                                 f"b={tmp / 'b.gguf'}")
        yield servers
    finally:
        for s in servers.values():
            s.stop()


def test_served_adapters_answer_as_their_merged_models(served):
    s = served["lora"]
    want = {"stories260K": complete(s, "stories260K"),
            "a": complete(served["merged-a"], "merged-a"),
            "b": complete(served["merged-b"], "merged-b")}
    assert len(set(want.values())) == 3, want
    # Base first: a full block of this prompt is cached under the base model's key, which an
    # adapter's request must not take (its K/V differ).
    assert complete(s, "stories260K") == want["stories260K"]
    assert complete(s, "a") == want["a"]
    assert complete(s, "b") == want["b"]
    # Mixed in flight: each request gets the text it gets alone.
    order = ["a", "stories260K", "b", "b", "a", "stories260K", "a", "b"]
    with concurrent.futures.ThreadPoolExecutor(len(order)) as pool:
        got = list(pool.map(lambda m: complete(s, m), order))
    assert got == [want[m] for m in order]
    # Ollama's route takes the adapter's name, tagged or not.
    status, body = post_json(s, "/api/generate", {"model": "a:latest", "prompt": PROMPT,
                                                  "raw": True, "stream": False,
                                                  "options": {"temperature": 0,
                                                              "num_predict": 24}})
    assert status == 200 and body["response"] == want["a"], body


def test_served_adapters_are_listed_and_unknown_ids_refused(served):
    s = served["lora"]
    with urllib.request.urlopen(s.url + "/v1/models", timeout=10) as r:
        data = json.loads(r.read())["data"]
    assert [m["id"] for m in data] == ["stories260K", "a", "b"]
    assert data[1]["parent"] == "stories260K" and data[1]["root"].endswith("a.gguf")
    with urllib.request.urlopen(s.url + "/v1/models/b", timeout=10) as r:
        assert json.loads(r.read())["parent"] == "stories260K"
    with urllib.request.urlopen(s.url + "/api/tags", timeout=10) as r:
        tags = json.loads(r.read())["models"]
    assert [m["name"] for m in tags] == ["stories260K:latest", "a:latest", "b:latest"]
    assert tags[1]["details"]["parent_model"] == "stories260K:latest"
    status, body = post_json(s, "/v1/completions", {"model": "c", "prompt": "x"})
    assert status == 404 and "serves 'stories260K', 'a', 'b'" in body["error"]["message"]


def test_serve_refuses_bad_lora_options(pagoda_bin, shared_dir, tmp_path):
    base = base_model(shared_dir)
    adapter = tmp_path / "a.gguf"
    write_adapter(adapter, "llama", random_pairs(base, 2, seed=1), 4.0)
    for spec, message in [(f"{adapter}", "give NAME=PATH"),
                          (f"stories260K={adapter}", "the name 'stories260K' is already taken"),
                          (f"x={base}", "not a LoRA adapter file")]:
        r = subprocess.run([str(pagoda_bin), "serve", "-m", str(base), "--port", "0", "--lora",
                            spec], capture_output=True, timeout=60)
        assert r.returncode != 0 and message in r.stderr.decode(), (spec, r.stderr.decode())


# ---- PEFT folders: converted to the GGUF form, Q/K lora_B rows reordered for Llama ----

def hf_to_gguf_rows(w, n_head):
    """llama.cpp's convert_hf_to_gguf.py permute of Llama Q/K rows, written here from its rule:
    within each head, the rows of the two halves interleave."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(
        w.shape)


def write_peft(folder, pairs_hf, rank, alpha, **config):
    folder.mkdir()
    settings = {"peft_type": "LORA", "r": rank, "lora_alpha": alpha, "bias": "none",
                "target_modules": ["q_proj", "k_proj", "v_proj", "down_proj"],
                "use_rslora": False, "use_dora": False, "fan_in_fan_out": False,
                "modules_to_save": None, "rank_pattern": {}, "alpha_pattern": {}, **config}
    (folder / "adapter_config.json").write_text(json.dumps(settings))
    tensors = {}
    for name, (a, b) in pairs_hf.items():
        tensors[f"base_model.model.{name}.lora_A.weight"] = a
        tensors[f"base_model.model.{name}.lora_B.weight"] = b
    write_safetensors(folder / "adapter_model.safetensors", tensors, "F32")


def test_a_peft_folder_runs_as_its_gguf_form(pagoda_bin, shared_dir, tmp_path):
    base = base_model(shared_dir)
    fields = gguf.GGUFReader(str(base)).fields
    heads = int(fields["llama.attention.head_count"].parts[-1][0])
    kv_heads = int(fields["llama.attention.head_count_kv"].parts[-1][0])
    rng = np.random.default_rng(21)
    weights = tensors_of(base)
    hf = {"model.layers.0.self_attn.q_proj": ("blk.0.attn_q.weight", heads),
          "model.layers.1.self_attn.k_proj": ("blk.1.attn_k.weight", kv_heads),
          "model.layers.2.self_attn.v_proj": ("blk.2.attn_v.weight", 0),
          "model.layers.3.mlp.down_proj": ("blk.3.ffn_down.weight", 0),
          "lm_head": ("output.weight", 0)}
    pairs_hf, pairs_gguf = {}, {}
    for name, (target, n_head) in hf.items():
        rows, cols = weights[target].shape
        a, b = rng.normal(0, 0.3, (4, cols)), rng.normal(0, 0.3, (rows, 4))
        pairs_hf[name] = (a, b)
        pairs_gguf[target] = (a, hf_to_gguf_rows(b, n_head) if n_head else b)
    folder = tmp_path / "peft"
    write_peft(folder, pairs_hf, 4, 8)
    gguf_form = tmp_path / "adapter.gguf"
    write_adapter(gguf_form, "llama", pairs_gguf, 8.0)
    want = prompt_logits(base, "cpu", "--lora", gguf_form)
    got = prompt_logits(base, "cpu", "--lora", folder)
    assert np.abs(want - prompt_logits(base, "cpu")).max() > 1.0
    assert np.abs(got - want).max() < 1e-5 * max(1.0, np.abs(want).max())
    # `pagoda convert` writes the same form; run reads either.
    out = tmp_path / "converted.gguf"
    r = subprocess.run([str(pagoda_bin), "convert", str(folder), "--base", str(base), "-o",
                        str(out)], capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr.decode()
    assert "5 weights, rank 4, alpha 8, 2 Q/K lora_B permuted" in r.stdout.decode()
    assert np.abs(prompt_logits(base, "cpu", "--lora", out) - want).max() < \
        1e-5 * max(1.0, np.abs(want).max())


@pytest.mark.parametrize("config,message", [
    ({"use_dora": True}, "DoRA (use_dora) is not supported"),
    ({"use_rslora": True}, "rsLoRA (use_rslora) is not supported"),
    ({"modules_to_save": ["lm_head"]}, "modules_to_save"),
    ({"rank_pattern": {"q_proj": 8}}, "per-module ranks or alphas"),
])
def test_peft_settings_the_gguf_form_cannot_say_are_refused(pagoda_bin, shared_dir, tmp_path,
                                                            config, message):
    base = base_model(shared_dir)
    a, b = np.zeros((4, 64)), np.zeros((64, 4))
    folder = tmp_path / "peft"
    write_peft(folder, {"model.layers.0.self_attn.q_proj": (a, b)}, 4, 8, **config)
    assert message in bad_adapter_error(pagoda_bin, base, folder)
    r = subprocess.run([str(pagoda_bin), "convert", str(folder), "-o", str(tmp_path / "x.gguf")],
                       capture_output=True, timeout=60)
    assert r.returncode == 2 and "give its base model with --base" in r.stderr.decode()


def test_quantize_merges_an_adapter_into_the_file(pagoda_bin, shared_dir, tmp_path):
    base = base_model(shared_dir)
    pairs = random_pairs(base, 4, seed=9)
    adapter = tmp_path / "adapter.gguf"
    write_adapter(adapter, "llama", pairs, 8.0)
    want = tmp_path / "numpy-merged.gguf"
    merged(base, want, pairs, 0.5 * 8.0 / 4)
    out = tmp_path / "merged.gguf"
    r = subprocess.run([str(pagoda_bin), "quantize", "-i", str(base), "-o", str(out), "--type",
                        "f32", "--merge-lora", str(adapter), "--lora-scale", "0.5", "-q"],
                       capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr.decode()
    assert "merged into 6 matrices" in r.stdout.decode()
    expected = prompt_logits(want, "cpu")
    assert np.abs(prompt_logits(out, "cpu") - expected).max() < 1e-4 * np.abs(expected).max()
    assert np.abs(prompt_logits(base, "cpu") - expected).max() > 1.0
    reader = gguf.GGUFReader(str(out))
    assert bytes(reader.fields["quantize.lora.merged"].parts[-1]).decode() == str(adapter)


def test_quantize_refuses_to_merge_into_quantized_weights_silently(pagoda_bin, tmp_path):
    model = need(SMOLLM)
    adapter = tmp_path / "adapter.gguf"
    weights = {t.name: tuple(int(d) for d in t.shape) for t in gguf.GGUFReader(str(model)).tensors}
    cols, rows = weights["blk.0.attn_q.weight"]
    write_adapter(adapter, "llama", {"blk.0.attn_q.weight": (np.zeros((2, cols)),
                                                             np.zeros((rows, 2)))}, 2.0)
    r = subprocess.run([str(pagoda_bin), "quantize", "-i", str(model), "-o",
                        str(tmp_path / "out.gguf"), "--type", "q4_1", "--merge-lora", str(adapter),
                        "-q"], capture_output=True, timeout=120)
    assert r.returncode == 1
    assert "blk.0.attn_q.weight is Q4_1 and merging writes it again as Q4_1" in r.stderr.decode()
