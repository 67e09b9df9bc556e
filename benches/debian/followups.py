#!/usr/bin/env python3
"""Turns for `assist-gateway eval turns` over the Debian benchmark (stdlib only).

Each labelled question of questions.jsonl becomes two turns:
- `followup`: the question asked first, answered, then a generic follow-up in the same
  language ("Can you show me an example?", "¿Y qué devuelve?"); relevant = the question's
  files. Scored on the follow-up.
- `self_contained`: the question asked after another, unrelated question of the set;
  relevant = its own files. Scored on the question: searching with the conversation must
  not make it worse than searching its words alone.

    benches/debian/followups.py > /tmp/debian-turns.jsonl
"""
import json
import pathlib

HERE = pathlib.Path(__file__).parent
FOLLOW_UPS = {
    "en": [
        "Can you show me an example?",
        "And how do I undo that?",
        "What about when it fails?",
        "Can you explain that in more detail?",
        "Is there another way to do it?",
        "How do I check that it worked?",
        "And what does it print?",
        "Any options I should know about?",
    ],
    "es": [
        "¿Me das un ejemplo?",
        "¿Y cómo lo deshago?",
        "¿Y si falla?",
        "¿Puedes explicarlo con más detalle?",
        "¿Hay otra forma de hacerlo?",
        "¿Cómo compruebo que ha funcionado?",
        "¿Y qué muestra?",
        "¿Alguna opción que deba conocer?",
    ],
}
ANSWER = {"en": "Here is how that works.", "es": "Así es como funciona."}

questions = [json.loads(l) for l in (HERE / "questions.jsonl").read_text().splitlines() if l.strip()]
for i, q in enumerate(questions):
    lang = q.get("lang", "en")
    follow = FOLLOW_UPS[lang][i % len(FOLLOW_UPS[lang])]
    print(json.dumps({
        "id": f"debian-f{i:03d}", "lang": lang, "kind": "followup",
        "history": [{"role": "user", "content": q["query"]},
                    {"role": "assistant", "content": ANSWER[lang]}],
        "question": follow, "editor": False, "retrieve": True, "relevant": q["relevant"],
    }, ensure_ascii=False))
    # An unrelated question before: the one half the set away (another chapter).
    other = questions[(i + len(questions) // 2) % len(questions)]
    print(json.dumps({
        "id": f"debian-s{i:03d}", "lang": lang, "kind": "self_contained",
        "history": [{"role": "user", "content": other["query"]},
                    {"role": "assistant", "content": ANSWER[other.get("lang", "en")]}],
        "question": q["query"], "editor": False, "retrieve": True, "relevant": q["relevant"],
    }, ensure_ascii=False))
