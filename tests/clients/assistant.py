"""The assistant through the real openai package, as the reference VS Code extension
uses it: editor context as a JSON string in the standard `user` field (base64 fields,
`user_info` object), the conversation key in a top-level `session_id`.

Run by tests/it/python_clients.rs, which scripts the upstream's answers (listed below) and
afterwards checks what the upstream model was sent.

Usage: python assistant.py BASE_URL
"""

import base64
import json
import sys

import openai

BASE = sys.argv[1]
SESSION = "py-session-1"
SELECTION = 'try {\n    ormSelectOne("users", {"id": id})\n} catch (e: NotFound) {\n    addResult(404, {})\n}'


def b64(text):
    return base64.b64encode(text.encode("utf-8")).decode("ascii")


editor = json.dumps({
    "editor_content": b64("async fn get_user(req: Request) -> Response {\n" + SELECTION + "\n}\n"),
    "selected_text": b64(SELECTION),
    "extra_context": b64("file: code/users_service.brisa"),
    "user_info": {"dev_id": 7, "project_id": 1, "org_id": 1},
})
oa = openai.OpenAI(base_url=f"{BASE}/v1", api_key="sk-anything", max_retries=0)
history = []


def ask(content, stream=False):
    history.append({"role": "user", "content": content})
    # The extension sends only the new message; the gateway remembers the rest.
    kwargs = dict(model="brunix", messages=[history[-1]], user=editor,
                  extra_body={"session_id": SESSION})
    if not stream:
        return oa.chat.completions.create(**kwargs)
    return list(oa.chat.completions.create(stream=True, **kwargs))


# 1. About the selected code (scripted answer: "It only catches NotFound.").
r = ask("why is this not catching my error?")
assert r.choices[0].message.content == "It only catches NotFound.", r
sources = r.model_extra["sources"]
assert isinstance(sources, list), r.model_extra
print("ok   selected code answered; sources:", len(sources))

# 2. About the knowledge base, streamed (scripted answer: "Set BRISA_PORT.").
chunks = ask("Which environment variable overrides the server port?", stream=True)
text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
assert text == "Set BRISA_PORT.", text
last = chunks[-1]
files = [s["file"] for s in last.model_extra["sources"]]
assert files and files[0] == "docs/en/deployment.md", files
assert all("sources" not in (c.model_extra or {}) for c in chunks[:-1])
print("ok   knowledge answered; first source:", files[0])

# 3. A follow-up that needs the conversation (scripted answer: default).
r = ask("and what did you tell me before that?")
assert r.choices[0].message.content == "Hello from upstream", r
print("ok   follow-up answered")
print("all assistant checks passed")
