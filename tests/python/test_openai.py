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
