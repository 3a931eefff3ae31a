"""pagoda serve's OpenAI Responses API (/v1/responses) driven by the official `openai` client's
`responses.create` and `responses.stream`: a string input and items, instructions, the same
answer as chat completions, streaming equal to non-streaming with the documented event sequence,
max_output_tokens (status incomplete), a function tool round trip through function_call_output
and previous_response_id, text.format with a JSON schema, stored responses (GET, DELETE, bounded
by --responses-max) and refusals of what the server cannot honour, in OpenAI's error shape."""
import json
import urllib.error
import urllib.request

import jsonschema
import openai
import pytest

from server_util import SMOLLM, Server, need

KEY = "sk-test-key"
GREEDY = {"temperature": 0}
WEATHER = [{"type": "function", "name": "get_weather", "description": "The weather in a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                           "required": ["city"]}}]


@pytest.fixture(scope="module")
def server(pagoda_bin):
    s = Server(pagoda_bin, need(SMOLLM), "-t", "2", "--kv-tokens", "8192", "--max-model-len",
               1024, "--model-name", "smol", "--api-key", KEY, "--responses-max", 4)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0, timeout=120)


def call(server, method, path, body=None):
    req = urllib.request.Request(server.url + path, method=method,
                                 data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json",
                                          "Authorization": "Bearer " + KEY})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read()), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read()), dict(e.headers)


def test_a_string_input_answers_as_chat_completions_does(client):
    r = client.responses.create(model="smol", input="What is the capital of France?",
                                max_output_tokens=24, **GREEDY)
    assert r.object == "response" and r.id.startswith("resp_") and r.model == "smol"
    assert r.status in ("completed", "incomplete")
    assert len(r.output) == 1 and r.output[0].type == "message" and r.output[0].role == "assistant"
    assert r.output_text and r.output[0].content[0].type == "output_text"
    assert r.usage.input_tokens > 0 and 0 < r.usage.output_tokens <= 24
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
    chat = client.chat.completions.create(
        model="smol", max_tokens=24, temperature=0,
        messages=[{"role": "user", "content": "What is the capital of France?"}])
    assert r.output_text == chat.choices[0].message.content
    assert r.usage.input_tokens == chat.usage.prompt_tokens


def test_instructions_and_items(client):
    items = [{"role": "user", "content": [{"type": "input_text", "text": "What is 2 + 2?"}]},
             {"type": "message", "role": "assistant",
              "content": [{"type": "output_text", "text": "4", "annotations": []}]},
             {"role": "user", "content": "And 3 + 3?"}]
    r = client.responses.create(model="smol", input=items, instructions="Answer with a number.",
                                max_output_tokens=8, **GREEDY)
    chat = client.chat.completions.create(
        model="smol", max_tokens=8, temperature=0,
        messages=[{"role": "system", "content": "Answer with a number."},
                  {"role": "user", "content": "What is 2 + 2?"},
                  {"role": "assistant", "content": "4"},
                  {"role": "user", "content": "And 3 + 3?"}])
    assert r.output_text == chat.choices[0].message.content
    assert r.usage.input_tokens == chat.usage.prompt_tokens
    assert r.instructions == "Answer with a number."


