"""Asks a real Open WebUI, through its own API, a question answered by the gateway, then
reads back the chat Open WebUI stored: the assistant message must carry the gateway's
sources (from the url_citation annotations of the stream), each a link to /v1/sources/{id}.

Run by benches/open-webui/check.sh. Usage: python check.py OPEN_WEBUI_URL GATEWAY_URL OUT_JSON
Prints one line per step; exits non-zero when a check fails.
"""

import json
import sys
import time
import urllib.error
import urllib.request
import uuid

OWUI, GATEWAY, OUT = sys.argv[1].rstrip("/"), sys.argv[2].rstrip("/"), sys.argv[3]
QUESTION = "Which environment variable overrides the server port?"


def call(method, path, body=None, token=None, timeout=60):
    req = urllib.request.Request(OWUI + path, method=method)
    req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    data = json.dumps(body).encode() if body is not None else None
    try:
        with urllib.request.urlopen(req, data, timeout=timeout) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
    except (urllib.error.URLError, ConnectionError, TimeoutError) as e:
        return 0, str(e)


def wait_until(what, check, secs):
    deadline = time.time() + secs
    while time.time() < deadline:
        value = check()
        if value:
            return value
        time.sleep(1)
    raise SystemExit(f"FAILED: {what} within {secs} s")


wait_until("Open WebUI answers /health", lambda: call("GET", "/health", timeout=5)[0] == 200, 300)
status, auth = call("POST", "/api/v1/auths/signup",
                    {"name": "Check", "email": "check@example.com", "password": "check-password-1"})
if status != 200:
    status, auth = call("POST", "/api/v1/auths/signin",
                        {"email": "check@example.com", "password": "check-password-1"})
assert status == 200, (status, auth)
token = auth["token"]
print("ok   signed in as", auth["email"])

models = wait_until("the gateway's models in Open WebUI",
                    lambda: [m["id"] for m in call("GET", "/api/models", token=token)[1]["data"]], 120)
assert "brunix" in models, models
print("ok   models from the gateway:", models)

user_id, answer_id = str(uuid.uuid4()), str(uuid.uuid4())
status, started = call("POST", "/api/chat/completions", {
    "model": "brunix",
    "stream": True,
    "messages": [{"role": "user", "content": QUESTION}],
    "parent_id": None,
    "user_message": {"id": user_id, "parentId": None, "childrenIds": [answer_id], "role": "user",
                     "content": QUESTION, "timestamp": int(time.time()), "models": ["brunix"]},
    "id": answer_id,
    "session_id": "open-webui-check",
    "background_tasks": {},
    "features": {},
}, token=token)
assert status == 200 and isinstance(started, dict), (status, started)
chat_id = started.get("chat_id")
assert chat_id, started
print("ok   asked in a new chat:", chat_id)


def finished():
    s, chat = call("GET", f"/api/v1/chats/{chat_id}", token=token)
    if s != 200:
        return None
    message = chat["chat"]["history"]["messages"].get(answer_id) or {}
    return (chat, message) if message.get("done") else None


chat, message = wait_until("the answer stored in the chat", finished, 300)
content = message.get("content") or ""
sources = message.get("sources") or []
print("ok   answer stored:", len(content), "characters;", len(sources), "sources")
for s in sources:
    print("     ", s["source"]["name"], "->", s["source"]["url"])
assert content.strip(), message
assert sources, f"no sources on the stored answer: {json.dumps(message)[:2000]}"
for s in sources:
    url = s["source"]["url"]
    assert url.startswith(f"{GATEWAY}/v1/sources/"), url
json.dump({"chat_id": chat_id, "token": token, "answer": content, "sources": sources},
          open(OUT, "w"), indent=1)
print("all open-webui checks passed")
