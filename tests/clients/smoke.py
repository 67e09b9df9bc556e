"""The real openai and ollama Python packages against a running gateway.

Run by tests/it/python_clients.rs, which starts the gateway in front of the scripted
upstream (whose every answer is "Hello from upstream"). Each check asserts what the
client hands to its user, not only that no exception was raised.

Usage: python smoke.py BASE_URL UPSTREAM_MODEL
"""

import asyncio
import os
import sys

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network at import

import httpx
import litellm
import ollama
import openai

BASE, UPSTREAM_MODEL = sys.argv[1], sys.argv[2]
ANSWER = "Hello from upstream"
failures = []


def check(name, fn):
    try:
        fn()
        print(f"ok   {name}")
    except Exception as e:  # noqa: BLE001 - report every failure, then exit non-zero
        failures.append(name)
        print(f"FAIL {name}: {type(e).__name__}: {e}")


oa = openai.OpenAI(base_url=f"{BASE}/v1", api_key="sk-anything", max_retries=0)
user = [{"role": "user", "content": "What is a closure?"}]


def openai_models():
    ids = [m.id for m in oa.models.list()]
    assert "brunix" in ids and UPSTREAM_MODEL in ids, ids
    assert oa.models.retrieve("brunix").id == "brunix"


def openai_chat():
    r = oa.chat.completions.create(model="brunix", messages=user)
    assert r.choices[0].message.content == ANSWER, r
    assert r.choices[0].finish_reason == "stop"
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens > 0


def openai_stream_with_usage():
    stream = oa.chat.completions.create(
        model="brunix", messages=[{"role": "system", "content": "terse"}] + user,
        stream=True, stream_options={"include_usage": True})
    text, finish, usage = "", None, None
    for chunk in stream:
        if chunk.usage:
            usage = chunk.usage
        for c in chunk.choices:
            text += c.delta.content or ""
            finish = c.finish_reason or finish
    assert text == ANSWER, text
    assert finish == "stop"
    assert usage is not None and usage.completion_tokens > 0


def openai_content_parts():
    r = oa.chat.completions.create(model="brunix", messages=[{"role": "user", "content": [
        {"type": "text", "text": "part one"}, {"type": "text", "text": "part two"}]}])
    assert r.choices[0].message.content == ANSWER


def openai_unknown_model():
    try:
        oa.chat.completions.create(model="no-such-model", messages=user)
    except openai.NotFoundError as e:
        assert "no-such-model" in str(e), e
        assert e.body["code"] == "model_not_found", e.body
    else:
        raise AssertionError("expected NotFoundError")


def openai_bad_request():
    try:
        oa.chat.completions.create(model="brunix", messages=[])
    except openai.BadRequestError as e:
        assert "messages" in str(e), e
    else:
        raise AssertionError("expected BadRequestError")


def openai_async_stream():
    async def run():
        client = openai.AsyncOpenAI(base_url=f"{BASE}/v1", api_key="k", max_retries=0)
        stream = await client.chat.completions.create(model=UPSTREAM_MODEL, messages=user, stream=True)
        return "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert asyncio.run(run()) == ANSWER


def openai_limits_and_stop():
    r = oa.chat.completions.create(model="brunix", messages=user, max_tokens=2)
    assert r.choices[0].message.content == "Hello from", r
    assert r.choices[0].finish_reason == "length"
    r = oa.chat.completions.create(model=UPSTREAM_MODEL, messages=user, stop=[" upstream"])
    assert r.choices[0].message.content == "Hello from", r
    assert r.choices[0].finish_reason == "stop"


def openai_async_whole():
    async def run():
        client = openai.AsyncOpenAI(base_url=f"{BASE}/v1", api_key="k", max_retries=0)
        return await client.chat.completions.create(model="brunix", messages=user)
    r = asyncio.run(run())
    assert r.choices[0].message.content == ANSWER and r.model == "brunix"


def letters(text):
    v = [0.0] * 26
    for c in text.lower():
        if "a" <= c <= "z":
            v[ord(c) - 97] += 1
    n = sum(x * x for x in v) ** 0.5
    return [x / n for x in v]


def near(a, b):
    return len(a) == len(b) and all(abs(x - y) < 1e-6 for x, y in zip(a, b))


