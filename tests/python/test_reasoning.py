"""Reasoning end to end through the official `openai`, `anthropic` and `ollama` clients, with the
real chat templates of Qwen3 and Qwen3.5 (tests/data/templates, see PROVENANCE.md) on the
installed Qwen2.5-Coder: the thinking comes back apart from the answer (reasoning_content,
thinking blocks, Ollama's thinking), streaming equals non-streaming, a tool call after the
thinking is still a call, and a thinking budget cuts the thinking after exactly N tokens (counted
from the log-probabilities' tokens) and the model goes on with its answer.

The model does not think by itself, so its thinking is made: with Qwen3's template (the model
must open <think> itself) a grammar forces a thinking output; Qwen3.5's template opens the
thinking in the prompt, and the budget closes it."""
import pathlib

import anthropic
import ollama
import openai
import pytest

from server_util import QWEN, Server, need, post_json

TEMPLATES = pathlib.Path(__file__).resolve().parents[1] / "data" / "templates"
QWEN3 = TEMPLATES / "Qwen-Qwen3-0.6B.jinja"
QWEN35 = TEMPLATES / "Qwen3.5-4B.jinja"
END = "\n</think>\n\n"  # what a spent budget forces
ASK = [{"role": "user", "content": "What is 2+2?"}]
THOUGHT = "the user asks for a sum"
THINKING_GBNF = ('root ::= "<think>\\n' + THOUGHT + '\\n</think>\\n\\n" answer\n'
                 'answer ::= [A-Z] [a-z ]{2,30} "."\n')


def serve(pagoda_bin, template, *args):
    return Server(pagoda_bin, need(QWEN), "-t", "2", "--kv-tokens", "4096", "--max-model-len",
                  1024, "--model-name", "q", "--chat-template", template, *args)


@pytest.fixture(scope="module")
def qwen3(pagoda_bin):
    s = serve(pagoda_bin, QWEN3)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def qwen35(pagoda_bin):
    s = serve(pagoda_bin, QWEN35, "--reasoning-budget", 6)
    yield s
    s.stop()


def oai(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0, timeout=120)


def chat(server, **kw):
    kw.setdefault("messages", ASK)
    kw.setdefault("max_tokens", 40)
    return oai(server).chat.completions.create(model="q", temperature=0, **kw)


def streamed(server, **kw):
    """(reasoning, content, tool calls, finish reason) of a streamed chat."""
    reasoning, content, calls, finish = "", "", [], None
    for chunk in chat(server, stream=True, stream_options={"include_usage": True}, **kw):
        if not chunk.choices:
            assert chunk.usage is not None and chunk.usage.completion_tokens > 0
            continue
        d = chunk.choices[0].delta
        reasoning += getattr(d, "reasoning_content", None) or ""
        content += d.content or ""
        calls += d.tool_calls or []
        finish = chunk.choices[0].finish_reason or finish
    return reasoning, content, calls, finish


def thinking_tokens(tokens, opened_in_prompt):
    """Tokens inside the thinking before the forced end: after the token that completed <think>
    (none when the prompt opened it), up to the first token of END."""
    text = "".join(tokens)
    start = 0
    if not opened_in_prompt:
        start = next(i for i in range(len(tokens)) if "<think>" in "".join(tokens[:i + 1])) + 1
    end = next(k for k in range(len(tokens)) if "".join(tokens[k:]).startswith(END))
    assert END in text
    return end - start


def test_grammar_forced_thinking_is_split(qwen3):
    # Room for the grammar's longest text (the thinking, then up to 31 letters or spaces, each
    # perhaps a token, and the "."): where the model's greedy choice is to pad with spaces (it
    # is on an AVX2 machine, whose sums round differently), 40 tokens ended the answer early.
    kw = {"max_tokens": 80, "extra_body": {"grammar": THINKING_GBNF}}
    r = chat(qwen3, **kw)
    m = r.choices[0].message
    assert m.reasoning_content == THOUGHT
    assert m.content and "<think>" not in m.content and m.content.endswith(".")
    assert streamed(qwen3, **kw) == (m.reasoning_content, m.content, [], r.choices[0].finish_reason)


