"""pagoda serve's Anthropic Messages API (/v1/messages) driven by the official `anthropic` client:
a conversation, streaming equal to non-streaming, system prompts, stop sequences, the max_tokens
stop reason, a tool round trip with a forced tool_choice, count_tokens, the API key in x-api-key,
and errors in Anthropic's shape (unsupported blocks and fields refused, never dropped)."""
import json
import urllib.error
import urllib.request

import anthropic
import jsonschema
import pytest

from server_util import SMOLLM, Server, need

KEY = "sk-test-key"
# The client (2.x) has no sampling arguments of its own: they go in the body as extras.
GREEDY = {"temperature": 0}
WEATHER = [{"name": "get_weather", "description": "The weather in a city.",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                             "required": ["city"]}}]


@pytest.fixture(scope="module")
def server(pagoda_bin):
    s = Server(pagoda_bin, need(SMOLLM), "-t", "2", "--kv-tokens", "8192", "--max-model-len",
               1024, "--model-name", "smol", "--api-key", KEY)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    # The SDK sends the key as x-api-key and an anthropic-version header.
    return anthropic.Anthropic(base_url=server.url, api_key=KEY, max_retries=0, timeout=120)


def post(server, path, body, headers):
    req = urllib.request.Request(server.url + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json", **headers})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def ask(client, text, **kw):
    kw.setdefault("max_tokens", 16)
    return client.messages.create(model="smol", messages=[{"role": "user", "content": text}],
                                  extra_body=GREEDY, **kw)


def test_a_conversation(client):
    r = ask(client, "What is the capital of France?", max_tokens=24)
    assert r.type == "message" and r.role == "assistant" and r.model == "smol"
    assert r.id.startswith("msg_")
    assert r.stop_reason in ("end_turn", "max_tokens")
    assert len(r.content) == 1 and r.content[0].type == "text" and r.content[0].text
    assert r.usage.input_tokens > 0 and 0 < r.usage.output_tokens <= 24
    # The answer goes back as an assistant turn, content as blocks this time.
    r2 = client.messages.create(
        model="smol", max_tokens=8, extra_body=GREEDY,
        messages=[{"role": "user", "content": [{"type": "text", "text": "What is the capital of France?"}]},
                  {"role": "assistant", "content": r.content[0].text},
                  {"role": "user", "content": "And of Italy?"}])
    assert r2.content[0].text and r2.usage.input_tokens > r.usage.input_tokens


def test_streaming_equals_non_streaming(client):
    whole = ask(client, "Tell me about the sea.", max_tokens=20)
    with client.messages.stream(model="smol", max_tokens=20, extra_body=GREEDY,
                                messages=[{"role": "user", "content": "Tell me about the sea."}]) as s:
        events = [e.type for e in s]
        final = s.get_final_message()
    assert events[0] == "message_start" and events[-1] == "message_stop"
    assert "content_block_start" in events and "content_block_stop" in events
    assert "message_delta" in events
    assert final.content[0].text == whole.content[0].text
    assert final.stop_reason == whole.stop_reason == "max_tokens"
    assert final.usage.output_tokens == whole.usage.output_tokens == 20
    assert final.usage.input_tokens == whole.usage.input_tokens


def test_the_system_prompt_reaches_the_model(client):
    short = ask(client, "Hi", max_tokens=1, system="Be brief.",
                cache_control={"type": "ephemeral"})
    as_string = ask(client, "Hi", max_tokens=1, system="You are a pirate. Answer as one.")
    as_blocks = ask(client, "Hi", max_tokens=1,
                    system=[{"type": "text", "text": "You are a pirate.",
                             "cache_control": {"type": "ephemeral"}},
                            {"type": "text", "text": "Answer as one."}])
    assert as_string.usage.input_tokens > short.usage.input_tokens
    # Blocks are joined by a blank line.
    joined = client.messages.count_tokens(model="smol", messages=[{"role": "user", "content": "Hi"}],
                                          system="You are a pirate.\n\nAnswer as one.")
    assert as_blocks.usage.input_tokens == joined.input_tokens > short.usage.input_tokens


def test_stop_sequences_and_max_tokens(client):
    free = ask(client, "Count from 1 to 10: 1, 2, 3,", max_tokens=30)
    text = free.content[0].text
    assert "5" in text, text
    r = ask(client, "Count from 1 to 10: 1, 2, 3,", max_tokens=30, stop_sequences=["5"])
    assert r.stop_reason == "stop_sequence" and r.stop_sequence == "5"
    assert r.content[0].text == text[:text.index("5")]
    short = ask(client, "Count from 1 to 10: 1, 2, 3,", max_tokens=3)
    assert short.stop_reason == "max_tokens" and short.stop_sequence is None
    assert short.usage.output_tokens == 3


def test_a_tool_round_trip(client):
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    r = client.messages.create(model="smol", max_tokens=80, extra_body=GREEDY, messages=messages,
                               tools=WEATHER, tool_choice={"type": "any"})
    assert r.stop_reason == "tool_use"
    uses = [b for b in r.content if b.type == "tool_use"]
    assert len(uses) >= 1 and uses[0].name == "get_weather"
    jsonschema.validate(uses[0].input, WEATHER[0]["input_schema"])
    # Streamed, the same call arrives as input_json_delta events.
    with client.messages.stream(model="smol", max_tokens=80, extra_body=GREEDY, messages=messages,
                                tools=WEATHER, tool_choice={"type": "tool", "name": "get_weather"}) as s:
        final = s.get_final_message()
    streamed = [b for b in final.content if b.type == "tool_use"]
    assert final.stop_reason == "tool_use" and streamed[0].input == uses[0].input
    # The result goes back and the model answers in text.
    messages += [{"role": "assistant", "content": [u.model_dump() for u in uses]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": u.id,
                                               "content": "Sunny, 21 degrees."} for u in uses]}]
    answer = client.messages.create(model="smol", max_tokens=30, extra_body=GREEDY, messages=messages,
                                    tools=WEATHER, tool_choice={"type": "none"})
    assert answer.content[0].type == "text" and answer.content[0].text
    assert answer.stop_reason in ("end_turn", "max_tokens")


