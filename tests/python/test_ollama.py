"""pagoda serve's Ollama API (/api/chat, /api/generate, /api/tags, /api/show, /api/ps,
/api/version) driven by the official `ollama` client: a conversation, streaming equal to
non-streaming, generate (templated and raw), options honoured (stop, num_predict, num_ctx) or
refused by name, format as "json" and as a schema, a tool round trip, the model's description,
Ollama's 404 for another model, and hostile bodies answered 400 in Ollama's error shape."""
import datetime
import json
import urllib.error
import urllib.request

import jsonschema
import ollama
import pytest

from server_util import QWEN, SMOLLM, Server, need

KEY = "sk-test-key"
GREEDY = {"temperature": 0}
# The client's Tool model writes "required" before "properties": in that order here too, so the
# OpenAI path given the same list renders the same prompt.
WEATHER = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "required": ["city"],
                   "properties": {"city": {"type": "string"}}}}}]
PERSON = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"]}


@pytest.fixture(scope="module")
def server(pagoda_bin):
    s = Server(pagoda_bin, need(SMOLLM), "-t", "2", "--kv-tokens", "8192", "--max-model-len",
               1024, "--model-name", "smol", "--api-key", KEY)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    return ollama.Client(host=server.url, headers={"Authorization": f"Bearer {KEY}"}, timeout=120)


@pytest.fixture(scope="module")
def qwen(pagoda_bin):
    s = Server(pagoda_bin, need(QWEN), "-t", "2", "--kv-tokens", "4096", "--max-model-len", 2048,
               "--model-name", "qwen")
    yield s
    s.stop()