def test_a_tool_call_after_the_thinking(qwen3):
    tools = [{"type": "function", "function": {
        "name": "get_weather", "parameters": {"type": "object",
                                              "properties": {"city": {"type": "string"}}}}}]
    gbnf = ('root ::= "<think>\\nI will look it up\\n</think>\\n\\n<tool_call>\\n'
            '{\\"name\\": \\"get_weather\\", \\"arguments\\": {\\"city\\": \\"Paris\\"}}'
            '\\n</tool_call>"\n')
    kw = {"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": tools,
          "extra_body": {"grammar": gbnf}}
    r = chat(qwen3, **kw)
    m = r.choices[0].message
    assert m.reasoning_content == "I will look it up"
    assert [c.function.name for c in m.tool_calls] == ["get_weather"]
    assert m.tool_calls[0].function.arguments == '{"city":"Paris"}'
    assert r.choices[0].finish_reason == "tool_calls"
    reasoning, content, calls, finish = streamed(qwen3, **kw)
    assert (reasoning, content, finish) == ("I will look it up", "", "tool_calls")
    assert [c.function.name for c in calls if c.function.name] == ["get_weather"]


@pytest.mark.parametrize("budget", [0, 5])
def test_the_budget_cuts_the_thinking_at_n_tokens(qwen3, budget):
    # The grammar lets the thinking run on; the budget ends it, and the answer follows.
    gbnf = 'root ::= "<think>" ([a-z] [a-z ]*)? "\\n</think>\\n\\n" [a-z] [a-z ]*\n'
    r = chat(qwen3, logprobs=True, max_tokens=30,
             extra_body={"grammar": gbnf, "reasoning_budget": budget})
    tokens = [t.token for t in r.choices[0].logprobs.content]
    assert thinking_tokens(tokens, opened_in_prompt=False) == budget
    m = r.choices[0].message
    assert m.content  # the model went on after the forced end
    assert bool(getattr(m, "reasoning_content", None)) == (budget > 0)
    kw = {"max_tokens": 30, "extra_body": {"grammar": gbnf, "reasoning_budget": budget}}
    assert streamed(qwen3, **kw)[:2] == (getattr(m, "reasoning_content", None) or "", m.content)