def test_streaming_equals_non_streaming(client):
    whole = client.responses.create(model="smol", input="What is 2+2?",
                                    max_output_tokens=100, **GREEDY)
    assert whole.status == "completed" and whole.incomplete_details is None
    with client.responses.stream(model="smol", input="What is 2+2?",
                                 max_output_tokens=100, **GREEDY) as s:
        events = list(s)
        final = s.get_final_response()
    types = [e.type for e in events]
    assert types[:4] == ["response.created", "response.in_progress",
                         "response.output_item.added", "response.content_part.added"]
    assert types[-4:] == ["response.output_text.done", "response.content_part.done",
                          "response.output_item.done", "response.completed"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == whole.output_text == final.output_text
    assert final.usage.output_tokens == whole.usage.output_tokens
    assert final.id != whole.id


def test_max_output_tokens_makes_an_incomplete_response(client):
    whole = client.responses.create(model="smol", input="Tell me about the sea.",
                                    max_output_tokens=20, **GREEDY)
    assert whole.status == "incomplete" and whole.incomplete_details.reason == "max_output_tokens"
    assert whole.output[0].status == "incomplete" and whole.usage.output_tokens == 20
    # Streamed, the last event is response.incomplete (the SDK's stream helper waits for
    # response.completed only, so the events are read as they come).
    events = list(client.responses.create(model="smol", input="Tell me about the sea.",
                                          max_output_tokens=20, stream=True, **GREEDY))
    assert events[-1].type == "response.incomplete"
    last = events[-1].response
    assert last.status == "incomplete" and last.output_text == whole.output_text
    assert last.usage.output_tokens == 20


def test_a_function_tool_round_trip(client):
    r = client.responses.create(model="smol", input="What is the weather in Paris?", tools=WEATHER,
                                tool_choice="required", max_output_tokens=80, **GREEDY)
    calls = [o for o in r.output if o.type == "function_call"]
    assert r.status == "completed" and len(calls) >= 1 and calls[0].name == "get_weather"
    assert calls[0].call_id.startswith("call_") and calls[0].id.startswith("fc_")
    jsonschema.validate(json.loads(calls[0].arguments), WEATHER[0]["parameters"])
    # Streamed, the same call arrives as function_call_arguments events.
    with client.responses.stream(model="smol", input="What is the weather in Paris?",
                                 tools=WEATHER, max_output_tokens=80, **GREEDY,
                                 tool_choice={"type": "function", "name": "get_weather"}) as s:
        types = [e.type for e in s]
        final = s.get_final_response()
    assert "response.function_call_arguments.delta" in types
    assert "response.function_call_arguments.done" in types
    streamed = [o for o in final.output if o.type == "function_call"]
    assert json.loads(streamed[0].arguments) == json.loads(calls[0].arguments)
    # The result goes back with previous_response_id: the stored conversation comes first.
    outputs = [{"type": "function_call_output", "call_id": c.call_id, "output": "Sunny, 21 C."}
               for c in calls]
    answer = client.responses.create(model="smol", previous_response_id=r.id, input=outputs,
                                     tools=WEATHER, tool_choice="none", max_output_tokens=30,
                                     **GREEDY)
    assert answer.previous_response_id == r.id
    assert answer.output[0].type == "message" and answer.output_text
    # The same turn with the history sent in full is the same prompt.
    full = client.responses.create(
        model="smol", tools=WEATHER, tool_choice="none", max_output_tokens=30, store=False,
        input=[{"role": "user", "content": "What is the weather in Paris?"},
               *[c.model_dump(exclude_none=True) for c in calls], *outputs], **GREEDY)
    assert full.usage.input_tokens == answer.usage.input_tokens
    assert full.output_text == answer.output_text


def test_log_probabilities_as_chat_completions_gives_them(client):
    kw = dict(model="smol", input="Name a fruit.", max_output_tokens=6, **GREEDY)
    r = client.responses.create(include=["message.output_text.logprobs"], top_logprobs=2, **kw)
    lp = r.output[0].content[0].logprobs
    chat = client.chat.completions.create(
        model="smol", max_tokens=6, temperature=0, logprobs=True, top_logprobs=2,
        messages=[{"role": "user", "content": "Name a fruit."}])
    expected = chat.choices[0].logprobs.content
    assert len(lp) == len(expected) == r.usage.output_tokens
    for a, b in zip(lp, expected):
        assert a.token == b.token and a.logprob == pytest.approx(b.logprob, abs=1e-4)
        assert [t.token for t in a.top_logprobs] == [t.token for t in b.top_logprobs]
    assert r.top_logprobs == 2
    streamed = [e for e in client.responses.create(include=["message.output_text.logprobs"],
                                                   top_logprobs=2, stream=True, **kw)
                if e.type == "response.output_text.delta"]
    assert [t.token for e in streamed for t in e.logprobs] == [t.token for t in lp]
    # Not asked for: none.
    assert client.responses.create(**kw).output[0].content[0].logprobs == []


def test_text_format_json_schema(client):
    schema = {"type": "object", "properties": {"name": {"type": "string"},
                                               "age": {"type": "integer"}},
              "required": ["name", "age"], "additionalProperties": False}
    r = client.responses.create(model="smol", input="Invent a person.", max_output_tokens=60,
                                text={"format": {"type": "json_schema", "name": "person",
                                                 "schema": schema, "strict": True}}, **GREEDY)
    jsonschema.validate(json.loads(r.output_text), schema)
    assert r.text.format.type == "json_schema"


def test_stored_responses_are_read_deleted_and_bounded(client, server):
    r = client.responses.create(model="smol", input="Hi", max_output_tokens=2,
                                metadata={"topic": "greeting"})
    got = client.responses.retrieve(r.id)
    assert got.id == r.id and got.output_text == r.output_text
    assert got.metadata == {"topic": "greeting"}
    # The client's delete returns nothing, so the body is read raw; the official client's
    # delete is the second one, which the first has made a 404.
    status, body, _ = call(server, "DELETE", "/v1/responses/" + r.id)
    assert status == 200 and body == {"id": r.id, "object": "response", "deleted": True}
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(r.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(r.id)
    # store false: never kept.
    unstored = client.responses.create(model="smol", input="Hi", max_output_tokens=1, store=False)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(unstored.id)
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model="smol", input="x", max_output_tokens=1,
                                previous_response_id=unstored.id)
    assert e.value.body["param"] == "previous_response_id"
    # The server keeps 4 (--responses-max 4): the least recently used goes first.
    ids = [client.responses.create(model="smol", input="Hi", max_output_tokens=1).id
           for _ in range(5)]
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(ids[0])
    for i in ids[1:]:
        assert client.responses.retrieve(i).id == i
    status, _, headers = call(server, "PUT", "/v1/responses/" + ids[1])
    assert status == 405 and "DELETE" in headers["Allow"]


def test_ids_are_not_guessable(client):
    a = client.responses.create(model="smol", input="Hi", max_output_tokens=1, store=False).id
    b = client.responses.create(model="smol", input="Hi", max_output_tokens=1, store=False).id
    assert len(a) == len(b) == len("resp_") + 48
    assert sum(x != y for x, y in zip(a[5:], b[5:])) > 24


@pytest.mark.parametrize("body, param", [
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
     "input[0].content[0].type"),
    ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
    ({"background": True}, "background"),
    ({"include": ["file_search_call.results"]}, "include"),
    ({"top_logprobs": 21}, "top_logprobs"),
    ({"truncation": "auto"}, "truncation"),
    ({"reasoning": {"summary": "auto"}}, "reasoning.summary"),
    ({"input": [{"type": "item_reference", "id": "x"}]}, "input[0].type"),
    ({"prompt": {"id": "pmpt_1"}}, "prompt"),
    ({"max_output_tokens": 0}, "max_output_tokens"),
    ({"text": {"format": {"type": "json_schema", "name": "x"}}}, "text.format.schema"),
    ({"metadata": {"k": 1}}, "metadata"),
    ({"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "[1]"}]},
     "input[0].arguments"),
])
def test_what_cannot_be_honoured_is_refused(server, body, param):
    request = {"model": "smol", "input": "x", "max_output_tokens": 4}
    request.update(body)
    status, answer, _ = call(server, "POST", "/v1/responses", request)
    assert status == 400, answer
    assert answer["error"]["type"] == "invalid_request_error"
    assert answer["error"]["param"] == param, answer
