"""The exact text of generated tokens, as the peers give it, through `pagoda run` and the server's
completions and chat routes, streamed and not: on stories260K the strings of llama.cpp's greedy
vectors (" was a little girl", with its leading space); on every other shared and installed model
run and the server print the same string, control tokens are not printed (unless --special),
`top_logprobs` come most likely first, usage counts the prompt tokens served from the prefix
cache, and the model answers to its id, its file name and its stem."""
import json
import subprocess
import urllib.request

import openai
import pytest

from server_util import GEMMA, QWEN, SMOLLM, Server, chat_model, need, post_json


def run_text(pagoda_bin, model, prompt, n, *extra):
    r = subprocess.run([str(pagoda_bin), "run", "-m", str(model), "-p", prompt, "-n", str(n),
                        "--temp", "0", "-t", "2", *extra], capture_output=True, timeout=600)
    assert r.returncode == 0, r.stderr.decode()
    out = r.stdout.decode()
    assert out.startswith(prompt) and out.endswith("\n"), out
    return out[len(prompt):-1]


def served_texts(server, prompt, n):
    """(completion, streamed completion) of the one served model."""
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0, timeout=300)
    model = client.models.list().data[0].id
    whole = client.completions.create(model=model, prompt=prompt, max_tokens=n, temperature=0)
    chunks = client.completions.create(model=model, prompt=prompt, max_tokens=n, temperature=0,
                                       stream=True)
    streamed = "".join(c.choices[0].text for c in chunks if c.choices)
    return whole.choices[0].text, streamed


def test_stories260k_text_is_llama_cpps(pagoda_bin, shared_dir):
    model = shared_dir / "models" / "stories260K.gguf"
    cases = json.loads((shared_dir / "testdata" / "stories260K_greedy.json").read_text())["cases"]
    assert any(c["greedy_text"].startswith(" was a little girl") for c in cases)
    s = Server(pagoda_bin, model, "-t", "2")
    try:
        for c in cases:
            n = len(c["greedy_ids"])
            assert run_text(pagoda_bin, model, c["prompt"], n) == c["greedy_text"], c["prompt"]
            whole, streamed = served_texts(s, c["prompt"], n)
            assert whole == c["greedy_text"] and streamed == c["greedy_text"], c["prompt"]
    finally:
        s.stop()


def models_to_check(shared_dir):
    models = [shared_dir / "models" / "llama-2-tiny-random" / "llama-2-tiny-random.gguf",
              shared_dir / "models" / "tinystories-656k"]
    return models + [m for m in (SMOLLM, GEMMA, QWEN) if m.exists()]


def test_run_and_server_print_the_same_text_on_every_model(pagoda_bin, shared_dir):
    for model in models_to_check(shared_dir):
        prompt = "The capital of France is"
        text = run_text(pagoda_bin, model, prompt, 24)
        s = Server(pagoda_bin, model, "-t", "2", "--kv-cache-gb", "0.25")
        try:
            whole, streamed = served_texts(s, prompt, 24)
        finally:
            s.stop()
        assert text == whole == streamed, (model, text, whole, streamed)


def test_gemma_control_tokens_are_not_text_unless_special(pagoda_bin):
    # At the README's prompt the pretrained Gemma 3 270M emits <start_of_image> (an image marker
    # llama.cpp does not print either).
    model = need(GEMMA)
    plain = run_text(pagoda_bin, model, "The capital of France is", 48)
    special = run_text(pagoda_bin, model, "The capital of France is", 48, "--special")
    assert "<start_of_image>" not in plain
    for marker in ("<start_of_image>", "<end_of_turn>", "<eos>"):
        if marker in special:
            assert special.replace(marker, "").startswith(plain[:8])