def post(server, path, body, key=KEY):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    req = urllib.request.Request(server.url + path, data=data, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def get(server, path):
    req = urllib.request.Request(server.url + path, headers={"Authorization": f"Bearer {KEY}"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def prompt_tokens(server, messages, tools=None, key=KEY):
    """The prompt the OpenAI chat path renders for the same conversation."""
    body = {"messages": messages, **({"tools": tools} if tools else {})}
    status, out = post(server, "/tokenize", body, key)
    assert status == 200, out
    return out["count"]


def chat(client, text, **options):
    return client.chat(model="smol", messages=[{"role": "user", "content": text}],
                       options={**GREEDY, **options})


def check_done(r, limit):
    assert r.done is True and r.done_reason in ("stop", "length")
    assert r.prompt_eval_count > 0 and 0 < r.eval_count <= limit
    for name in ("total_duration", "load_duration", "prompt_eval_duration", "eval_duration"):
        assert isinstance(getattr(r, name), int) and getattr(r, name) >= 0, name
    assert r.total_duration >= r.prompt_eval_duration > 0
    assert r.total_duration >= r.eval_duration
    datetime.datetime.fromisoformat(r.created_at.replace("Z", "+00:00"))


def test_a_conversation(client, server):
    question = [{"role": "user", "content": "What is the capital of France?"}]
    r = client.chat(model="smol", messages=question, options={**GREEDY, "num_predict": 24})
    assert r.model == "smol" and r.message.role == "assistant" and r.message.content
    check_done(r, 24)
    # The same prompt the chat completions path renders.
    assert r.prompt_eval_count == prompt_tokens(server, question)
    follow = question + [{"role": "assistant", "content": r.message.content},
                         {"role": "user", "content": "And of Italy?"}]
    r2 = client.chat(model="smol:latest", messages=follow, options={**GREEDY, "num_predict": 8})
    assert r2.model == "smol:latest" and r2.message.content
    assert r2.prompt_eval_count == prompt_tokens(server, follow) > r.prompt_eval_count


def test_streaming_equals_non_streaming(client):
    messages = [{"role": "user", "content": "Tell me about the sea."}]
    options = {**GREEDY, "num_predict": 20}
    whole = client.chat(model="smol", messages=messages, options=options)
    parts = list(client.chat(model="smol", messages=messages, options=options, stream=True))
    assert all(p.done is False for p in parts[:-1]) and parts[-1].done is True
    assert "".join(p.message.content for p in parts) == whole.message.content
    assert parts[-1].done_reason == whole.done_reason == "length"
    assert parts[-1].eval_count == whole.eval_count == 20
    assert parts[-1].prompt_eval_count == whole.prompt_eval_count
    one = client.generate(model="smol", prompt="Tell me about the sea.", options=options)
    streamed = list(client.generate(model="smol", prompt="Tell me about the sea.", options=options,
                                    stream=True))
    assert "".join(p.response for p in streamed) == one.response == whole.message.content
    assert streamed[-1].done and streamed[-1].eval_count == 20


def test_generate(client, server):
    r = client.generate(model="smol", prompt="What is the capital of France?",
                        options={**GREEDY, "num_predict": 16})
    assert r.response and r.model == "smol"
    check_done(r, 16)
    user = [{"role": "user", "content": "What is the capital of France?"}]
    assert r.prompt_eval_count == prompt_tokens(server, user)
    system = client.generate(model="smol", prompt="What is the capital of France?",
                             system="You are a pirate.", options={**GREEDY, "num_predict": 1})
    assert system.prompt_eval_count == prompt_tokens(
        server, [{"role": "system", "content": "You are a pirate."}] + user)
    # raw: the prompt as it is, no template.
    raw = client.generate(model="smol", prompt="The capital of France is", raw=True,
                          options={**GREEDY, "num_predict": 4})
    assert raw.response and raw.prompt_eval_count < 10


def test_stop_num_predict_and_num_ctx(client):
    free = chat(client, "Count from 1 to 10: 1, 2, 3,", num_predict=30).message.content
    assert "5" in free, free
    stopped = chat(client, "Count from 1 to 10: 1, 2, 3,", num_predict=30, stop=["5"])
    assert stopped.message.content == free[:free.index("5")] and stopped.done_reason == "stop"
    short = chat(client, "Count from 1 to 10: 1, 2, 3,", num_predict=3)
    assert short.eval_count == 3 and short.done_reason == "length"
    # num_ctx within the server's context bounds prompt + output.
    r = chat(client, "Count from 1 to 10: 1, 2, 3,", num_ctx=short.prompt_eval_count + 2)
    assert r.eval_count == 2 and r.done_reason == "length"
    for num_ctx in (short.prompt_eval_count, 4096):
        with pytest.raises(ollama.ResponseError) as e:
            chat(client, "Count from 1 to 10: 1, 2, 3,", num_ctx=num_ctx)
        assert e.value.status_code == 400 and "num_ctx" in e.value.error
    # repeat_penalty is honoured: a strong one changes a greedy answer.
    penalised = chat(client, "Count from 1 to 10: 1, 2, 3,", num_predict=30, repeat_penalty=5.0)
    assert penalised.message.content != free


def test_logprobs(client):
    r = client.chat(model="smol", messages=[{"role": "user", "content": "Hi"}], logprobs=True,
                    top_logprobs=2, options={**GREEDY, "num_predict": 4})
    assert len(r.logprobs) == r.eval_count == 4
    assert "".join(lp.token for lp in r.logprobs) == r.message.content
    assert all(lp.logprob <= 0 and len(lp.top_logprobs) == 2 for lp in r.logprobs)
    # Greedy: each token is its step's most likely one.
    assert all(lp.top_logprobs[0].logprob == lp.logprob for lp in r.logprobs)
    raw = client.generate(model="smol", prompt="The sea is", raw=True, logprobs=True,
                          options={**GREEDY, "num_predict": 3})
    assert len(raw.logprobs) == 3 and not raw.logprobs[0].top_logprobs


def test_format_json_and_schema(client):
    r = client.chat(model="smol", format="json", options={**GREEDY, "num_predict": 64},
                    messages=[{"role": "user",
                               "content": "Describe a cat as a JSON object with keys name and color."}])
    assert r.done_reason == "stop"
    assert isinstance(json.loads(r.message.content), dict)
    g = client.generate(model="smol", format=PERSON, options={**GREEDY, "num_predict": 64},
                        prompt="Give me a person as JSON")
    jsonschema.validate(json.loads(g.response), PERSON)


def test_a_tool_round_trip(qwen):
    client = ollama.Client(host=qwen.url, timeout=120)
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    options = {**GREEDY, "num_predict": 60}
    r = client.chat(model="qwen", messages=messages, tools=WEATHER, options=options)
    calls = r.message.tool_calls
    assert calls and calls[0].function.name == "get_weather" and r.done_reason == "stop"
    assert isinstance(calls[0].function.arguments, dict)
    jsonschema.validate(dict(calls[0].function.arguments), WEATHER[0]["function"]["parameters"])
    streamed = list(client.chat(model="qwen", messages=messages, tools=WEATHER, options=options,
                                stream=True))
    streamed_calls = [c for p in streamed for c in (p.message.tool_calls or [])]
    assert [(c.function.name, dict(c.function.arguments)) for c in streamed_calls] == \
        [(c.function.name, dict(c.function.arguments)) for c in calls]
    # The call and its result go back; the prompt is the one the OpenAI path renders for them.
    back = messages + [r.message, {"role": "tool", "content": "Sunny, 21 degrees.",
                                   "tool_name": "get_weather"}]
    answer = client.chat(model="qwen", messages=back, tools=WEATHER,
                         options={**GREEDY, "num_predict": 1})
    openai = messages + [
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_0", "type": "function",
             "function": {"name": "get_weather", "arguments": json.dumps(dict(calls[0].function.arguments))}}]},
        {"role": "tool", "tool_call_id": "call_0", "name": "get_weather", "content": "Sunny, 21 degrees."}]
    assert answer.prompt_eval_count == prompt_tokens(qwen, openai, WEATHER, key=None)


