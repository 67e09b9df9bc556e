"""The client scenarios a new user tries, against the gateway in front of a real model.

Run by tests/it/real_clients.rs, which starts llama.cpp's server (llama-cpp-python) with a
2,048-token window and the gateway with examples/knowledge, as the quick start does. The
model's wording is not asserted (a small model says what it says): each check asserts what
the client hands its user: an answer with text, its sources where the client can see
them, and a 404 for a model that does not exist.

Usage: python real_stack.py BASE_URL MODEL_ALIAS
"""

import asyncio
import json
import os
import subprocess
import sys

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network at import

import litellm
import ollama
import openai

BASE, MODEL = sys.argv[1], sys.argv[2]
QUESTION = [{"role": "user", "content": "Which environment variable overrides the server port?"}]
SHORT = 24  # answer tokens: enough to see an answer, quick on 2 cores
failures = []


def check(name, fn):
    try:
        fn()
        print(f"ok   {name}")
    except Exception as e:  # noqa: BLE001 - report every failure, then exit non-zero
        failures.append(name)
        print(f"FAIL {name}: {type(e).__name__}: {e}")


oa = openai.OpenAI(base_url=f"{BASE}/v1", api_key="sk-anything", max_retries=0, timeout=300)
ol = ollama.Client(host=BASE, timeout=300)


def has_text(text, what):
    assert isinstance(text, str) and text.strip(), f"{what}: no text: {text!r}"


def openai_sdk_whole():
    r = oa.chat.completions.create(model="brunix", messages=QUESTION, max_tokens=SHORT, temperature=0)
    has_text(r.choices[0].message.content, "brunix")
    files = [s["file"] for s in r.model_extra["sources"]]
    assert "docs/en/deployment.md" in files, files


def openai_sdk_stream():
    stream = oa.chat.completions.create(model="brunix", messages=QUESTION, max_tokens=SHORT,
                                        temperature=0, stream=True)
    text, finish = "", None
    for chunk in stream:
        for c in chunk.choices:
            text += c.delta.content or ""
            finish = c.finish_reason or finish
    has_text(text, "brunix stream")
    assert finish in ("stop", "length"), finish


def openai_sdk_async():
    async def run():
        client = openai.AsyncOpenAI(base_url=f"{BASE}/v1", api_key="k", max_retries=0, timeout=300)
        return await client.chat.completions.create(model="brunix", messages=QUESTION,
                                                    max_tokens=SHORT, temperature=0)
    has_text(asyncio.run(run()).choices[0].message.content, "async")


def openai_sdk_passthrough():
    r = oa.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Say hello."}],
                                   max_tokens=SHORT, temperature=0)
    has_text(r.choices[0].message.content, MODEL)


def openai_sdk_unknown_model():
    try:
        oa.chat.completions.create(model="no-such-model", messages=QUESTION, max_tokens=SHORT)
    except openai.NotFoundError as e:
        assert e.status_code == 404 and e.code == "model_not_found", e
    else:
        raise AssertionError("no-such-model was answered")


def openai_sdk_too_long():
    long = "let total = items.iter().map(|x| x.price * x.qty).sum::<u64>();\n" * 200
    try:
        oa.chat.completions.create(model="brunix", max_tokens=SHORT,
                                   messages=[{"role": "user", "content": f"Why is this slow?\n{long}"}])
    except openai.BadRequestError as e:
        assert e.code == "context_length_exceeded", e
    else:
        raise AssertionError("a question longer than the window was answered")


def ollama_py_chat():
    r = ol.chat(model="brunix", messages=QUESTION, options={"num_predict": SHORT, "temperature": 0})
    has_text(r.message.content, "chat")
    text = "".join(p.message.content for p in ol.chat(
        model="brunix", messages=QUESTION, stream=True, options={"num_predict": SHORT}))
    has_text(text, "chat stream")


def ollama_py_generate():
    r = ol.generate(model="brunix", prompt="Which environment variable overrides the server port?",
                    options={"num_predict": SHORT, "temperature": 0})
    has_text(r.response, "generate")


def ollama_py_unknown_model():
    try:
        ol.chat(model="no-such-model", messages=QUESTION)
    except ollama.ResponseError as e:
        assert e.status_code == 404, (e.status_code, e.error)
    else:
        raise AssertionError("no-such-model was answered")


def litellm_routes():
    # ollama/ sends /api/generate with "### User:\n…" prompts: the route that overflowed.
    for model, base in (("openai/brunix", f"{BASE}/v1"), ("ollama/brunix", BASE),
                        ("ollama_chat/brunix", BASE)):
        kw = dict(model=model, api_base=base, api_key="sk-anything", messages=QUESTION,
                  max_tokens=SHORT, temperature=0)
        has_text(litellm.completion(**kw).choices[0].message.content, model)
        text = "".join(c.choices[0].delta.content or "" for c in litellm.completion(stream=True, **kw))
        has_text(text, f"{model} stream")
    pong = litellm.completion(model="ollama/brunix", api_base=BASE, max_tokens=SHORT,
                              messages=[{"role": "user", "content": "Say PONG"}])
    has_text(pong.choices[0].message.content, "Say PONG")


def litellm_unknown_model():
    for model, base in (("openai/no-such-model", f"{BASE}/v1"), ("ollama_chat/no-such-model", BASE)):
        try:
            litellm.completion(model=model, api_base=base, api_key="k", messages=QUESTION,
                               max_tokens=SHORT, num_retries=0)
        except litellm.exceptions.NotFoundError:
            pass
        else:
            raise AssertionError(f"{model} was answered")


def curl(*args):
    out = subprocess.run(["curl", "-sS", "-N", "--max-time", "300", *args],
                         capture_output=True, text=True, check=True)
    return out.stdout


def curl_stream_and_unknown_model():
    body = json.dumps({"model": "brunix", "stream": True, "max_tokens": SHORT, "messages": QUESTION})
    out = curl(f"{BASE}/v1/chat/completions", "-H", "Content-Type: application/json", "-d", body)
    events = [line[6:] for line in out.splitlines() if line.startswith("data: ")]
    assert events and events[-1] == "[DONE]", out[-500:]
    text = "".join(json.loads(e)["choices"][0]["delta"].get("content") or ""
                   for e in events[:-1] if json.loads(e).get("choices"))
    has_text(text, "curl stream")
    assert "sources" in json.loads(events[-2]), events[-2]
    body = json.dumps({"model": "no-such-model", "messages": QUESTION})
    status = curl("-o", "/dev/null", "-w", "%{http_code}", f"{BASE}/v1/chat/completions",
                  "-H", "Content-Type: application/json", "-d", body)
    assert status == "404", status


PREFIXES = ("openai_sdk_", "ollama_py_", "litellm_", "curl_")
for name, fn in list(globals().items()):
    if name.startswith(PREFIXES) and callable(fn):
        check(name, fn)

print(f"{len(failures) == 0 and 'all' or 'some'} real-stack client checks: "
      f"{sum(1 for n in globals() if n.startswith(PREFIXES))} run, {len(failures)} failed")
sys.exit(1 if failures else 0)
