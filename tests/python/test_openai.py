"""The official `openai` client against a running `glint serve`.

GLINT_URL is the server's base URL (e.g. http://127.0.0.1:8080/v1); .ci/run
starts the server, runs these, and stops it.
"""

import os

import httpx
import openai
import pytest

URL = os.environ.get("GLINT_URL", "http://127.0.0.1:8080/v1")


@pytest.fixture(scope="module")
def client():
    return openai.OpenAI(base_url=URL, api_key="unused", timeout=120)


def model_id(client):
    models = client.models.list()
    assert len(models.data) == 1
    return models.data[0].id


def test_chat_whole_and_streamed_agree(client):
    kw = dict(
        model=model_id(client),
        messages=[{"role": "user", "content": "Name three colors."}],
        max_tokens=16,
        temperature=0,
    )
    whole = client.chat.completions.create(**kw)
    text = whole.choices[0].message.content
    assert whole.choices[0].message.role == "assistant"
    assert text
    assert whole.choices[0].finish_reason in ("stop", "length")
    assert whole.usage.total_tokens == whole.usage.prompt_tokens + whole.usage.completion_tokens

    chunks = list(
        client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw)
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == text
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens


def test_completions(client):
    r = client.completions.create(
        model=model_id(client), prompt="The capital of France is", max_tokens=8, temperature=0
    )
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 8
    again = client.completions.create(
        model=model_id(client), prompt="The capital of France is", max_tokens=8, temperature=0
    )
    assert again.choices[0].text == r.choices[0].text
    # The second run reuses the cached prompt (all but its last token).
    assert again.usage.prompt_tokens_details.cached_tokens == again.usage.prompt_tokens - 1


def test_errors_have_the_openai_shape(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(
            model=model_id(client), messages=[{"role": "user", "content": "x"}], max_tokens=-1
        )
    assert e.value.status_code == 400
    r = httpx.post(URL + "/chat/completions", content=b"{oops", timeout=30)
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["code"] == 400 and err["type"] == "invalid_request_error" and err["message"]


# A turn's new tokens: the last reply as the template renders it, the new
# user message, and the template's markers around both (about 30 with
# SmolLM2's); everything before is the previous turn's prompt, cached.
MAX_PREFILL_PER_TURN = 64


def test_a_long_conversation_prefills_only_each_new_turn(client):
    messages = [{"role": "system", "content": "You are a helpful assistant. Answer briefly."}]
    questions = [
        "What is the capital of France?",
        "And of Italy?",
        "Which of the two is larger?",
        "Name a river in the first one.",
        "How long is it, roughly?",
        "Name a famous bridge over it.",
        "When was it built?",
        "Who designed it?",
        "Name a museum near it.",
        "Thanks. Summarize our talk in one line.",
    ]
    prompt_tokens = []
    for turn, q in enumerate(questions):
        messages.append({"role": "user", "content": q})
        r = client.chat.completions.create(
            model=model_id(client), messages=messages, max_tokens=16, temperature=0
        )
        u = r.usage
        cached = u.prompt_tokens_details.cached_tokens
        prefilled = u.prompt_tokens - cached
        if turn > 0:
            assert cached > 0, (turn, u)
            assert prefilled < MAX_PREFILL_PER_TURN, (turn, u)
            assert u.prompt_tokens > prompt_tokens[-1], (turn, u)
            # The whole previous prompt is found in the cache (its reply too,
            # unless it re-tokenizes differently), all but the one token a
            # prompt always decodes at most.
            assert cached >= prompt_tokens[-1] - 1, (turn, u)
        prompt_tokens.append(u.prompt_tokens)
        messages.append({"role": "assistant", "content": r.choices[0].message.content})
    # The prompt grew by more than the per-turn bound, so the flat prefill
    # is the cache's doing, not a short conversation.
    assert prompt_tokens[-1] - prompt_tokens[0] > 2 * MAX_PREFILL_PER_TURN, prompt_tokens


def test_responses_whole_and_streamed(client):
    kw = dict(
        model=model_id(client),
        instructions="Answer briefly.",
        input="Name a primary colour.",
        max_output_tokens=12,
        temperature=0,
    )
    whole = client.responses.create(**kw)
    assert whole.output_text
    assert 0 < whole.usage.output_tokens <= 12
    assert whole.usage.total_tokens == whole.usage.input_tokens + whole.usage.output_tokens
    # The same request as chat gives the same text.
    chat = client.chat.completions.create(
        model=model_id(client),
        messages=[
            {"role": "system", "content": "Answer briefly."},
            {"role": "user", "content": "Name a primary colour."},
        ],
        max_tokens=12,
        temperature=0,
    )
    assert whole.output_text == chat.choices[0].message.content

    deltas = []
    completed = None
    for ev in client.responses.create(stream=True, **kw):
        if ev.type == "response.output_text.delta":
            deltas.append(ev.delta)
        elif ev.type == "response.completed":
            completed = ev.response
    assert "".join(deltas) == whole.output_text
    assert completed is not None and completed.output_text == whole.output_text


def test_json_schema_response_format_gives_parseable_json(client):
    import json

    schema = {
        "type": "object",
        "properties": {"name": {"type": "string", "maxLength": 16}, "age": {"type": "integer"}},
        "required": ["name", "age"],
    }
    r = client.chat.completions.create(
        model=model_id(client),
        messages=[{"role": "user", "content": "Invent a person."}],
        response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": schema}},
        max_tokens=64,
        temperature=1.0,
        seed=11,
    )
    assert r.choices[0].finish_reason == "stop"
    person = json.loads(r.choices[0].message.content)
    assert set(person) == {"name", "age"}
    assert isinstance(person["name"], str) and len(person["name"]) <= 16
    assert isinstance(person["age"], int)
    # A schema that is not one: 400.
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(
            model=model_id(client),
            messages=[{"role": "user", "content": "Hi"}],
            response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "hiccup"}}},
            max_tokens=4,
        )


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"location": {"type": "string", "maxLength": 24}},
            "required": ["location"],
        },
    },
}


