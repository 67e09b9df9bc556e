"""Cited sources through the real openai package: `message.annotations` of a whole answer,
`url_citation` annotations in a streamed delta (where Open WebUI reads them), and each
annotation's link followed with the SDK's own HTTP client (httpx): JSON with the key,
HTML for a browser, 401 without the key, 404 for an unknown id.

Run by tests/it/citations.rs, which scripts the upstream's answers.

Usage: python citations.py BASE_URL KEY
"""

import sys

import httpx
import openai

BASE, KEY = sys.argv[1], sys.argv[2]
oa = openai.OpenAI(base_url=f"{BASE}/v1", api_key=KEY, max_retries=0)
QUESTION = [{"role": "user", "content": "Which environment variable overrides the server port?"}]

# 1. A whole answer (scripted: "Set BRISA_PORT.").
r = oa.chat.completions.create(model="brunix", messages=QUESTION)
message = r.choices[0].message
sources = r.model_extra["sources"]
assert sources, r.model_extra
annotations = message.annotations
assert annotations and len(annotations) == len(sources), (annotations, sources)
for a, s in zip(annotations, sources):
    assert a.type == "url_citation", a
    c = a.url_citation
    assert c.url == f"{BASE}/v1/sources/{s['id']}", (c.url, s)
    assert c.title.startswith(s["file"]), (c.title, s)
    assert (c.start_index, c.end_index) == (0, len(message.content)), c
print("ok   whole answer: annotations", len(annotations), "first", annotations[0].url_citation.title)

# 2. Streamed (scripted: "Set ", "BRISA_PORT."): one delta carries the annotations,
# after the content and before the finish.
chunks = list(oa.chat.completions.create(model="brunix", messages=QUESTION, stream=True))
text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
assert text == "Set BRISA_PORT.", text
with_annotations = [i for i, c in enumerate(chunks)
                    if c.choices and (c.choices[0].delta.model_extra or {}).get("annotations")]
assert len(with_annotations) == 1, with_annotations
i = with_annotations[0]
streamed = chunks[i].choices[0].delta.model_extra["annotations"]
finish = [j for j, c in enumerate(chunks) if c.choices and c.choices[0].finish_reason]
assert finish and i < finish[0], (i, finish)
streamed_sources = chunks[-1].model_extra["sources"]
assert [a["url_citation"]["url"] for a in streamed] == \
    [f"{BASE}/v1/sources/{s['id']}" for s in streamed_sources], streamed
assert all(a["type"] == "url_citation" and a["url_citation"]["end_index"] == len(text)
           for a in streamed), streamed
print("ok   streamed: annotations in chunk", i, "of", len(chunks))

# 3. The links.
url = annotations[0].url_citation.url
auth = {"Authorization": f"Bearer {KEY}"}
j = httpx.get(url, headers=auth)
assert j.status_code == 200 and j.headers["content-type"].startswith("application/json"), j
body = j.json()
assert body["id"] == sources[0]["id"] and body["file"] == sources[0]["file"], body
assert body["lines"] == sources[0]["lines"] and body["text"], body
h = httpx.get(url, headers={**auth, "Accept": "text/html,application/xhtml+xml,*/*;q=0.8"})
assert h.status_code == 200 and h.headers["content-type"].startswith("text/html"), h
assert sources[0]["file"] in h.text and "<pre>" in h.text, h.text[:300]
no_key = httpx.get(url)
assert no_key.status_code == 401 and no_key.json()["error"]["message"], no_key.text
missing = httpx.get(f"{BASE}/v1/sources/0123456789abcdef", headers=auth)
assert missing.status_code == 404, missing
assert missing.json()["error"]["code"] == "source_not_found", missing.text
print("ok   links: json, html, 401 without key, 404 unknown")
print("all citation checks passed")