def test_chat_route_text_streamed_equals_whole(pagoda_bin):
    model = chat_model()
    s = Server(pagoda_bin, model, "-t", "2", "--kv-cache-gb", "0.25")
    try:
        client = openai.OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0, timeout=300)
        # SmolLM2's template defaults to a system prompt with which it answers in French.
        msgs = [{"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": "What is the capital of France?"}]
        mid = client.models.list().data[0].id
        whole = client.chat.completions.create(model=mid, messages=msgs, temperature=0,
                                               max_tokens=24).choices[0].message.content
        chunks = client.chat.completions.create(model=mid, messages=msgs, temperature=0,
                                                max_tokens=24, stream=True)
        streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert whole == streamed and "Paris" in whole
        assert "<|im_end|>" not in whole
    finally:
        s.stop()


def test_top_logprobs_most_likely_first(pagoda_bin, shared_dir):
    s = Server(pagoda_bin, shared_dir / "models" / "stories260K.gguf", "-t", "1")
    try:
        body = json.dumps({"prompt": "The little dog", "max_tokens": 4, "temperature": 0,
                           "logprobs": 3}).encode()
        req = urllib.request.Request(s.url + "/v1/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            # object_pairs_hook keeps the order the server wrote the keys in.
            out = json.loads(r.read(), object_pairs_hook=list)
        choice = dict(dict(out)["choices"][0])
        for top in dict(choice["logprobs"])["top_logprobs"]:
            values = [v for _, v in top]
            assert values == sorted(values, reverse=True), top
    finally:
        s.stop()


def test_usage_counts_cached_prompt_tokens_and_model_names(pagoda_bin):
    model = need(SMOLLM)
    s = Server(pagoda_bin, model, "-t", "2", "--kv-cache-gb", "0.25")
    try:
        client = openai.OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0, timeout=300)
        ids = [m.id for m in client.models.list().data]
        assert ids == [model.stem], ids  # the file's stem, not its general.name
        system = "You are a careful assistant. " * 40  # about 240 tokens: whole blocks
        msgs = [{"role": "system", "content": system}, {"role": "user", "content": "Hi"}]
        usages = []
        for name in (ids[0], model.name, model.stem):  # the id, the file name, the stem
            r = client.chat.completions.create(model=name, messages=msgs, temperature=0,
                                               max_tokens=2)
            assert r.model == ids[0]
            usages.append(r.usage)
        assert usages[0].prompt_tokens_details.cached_tokens == 0
        assert usages[1].prompt_tokens_details.cached_tokens >= 200, usages[1]
        assert usages[1].prompt_tokens_details.cached_tokens < usages[1].prompt_tokens
    finally:
        s.stop()


def test_developer_role_and_template_fields_on_qwens_template(pagoda_bin):
    """Qwen2.5's template has no developer role: the message is its system prompt (before, the
    template dropped it and printed its default system prompt); reasoning_effort is refused
    (the template does not read it) and chat_template_kwargs reach the template."""
    model = need(QWEN)
    s = Server(pagoda_bin, model, "-t", "2", "--kv-cache-gb", "0.25")
    try:
        def rendered(body):
            status, tokens = post_json(s, "/tokenize", body)
            assert status == 200, tokens
            status, text = post_json(s, "/detokenize", {"tokens": tokens["tokens"]})
            assert status == 200, text
            return text["prompt"]
        msgs = [{"role": "developer", "content": "Answer in one word."},
                {"role": "user", "content": "Capital of France?"}]
        text = rendered({"messages": msgs})
        assert "<|im_start|>system\nAnswer in one word.<|im_end|>" in text, text
        assert "You are Qwen" not in text, text
        assert rendered({"messages": msgs, "chat_template_kwargs": {"enable_thinking": False}}) \
            == text  # a variable this template does not read changes nothing
        status, err = post_json(s, "/v1/chat/completions",
                                {"messages": msgs, "reasoning_effort": "low", "max_tokens": 1})
        assert status == 400 and err["error"]["param"] == "reasoning_effort", err
        status, err = post_json(s, "/v1/chat/completions",
                                {"messages": msgs, "chat_template_kwargs": {"tools": []}})
        assert status == 400 and err["error"]["param"] == "chat_template_kwargs", err
    finally:
        s.stop()