def test_count_tokens(client):
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    counted = client.messages.count_tokens(model="smol", messages=messages, system="Be brief.")
    r = client.messages.create(model="smol", max_tokens=1, messages=messages, system="Be brief.")
    assert counted.input_tokens == r.usage.input_tokens


def test_errors_have_anthropics_shape(client, server):
    with pytest.raises(anthropic.BadRequestError) as e:
        client.messages.create(model="smol", max_tokens=0,
                               messages=[{"role": "user", "content": "x"}])
    assert e.value.status_code == 400
    assert e.value.body["type"] == "error"
    assert e.value.body["error"]["type"] == "invalid_request_error"
    assert "max_tokens" in e.value.body["error"]["message"]
    # max_tokens is required (sent raw: the SDK will not leave it out).
    status, body = post(server, "/v1/messages", {"messages": [{"role": "user", "content": "x"}]},
                        {"x-api-key": KEY})
    assert status == 400 and body["error"]["type"] == "invalid_request_error"
    assert "max_tokens" in body["error"]["message"]
    with pytest.raises(anthropic.NotFoundError) as e:
        client.messages.create(model="claude-nonexistent", max_tokens=4,
                               messages=[{"role": "user", "content": "x"}])
    assert e.value.body["error"]["type"] == "not_found_error"
    bad_key = anthropic.Anthropic(base_url=server.url, api_key="wrong", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as e:
        bad_key.messages.create(model="smol", max_tokens=4, messages=[{"role": "user", "content": "x"}])
    assert e.value.body["error"]["type"] == "authentication_error"
    # The key as a bearer token works too.
    bearer = anthropic.Anthropic(base_url=server.url, auth_token=KEY, max_retries=0)
    assert bearer.messages.create(model="smol", max_tokens=1,
                                  messages=[{"role": "user", "content": "x"}]).usage.output_tokens == 1


@pytest.mark.parametrize("body, named", [
    ({"messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]}]},
     "image"),
    ({"thinking": {"type": "enabled", "budget_tokens": 1024}}, "thinking"),
    ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "server tools"),
    ({"extra": {"top_logprobs": 3}}, "top_logprobs"),
    ({"extra": {"temperature": 1.5}}, "temperature"),
    ({"messages": [{"role": "system", "content": "x"}]}, "role"),
])
def test_what_cannot_be_honoured_is_refused(client, body, named):
    request = {"model": "smol", "max_tokens": 4, "messages": [{"role": "user", "content": "x"}]}
    request.update(body)
    extra = request.pop("extra", None)
    with pytest.raises(anthropic.BadRequestError) as e:
        client.messages.create(**request, extra_body=extra)
    assert e.value.body["error"]["type"] == "invalid_request_error"
    assert named in e.value.body["error"]["message"]


def test_a_stream_with_tools_but_no_call_is_plain_text(client):
    with client.messages.stream(model="smol", max_tokens=12, extra_body=GREEDY, tools=WEATHER,
                                messages=[{"role": "user", "content": "Say hello."}]) as s:
        final = s.get_final_message()
    assert final.stop_reason in ("end_turn", "max_tokens", "tool_use")
    assert final.content