def openai_embeddings():
    # The SDK asks for base64 and decodes it itself.
    r = oa.embeddings.create(model="nomic-embed-text", input=["abc", "hello"])
    assert [d.index for d in r.data] == [0, 1]
    assert near(r.data[1].embedding, letters("hello")), r.data[1].embedding[:5]
    r = oa.embeddings.create(model="nomic-embed-text", input="abc", encoding_format="float")
    assert near(r.data[0].embedding, letters("abc"))


def openai_completions():
    r = oa.completions.create(model="brunix", prompt="def add(a, b):", max_tokens=8)
    assert r.choices[0].text == ANSWER


ol = ollama.Client(host=BASE)


def httpx_raw_sse():
    # What a hand-written client sees: SSE frames, each "data: {json}", then [DONE].
    body = {"model": "brunix", "stream": True, "messages": user}
    with httpx.stream("POST", f"{BASE}/v1/chat/completions", json=body, timeout=20) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        data = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    assert data[-1] == "[DONE]", data
    import json
    chunks = [json.loads(d) for d in data[:-1]]
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks) == ANSWER
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


def ollama_list_show_ps():
    names = [m.model for m in ol.list().models]
    assert "brunix:latest" in names and UPSTREAM_MODEL in names, names
    info = ol.show("brunix")
    assert "completion" in (info.capabilities or []), info
    assert [m.model for m in ol.ps().models] == ["brunix:latest"]


def ollama_chat_stream():
    parts = list(ol.chat(model="brunix", messages=user, stream=True))
    assert "".join(p.message.content for p in parts) == ANSWER
    assert parts[-1].done and parts[-1].done_reason == "stop"
    assert parts[-1].eval_count > 0


def ollama_chat_whole():
    r = ol.chat(model="brunix:latest", messages=user, stream=False, options={"num_predict": 32})
    assert r.message.content == ANSWER and r.done


def ollama_generate():
    r = ol.generate(model="brunix", prompt="hello", stream=False)
    assert r.response == ANSWER and r.done
    assert "".join(p.response for p in ol.generate(model="brunix", prompt="hello", stream=True)) == ANSWER


def ollama_embed():
    r = ol.embed(model="nomic-embed-text", input=["one", "two"])
    assert near(r.embeddings[1], letters("two"))
    assert near(ol.embeddings(model="nomic-embed-text", prompt="one").embedding, letters("one"))


def ollama_unknown_model():
    try:
        ol.chat(model="no-such-model", messages=user, stream=False)
    except ollama.ResponseError as e:
        assert e.status_code == 404 and "no-such-model" in e.error, (e.status_code, e.error)
    else:
        raise AssertionError("expected ResponseError")


def litellm_openai():
    kw = dict(model="openai/brunix", api_base=f"{BASE}/v1", api_key="sk-anything", messages=user)
    r = litellm.completion(**kw)
    assert r.choices[0].message.content == ANSWER, r
    assert r.usage.total_tokens > 0
    text = "".join(c.choices[0].delta.content or "" for c in litellm.completion(stream=True, **kw))
    assert text == ANSWER, text


def litellm_ollama():
    for model in ("ollama/brunix", "ollama_chat/brunix"):
        kw = dict(model=model, api_base=BASE, messages=user)
        r = litellm.completion(**kw)
        assert r.choices[0].message.content == ANSWER, (model, r)
        chunks = list(litellm.completion(stream=True, **kw))
        text = "".join(c.choices[0].delta.content or "" for c in chunks)
        assert text == ANSWER, (model, text)


def litellm_embedding():
    r = litellm.embedding(model="openai/nomic-embed-text", api_base=f"{BASE}/v1",
                          api_key="k", input=["abc"])
    assert near(r.data[0]["embedding"], letters("abc"))


def litellm_async():
    async def run():
        return await litellm.acompletion(model="openai/brunix", api_base=f"{BASE}/v1",
                                         api_key="k", messages=user)
    assert asyncio.run(run()).choices[0].message.content == ANSWER


PREFIXES = ("openai_", "ollama_", "litellm_", "httpx_")
for name, fn in list(globals().items()):
    if name.startswith(PREFIXES) and callable(fn):
        check(name, fn)

print(f"{len(failures) == 0 and 'all' or 'some'} python client checks: "
      f"{sum(1 for n in globals() if n.startswith(PREFIXES))} run, {len(failures)} failed")
sys.exit(1 if failures else 0)
