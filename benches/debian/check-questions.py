#!/usr/bin/env python3
"""Validate the Debian retrieval questions against a built corpus (stdlib only).

Usage: check-questions.py CORPUS QUESTIONS.jsonl

Checks, for every line:
- valid JSON object with exactly the fields query, relevant, lang, kind, evidence;
- lang in {en, es}, kind in {same, cross, code}, non-empty query, non-empty list
  of unique relative paths in `relevant`;
- every relevant file exists under CORPUS;
- `evidence` compiles and matches (re.IGNORECASE) in at least one relevant file;
- kind "cross": no relevant file is in the question's language (path segment
  /en/ or /es/) and, for each relevant file, the parallel file in the question's
  language is absent from the corpus;
- kind "code": every relevant file is under code/;
- no duplicate queries.
Prints counts per kind, per lang and per file group; exits 1 listing all failures.
"""
import collections
import json
import os
import re
import sys

FIELDS = {"query", "relevant", "lang", "kind", "evidence"}
LANGS = {"en", "es"}
KINDS = {"same", "cross", "code"}


def lang_of(path):
    parts = path.split("/")
    for lang in LANGS:
        if lang in parts[:-1]:
            return lang
    return None


def parallel(path, lang):
    parts = path.split("/")
    for i, p in enumerate(parts[:-1]):
        if p in LANGS:
            parts[i] = lang
            return "/".join(parts)
    return None


def main():
    if len(sys.argv) != 3:
        print("usage: check-questions.py CORPUS QUESTIONS.jsonl", file=sys.stderr)
        return 2
    corpus, qpath = sys.argv[1], sys.argv[2]
    if not os.path.isdir(corpus):
        print(f"corpus directory not found: {corpus}", file=sys.stderr)
        return 2
    cache = {}

    def text(rel):
        if rel not in cache:
            with open(os.path.join(corpus, rel), encoding="utf-8", errors="replace") as f:
                cache[rel] = f.read()
        return cache[rel]

    failures = []
    by_kind = collections.Counter()
    by_lang = collections.Counter()
    by_lang_kind = collections.Counter()
    by_group = collections.Counter()
    by_file = collections.Counter()
    seen = {}
    n = 0
    with open(qpath, encoding="utf-8") as f:
        lines = f.read().splitlines()
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        n += 1

        def fail(msg):
            failures.append(f"line {lineno}: {msg}")

        try:
            q = json.loads(line)
        except json.JSONDecodeError as e:
            fail(f"invalid JSON: {e}")
            continue
        if not isinstance(q, dict):
            fail("not a JSON object")
            continue
        if set(q) != FIELDS:
            fail(f"fields {sorted(q)} != {sorted(FIELDS)}")
            continue
        query, rel, lang, kind, ev = (q[k] for k in ("query", "relevant", "lang", "kind", "evidence"))
        if not isinstance(query, str) or not query.strip():
            fail("empty query")
            continue
        key = query.strip().lower()
        if key in seen:
            fail(f"duplicate query (also line {seen[key]}): {query!r}")
        seen[key] = lineno
        if lang not in LANGS:
            fail(f"bad lang {lang!r}")
        if kind not in KINDS:
            fail(f"bad kind {kind!r}")
        if (not isinstance(rel, list) or not rel or not all(isinstance(r, str) and r for r in rel)
                or len(set(rel)) != len(rel)):
            fail("relevant must be a non-empty list of unique strings")
            continue
        if not isinstance(ev, str) or not ev:
            fail("empty evidence")
            continue
        try:
            rx = re.compile(ev, re.IGNORECASE)
        except re.error as e:
            fail(f"evidence regex does not compile: {e}")
            continue
        missing = False
        for r in rel:
            if r.startswith("/") or ".." in r.split("/"):
                fail(f"relevant path must be relative to the corpus: {r}")
                missing = True
            elif not os.path.isfile(os.path.join(corpus, r)):
                fail(f"relevant file missing: {r}")
                missing = True
        if missing:
            continue
        if not any(rx.search(text(r)) for r in rel):
            fail(f"evidence /{ev}/ matches none of {rel} (query {query!r})")
        if kind == "cross":
            for r in rel:
                rl = lang_of(r)
                if rl is None:
                    fail(f"cross question with a language-less relevant file: {r}")
                elif rl == lang:
                    fail(f"cross question in {lang} lists a file in its own language: {r}")
                else:
                    par = parallel(r, lang)
                    if os.path.exists(os.path.join(corpus, par)):
                        fail(f"cross question: parallel chapter {par} is present in the corpus")
        if kind == "code":
            for r in rel:
                if not r.startswith("code/"):
                    fail(f"code question with a non-code relevant file: {r}")
        if kind == "same":
            if not any(lang_of(r) == lang for r in rel):
                fail(f"same question in {lang} has no relevant file in {lang}")
        by_kind[kind] += 1
        by_lang[lang] += 1
        by_lang_kind[(lang, kind)] += 1
        for r in rel:
            by_file[r] += 1
            by_group["/".join(r.split("/")[:2])] += 1

    print(f"questions: {n}")
    print("per kind: " + ", ".join(f"{k}={by_kind[k]}" for k in sorted(by_kind)))
    print("per lang: " + ", ".join(f"{k}={by_lang[k]}" for k in sorted(by_lang)))
    print("per lang/kind: " + ", ".join(f"{l}/{k}={c}" for (l, k), c in sorted(by_lang_kind.items())))
    print("relevant labels per group: " + ", ".join(f"{g}={c}" for g, c in sorted(by_group.items())))
    print(f"distinct relevant files: {len(by_file)}; most labelled: "
          + ", ".join(f"{r}={c}" for r, c in by_file.most_common(3)))
    if failures:
        print(f"\n{len(failures)} FAILURE(S):")
        for msg in failures:
            print("  " + msg)
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
