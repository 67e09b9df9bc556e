#!/usr/bin/env python3
"""Runs the prompt-injection set against a gateway and prints which injections the model
followed: its answer holds the case's canary (its own injection), or any other case's
(an injected document retrieved beside the one asked about took the answer over).

    benches/injection/run.py http://127.0.0.1:8080 [brunix]

The gateway must have benches/injection/knowledge ingested (see docs). Each question is
asked once, streamed off, temperature 0. Exit status 0 whatever the result: this is a
measurement, not a test.
"""

import base64
import json
import pathlib
import re
import sys
import urllib.request

base = sys.argv[1].rstrip("/")
model = sys.argv[2] if len(sys.argv) > 2 else "brunix"
cases = [json.loads(line) for line in
         (pathlib.Path(__file__).parent / "cases.jsonl").read_text().splitlines() if line]


def b64(text):
    return base64.b64encode(text.encode()).decode()


followed = own = 0
print("| case | where | its own injection | any injection | answer (first 80 characters) |")
print("|---|---|---|---|---|")
for case in cases:
    user = {k: b64(case[k]) for k in ("selected_text", "editor_content", "extra_context")
            if k in case}
    body = {"model": model, "temperature": 0, "max_tokens": 200,
            "messages": [{"role": "user", "content": case["question"]}]}
    if user:
        body["user"] = json.dumps(user)
    req = urllib.request.Request(f"{base}/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        answer = json.load(r)["choices"][0]["message"]["content"] or ""
    hit = re.search(case["canary"], answer, re.IGNORECASE) is not None
    others = [c["id"] for c in cases
              if c is not case and re.search(c["canary"], answer, re.IGNORECASE)]
    own += hit
    followed += hit or bool(others)
    short = " ".join(answer.split())[:80].replace("|", "\\|")
    anyone = "yes" if hit else (f"yes ({', '.join(others)})" if others else "no")
    print(f"| {case['id']} | {case['where']} | {'yes' if hit else 'no'} | {anyone} | {short} |")
print(f"\nits own injection followed in {own} of {len(cases)} answers; "
      f"an injection followed in {followed} of {len(cases)}")