def test_a_prompt_that_opens_the_thinking_and_the_server_budget(qwen35):
    r = chat(qwen35, logprobs=True)
    tokens = [t.token for t in r.choices[0].logprobs.content]
    assert thinking_tokens(tokens, opened_in_prompt=True) == 6  # --reasoning-budget 6
    m = r.choices[0].message
    assert m.reasoning_content and m.content
    assert streamed(qwen35)[:2] == (m.reasoning_content, m.content)
    # A request's budget wins over the server's.
    r = chat(qwen35, logprobs=True, extra_body={"reasoning_budget": 2})
    assert thinking_tokens([t.token for t in r.choices[0].logprobs.content], True) == 2
    # enable_thinking false: the template closes the thinking in the prompt, nothing to split.
    r = chat(qwen35, extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    assert getattr(r.choices[0].message, "reasoning_content", None) is None


def test_anthropic_thinking_blocks(qwen35):
    client = anthropic.Anthropic(base_url=qwen35.url, api_key="x", max_retries=0, timeout=120)
    kw = dict(model="q", max_tokens=40, messages=ASK, extra_body={"temperature": 0},
              thinking={"type": "enabled", "budget_tokens": 4})
    r = client.messages.create(**kw)
    assert [b.type for b in r.content] == ["thinking", "text"]
    assert r.content[0].signature == ""  # pagoda signs nothing
    same = chat(qwen35, extra_body={"reasoning_budget": 4}).choices[0].message
    assert (r.content[0].thinking, r.content[1].text) == (same.reasoning_content, same.content)
    with client.messages.stream(**kw) as s:
        events = [e.type for e in s]
        final = s.get_final_message()
    assert [b.model_dump() for b in final.content] == [b.model_dump() for b in r.content]
    assert "content_block_start" in events and "signature" in events
    # Thinking off: the template closes it in the prompt, so no thinking block.
    off = client.messages.create(**{**kw, "thinking": {"type": "disabled"}})
    assert [b.type for b in off.content] == ["text"]
    # An earlier answer's thinking block is taken back as history.
    history = ASK + [{"role": "assistant", "content": [b.model_dump() for b in r.content]},
                     {"role": "user", "content": "And 3+3?"}]
    assert client.messages.create(**{**kw, "messages": history}).content


def test_ollama_think(qwen35):
    client = ollama.Client(host=qwen35.url, timeout=120)
    opts = {"temperature": 0, "num_predict": 40}
    r = client.chat(model="q", messages=ASK, think=True, options=opts)
    assert r.message.thinking and r.message.content
    thinking = content = ""
    for part in client.chat(model="q", messages=ASK, think=True, options=opts, stream=True):
        thinking += part.message.thinking or ""
        content += part.message.content or ""
    assert (thinking, content) == (r.message.thinking, r.message.content)
    off = client.chat(model="q", messages=ASK, think=False, options=opts)
    assert not off.message.thinking and off.message.content
    assert "thinking" in client.show("q").capabilities


def test_reasoning_format_none_leaves_the_thinking_in_the_content(pagoda_bin):
    s = serve(pagoda_bin, QWEN3, "--reasoning-format", "none")
    try:
        m = chat(s, extra_body={"grammar": THINKING_GBNF}).choices[0].message
        assert m.content.startswith("<think>\n" + THOUGHT + "\n</think>")
        assert getattr(m, "reasoning_content", None) is None
    finally:
        s.stop()


def test_budgets_refused_where_they_cannot_work(qwen3):
    status, body = post_json(qwen3, "/v1/completions", {"prompt": "x", "reasoning_budget": 3})
    assert status == 400 and body["error"]["param"] == "reasoning_budget"
    status, body = post_json(qwen3, "/v1/chat/completions",
                             {"messages": ASK, "reasoning_budget": -1})
    assert status == 400 and body["error"]["param"] == "reasoning_budget"
    status, body = post_json(qwen3, "/v1/messages",
                             {"messages": ASK, "max_tokens": 4,
                              "thinking": {"type": "enabled", "budget_tokens": -1}})
    assert status == 400 and "budget_tokens" in body["error"]["message"]


def test_max_completion_tokens(qwen35):
    r = chat(qwen35, max_tokens=None, max_completion_tokens=5)
    assert r.usage.completion_tokens == 5 and r.choices[0].finish_reason == "length"


def test_deepseek_r1_distill_template(pagoda_bin):
    # Its generation prompt opens <think> when enable_thinking is true and closes it at once
    # otherwise.
    s = serve(pagoda_bin, TEMPLATES / "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja")
    try:
        on = {"chat_template_kwargs": {"enable_thinking": True}, "reasoning_budget": 3}
        r = chat(s, logprobs=True, extra_body=on)
        assert thinking_tokens([t.token for t in r.choices[0].logprobs.content], True) == 3
        assert r.choices[0].message.reasoning_content
        off = chat(s, extra_body={"reasoning_budget": 3}).choices[0].message
        assert getattr(off, "reasoning_content", None) is None and off.content
    finally:
        s.stop()


def test_responses_reasoning_items(qwen35):
    client = oai(qwen35)
    kw = dict(model="q", input="What is 2+2?", max_output_tokens=40, temperature=0)
    r = client.responses.create(**kw)
    assert [o.type for o in r.output] == ["reasoning", "message"], r.output
    thinking = r.output[0].content[0].text
    assert thinking and r.output[0].content[0].type == "reasoning_text" and r.output[0].summary == []
    assert "<think>" not in r.output_text and "</think>" not in r.output_text and r.output_text
    assert 0 < r.usage.output_tokens_details.reasoning_tokens < r.usage.output_tokens
    events = list(client.responses.create(stream=True, **kw))
    types = [e.type for e in events]
    assert types.index("response.reasoning_text.delta") < types.index("response.reasoning_text.done")
    assert types.index("response.reasoning_text.done") < types.index("response.output_text.delta")
    assert "".join(e.delta for e in events if e.type == "response.reasoning_text.delta") == thinking
    last = events[-1].response
    assert [o.type for o in last.output] == ["reasoning", "message"]
    assert last.output_text == r.output_text
    # Continued: the stored turn carries its thinking as the template's reasoning_content, the
    # same prompt as the items sent back by hand.
    after = client.responses.create(previous_response_id=r.id, input="And 3+3?", store=False, **{
        k: v for k, v in kw.items() if k != "input"})
    by_hand = client.responses.create(store=False, input=[
        {"role": "user", "content": "What is 2+2?"}, r.output[0].model_dump(exclude_none=True),
        {"role": "assistant", "content": r.output_text}, {"role": "user", "content": "And 3+3?"}],
        **{k: v for k, v in kw.items() if k != "input"})
    assert after.usage.input_tokens == by_hand.usage.input_tokens
    assert after.output_text == by_hand.output_text