def test_tool_call_round_trip(client):
    import json

    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    kw = dict(model=model_id(client), tools=[WEATHER], tool_choice="required", max_tokens=64, temperature=0)
    r = client.chat.completions.create(messages=messages, **kw)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    call = choice.message.tool_calls[0]
    assert call.id and call.type == "function"
    assert call.function.name == "get_weather"
    assert isinstance(json.loads(call.function.arguments)["location"], str)

    # Streamed, the client's deltas carry the same call.
    chunks = list(client.chat.completions.create(messages=messages, stream=True, **kw))
    deltas = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert deltas and deltas[0].function.name == "get_weather"
    assert "".join(d.function.arguments or "" for d in deltas) == call.function.arguments
    assert not "".join(c.choices[0].delta.content or "" for c in chunks if c.choices).count("<tool_call>")

    # The call and its result go back; the model answers in text.
    messages.append(choice.message.model_dump(exclude_none=True))
    messages.append({"role": "tool", "tool_call_id": call.id, "content": "12 C and raining"})
    again = client.chat.completions.create(
        model=model_id(client), messages=messages, tools=[WEATHER], max_tokens=16, temperature=0
    )
    assert again.choices[0].message.content


def test_embeddings_through_the_client():
    """`--embedding --pooling mean` (GLINT_EMBED_URL, a second server):
    unit vectors, one per input, the same text the same vector, base64
    the same numbers."""
    import base64
    import math
    import struct

    client = openai.OpenAI(base_url=os.environ["GLINT_EMBED_URL"], api_key="unused", timeout=120)
    texts = ["The cat sat on the mat.", "A cat is sitting on a mat.", "Stock prices fell sharply."]
    r = client.embeddings.create(model=model_id(client), input=texts)
    assert [d.index for d in r.data] == [0, 1, 2]
    vecs = [d.embedding for d in r.data]
    for v in vecs:
        assert abs(math.sqrt(sum(x * x for x in v)) - 1.0) < 1e-3
    cos = lambda a, b: sum(x * y for x, y in zip(a, b))
    assert cos(vecs[0], vecs[1]) > cos(vecs[0], vecs[2])
    assert r.usage.prompt_tokens > 0
    again = client.embeddings.create(model=model_id(client), input=texts[0], encoding_format="base64")
    raw = again.data[0].embedding
    if isinstance(raw, str):
        raw = list(struct.unpack(f"<{len(base64.b64decode(raw)) // 4}f", base64.b64decode(raw)))
    assert max(abs(x - y) for x, y in zip(raw, vecs[0])) < 1e-5
