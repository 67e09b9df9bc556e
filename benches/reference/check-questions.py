#!/usr/bin/env python3
"""Validate the reference-pages retrieval questions against a built corpus (stdlib only).

Usage: check-questions.py CORPUS QUESTIONS.jsonl

Checks, for every line:
- valid JSON object with exactly the fields query, relevant, lang, kind, group, evidence;
- lang in {en, es}, kind in {same, cross, code}, non-empty query, non-empty list of
  unique relative paths in `relevant`, each of the form {man,api}/{en,es}/manN/PAGE.N.md;
- every relevant file exists under CORPUS;
- `evidence` compiles as a Python regex and matches (re.IGNORECASE) in at least one
  relevant file;
- kind "same": at least one relevant file is in the question's language;
- kind "cross": no relevant file is in the question's language and, for each relevant
  file, the parallel file in the question's language is absent from the corpus;
- kind "code": every relevant file is under api/ (not used by this question set);
- labels are complete across languages: if a relevant file's parallel page exists in
  the corpus, it is listed too;
- no duplicate queries.
Prints counts by lang x kind x group (commands = man1/man8, config = man5,
api = man2/man3); exits 1 listing all failures.
"""
import collections
import json
import os
import re
import sys

FIELDS = {"query", "relevant", "lang", "kind", "group", "evidence"}
LANGS = ("en", "es")
KINDS = ("same", "cross", "code")
PATH_RE = re.compile(r"^(man|api)/(en|es)/man([1-8])/[^/]+\.([1-8])\.md$")


def group_of(path):
    m = PATH_RE.match(path)
    if not m:
        return None
    if m.group(1) == "api":
        return "api"
    return "config" if m.group(3) == "5" else "commands"


def lang_of(path):
    return path.split("/")[1]


def parallel(path, lang):
    parts = path.split("/")
    parts[1] = lang
    return "/".join(parts)


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

    def exists(rel):
        return os.path.isfile(os.path.join(corpus, rel))

    failures = []
    counts = collections.Counter()  # (lang, kind, group)
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
            continue
        if kind not in KINDS:
            fail(f"bad kind {kind!r}")
            continue
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
        bad = False
        for r in rel:
            if not PATH_RE.match(r):
                fail(f"relevant path not of the form {{man,api}}/{{en,es}}/manN/PAGE.N.md: {r}")
                bad = True
            elif not exists(r):
                fail(f"relevant file missing: {r}")
                bad = True
        if bad:
            continue
        if not any(rx.search(text(r)) for r in rel):
            fail(f"evidence /{ev}/ matches none of {rel} (query {query!r})")
        for r in rel:
            other = parallel(r, "es" if lang_of(r) == "en" else "en")
            if exists(other) and other not in rel:
                fail(f"{r} is relevant but its parallel page {other} (present) is not listed")
        langs = {lang_of(r) for r in rel}
        if kind == "same" and lang not in langs:
            fail(f"same question in {lang} has no relevant file in {lang}")
        if kind == "cross":
            if lang in langs:
                fail(f"cross question in {lang} lists a file in its own language")
            for r in rel:
                if exists(parallel(r, lang)):
                    fail(f"cross question: parallel page {parallel(r, lang)} is present in the corpus")
        if kind == "code":
            for r in rel:
                if not r.startswith("api/"):
                    fail(f"code question with a non-api relevant file: {r}")
        groups = sorted({group_of(r) for r in rel})
        if q["group"] != "+".join(groups):
            fail(f"group {q['group']!r} is not its files' group {'+'.join(groups)!r}")
        counts[(lang, kind, "+".join(groups))] += 1
        for r in rel:
            by_file[r] += 1

    print(f"questions: {n}")
    glist = sorted({g for (_, _, g) in counts})
    header = f"{'lang/kind':<12}" + "".join(f"{g:>16}" for g in glist) + f"{'total':>8}"
    print(header)
    for lang in LANGS:
        for kind in KINDS:
            row = [counts[(lang, kind, g)] for g in glist]
            if sum(row):
                print(f"{lang + '/' + kind:<12}" + "".join(f"{c:>16}" for c in row) + f"{sum(row):>8}")
    col = [sum(c for (l, k, g), c in counts.items() if g == gg) for gg in glist]
    print(f"{'total':<12}" + "".join(f"{c:>16}" for c in col) + f"{sum(col):>8}")
    per_lang = collections.Counter()
    per_kind = collections.Counter()
    for (l, k, g), c in counts.items():
        per_lang[l] += c
        per_kind[k] += c
    print("per lang: " + ", ".join(f"{k}={per_lang[k]}" for k in sorted(per_lang)))
    print("per kind: " + ", ".join(f"{k}={per_kind[k]}" for k in sorted(per_kind)))
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