def test_tags_show_ps_version(client, server):
    tags = client.list()
    assert [m.model for m in tags.models] == ["smol:latest"]
    d = tags.models[0].details
    assert d.format == "gguf" and d.family == "llama" and d.quantization_level == "Q4_1"
    assert d.parameter_size.endswith("M") and tags.models[0].size > 50_000_000
    show = client.show("smol")
    assert "<|im_start|>" in show.template and "completion" in show.capabilities
    assert "tools" in show.capabilities
    assert show.modelinfo["general.architecture"] == "llama"
    ps = client.ps()
    assert ps.models[0].model == "smol:latest" and ps.models[0].context_length == 1024
    assert ps.models[0].expires_at is not None
    assert isinstance(get(server, "/api/version")["version"], str)
    # No prompt: Ollama's way of loading a model, answered at once.
    for body in ({"model": "smol"}, {"model": "smol", "prompt": "", "suffix": ""}):
        status, out = post(server, "/api/generate", body)
        assert status == 200 and out["done"] and out["done_reason"] == "load", out
    status, out = post(server, "/api/chat", {"model": "smol:latest", "messages": []})
    assert status == 200 and out["done_reason"] == "load" and out["model"] == "smol:latest"


@pytest.mark.parametrize("kw, named", [
    ({"options": {"mirostat": 1}}, "options.mirostat"),
    ({"options": {"num_gpu": 1}}, "options.num_gpu"),
    ({"options": {"repeat_last_n": 64}}, "options.repeat_last_n"),
    ({"options": {"temperature": 5}}, "options.temperature"),
    ({"options": {"num_predict": 5000}}, "options.num_predict"),
    ({"think": True}, "think"),
    ({"messages": [{"role": "user", "content": "x", "images": ["AAAA"]}]}, "images"),
])
def test_what_cannot_be_honoured_is_refused(client, kw, named):
    request = {"model": "smol", "messages": [{"role": "user", "content": "x"}]}
    request.update(kw)
    with pytest.raises(ollama.ResponseError) as e:
        client.chat(**request)
    assert e.value.status_code == 400 and named in e.value.error


def test_errors_have_ollamas_shape(client, server):
    with pytest.raises(ollama.ResponseError) as e:
        client.chat(model="nope", messages=[{"role": "user", "content": "x"}])
    assert e.value.status_code == 404 and e.value.error == "model 'nope' not found"
    with pytest.raises(ollama.ResponseError) as e:
        client.show("nope:latest")
    assert e.value.status_code == 404
    with pytest.raises(ollama.ResponseError) as e:
        client.embed(model="smol", input="x")
    assert e.value.status_code == 400 and "--pooling" in e.value.error  # generative: off
    with pytest.raises(ollama.ResponseError) as e:
        client.generate(model="smol", prompt="x", suffix="y")
    assert e.value.status_code == 400 and "suffix" in e.value.error
    # The API key guards these routes as it guards /v1/.
    status, out = post(server, "/api/chat", {"model": "smol", "messages": []}, key=None)
    assert status == 401 and set(out) == {"error"}


@pytest.mark.parametrize("path, body", [
    ("/api/chat", b'{"model": "smol", "messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"),
    ("/api/chat", {"model": "smol", "stream": False,
                   "messages": [{"role": "user", "content": "x"}] * 100_000}),
    ("/api/chat", {"model": "smol", "messages": "hi"}),
    ("/api/chat", {"model": "smol", "messages": [5]}),
    ("/api/chat", {"model": "smol", "messages": [{"role": "user", "content": ["x"]}]}),
    ("/api/chat", {"model": "smol", "messages": [{"role": "assistant", "content": "",
                                                  "tool_calls": [{"function": {"name": "f", "arguments": "{}"}}]}]}),
    ("/api/chat", {"model": "smol", "messages": [{"role": "user", "content": "x"}], "options": [1]}),
    ("/api/chat", {"model": "smol", "messages": [{"role": "user", "content": "x"}], "tools": {"a": 1}}),
    ("/api/chat", {"model": "smol", "messages": [{"role": "user", "content": "x"}], "format": 5}),
    ("/api/chat", {"model": 5, "messages": [{"role": "user", "content": "x"}]}),
    ("/api/generate", {"model": "smol", "prompt": ["x"]}),
    ("/api/generate", {"model": "smol", "prompt": "x", "options": {"num_ctx": "big"}}),
    ("/api/generate", {"model": "smol", "prompt": "x", "stream": "yes"}),
    ("/api/show", [1]),
    # Nothing to generate (a load), but the other fields are still checked.
    ("/api/generate", {"model": "smol", "prompt": "", "options": [1]}),
    ("/api/chat", {"model": "smol", "messages": [], "format": 5}),
    ("/api/chat", {"model": "smol", "messages": [], "top_logprobs": {}}),
    ("/api/chat", {"model": "smol", "options": {"temperature": "hot"}}),
    ("/api/chat", b"not json"),
])
def test_hostile_bodies_are_400(server, path, body):
    status, out = post(server, path, body)
    assert status == 400 and isinstance(out.get("error"), str), (status, out)
