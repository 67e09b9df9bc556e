#!/usr/bin/env python3
"""The completion benchmark's ceiling for repository context: what the model does with the
declarations it needs, handed to it, rather than the snippets the gateway finds.

    benches/completions/oracle.py MODEL_URL MODEL SPANS_FILE        (run.sh runs it: ORACLE=1)

For each span, the names that make it cross-file (build.py's `needs`: used by the middle,
declared by the indexed files and not by the held-out one, not shown by the prefix or
suffix, not bound by the middle, not Python's own) are looked up in the repository, and
their declarations (a def's or class's signature and first docstring line, a `self.`
assignment under its class's line, a module-level assignment) are given to the model. An
oracle: it reads the middle to know the names, which no completion can. Three prompts,
written in Qwen2.5-Coder's FIM template as the gateway writes it (this script knows no
other template), straight to the model server, temperature 0, 48 tokens:

  suffix        prefix + suffix (the benchmark's second mode, without the gateway)
  declarations  the declarations in the template's repository form, each under its real
                path, the current file under its own
  comments      the same declarations as comments above the prefix

The middle is cut as the gateway cuts it, roughly (see `cut`) and compared as
`eval completions` compares: exact match and edit similarity, trailing blanks and the
first line's indentation left out. Prints one line per span and mode, then the figures.
"""

import json
import pathlib
import re
import sys
import urllib.request

# The gateway's end tokens for Qwen's template (src/pipeline/fill.rs).
STOPS = ["<|endoftext|>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
         "<|repo_name|>", "<|file_sep|>", "<|im_start|>", "<|im_end|>"]
MODES = ["suffix", "declarations", "comments"]
BUDGET_CHARS = 1000  # about the gateway's 256 tokens


def declarations(repo, name):
    """(path, code) of each place the repository declares `name`, as build.py counts a
    declaration: a def or a class (its signature and first docstring line), a `self.`
    assignment (under its class's line) or a module-level one."""
    out = []
    for path, lines in repo.items():
        for i, line in enumerate(lines):
            if re.match(rf"\s*(async\s+)?(def|class)\s+{name}\b", line):
                end = i
                while end < len(lines) and not lines[end].rstrip().endswith(":") and end - i < 6:
                    end += 1
                code = lines[i:end + 1]
                if end + 1 < len(lines) and lines[end + 1].strip().startswith(('"""', "'''")):
                    code.append(lines[end + 1])
                out.append((path, "\n".join(code)))
            elif re.match(rf"{name}\s*(:[^=]*)?=(?!=)", line):
                out.append((path, line))
            elif re.search(rf"self\.{name}\s*(:[^=]*)?=(?!=)", line):
                head = next((l for l in reversed(lines[:i]) if l.startswith("class ")), None)
                out.append((path, f"{head}\n    ...\n{line}" if head else line))
    return out


def oracle(repo, span):
    """The declarations of the names that make the span cross-file (build.py's `needs`),
    the first two of each, within the budget."""
    snippets, used = [], 0
    for name in span.get("needs", []):
        for path, code in declarations(repo, name)[:2]:
            if used + len(code) <= BUDGET_CHARS:
                snippets.append((path, code))
                used += len(code)
    return snippets


def prompt(mode, span, snippets):
    def fim(prefix):
        return f"<|fim_prefix|>{prefix}<|fim_suffix|>{span['suffix']}<|fim_middle|>"

    if mode == "suffix":
        return fim(span["prefix"])
    if mode == "declarations" and snippets:
        files = "".join(f"<|file_sep|>{path}\n{code}\n" for path, code in snippets)
        return f"<|repo_name|>repository\n{files}<|file_sep|>{span['file']}\n" + \
            fim(span["prefix"])
    if mode == "declarations":
        return fim(span["prefix"])
    head = "".join(f"# {path}\n" + "".join(f"# {l}\n" for l in code.splitlines()) + "\n"
                   for path, code in snippets)
    return fim(head + span["prefix"])


def cut(span, text):
    """The middle, ended roughly as the gateway ends it: a line span at its line break; a
    block at a blank line or a line indented less than its first (the cursor's indentation
    and what the model wrote before its first line); either where the model writes the
    suffix's next line again."""
    cursor = len(span["prefix"].split("\n")[-1])
    again = next((l.strip() for l in span["suffix"].split("\n") if l.strip()), "")
    lines = text.split("\n")
    out, level = [], None
    for i, line in enumerate(lines):
        # (a whole line: not the last piece, which may still be growing)
        if len(again) >= 3 and line.strip() == again and i < len(lines) - 1:
            break
        if span["kind"] == "line" and i > 0:
            break
        if level is None:
            if line.strip():
                level = cursor + len(line) - len(line.lstrip())
        elif not line.strip() or len(line) - len(line.lstrip()) < level:
            break
        out.append(line)
    return "\n".join(out)


def normalized(code):
    return "\n".join(l.rstrip() for l in code.splitlines()).strip("\n").lstrip()


def similarity(a, b):
    if not a and not b:
        return 1.0
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
    return 1 - row[len(b)] / max(len(a), len(b))


def complete(url, model, text):
    body = json.dumps({"model": model, "prompt": text, "max_tokens": 48, "temperature": 0,
                       "stop": STOPS}).encode()
    request = urllib.request.Request(f"{url}/completions", body,
                                     {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=600) as r:
        return json.load(r)["choices"][0]["text"]


def main():
    url, model, spans_file = sys.argv[1:4]
    spans_file = pathlib.Path(spans_file)
    root = spans_file.parent / "repo"
    repo = {p.relative_to(root).as_posix(): p.read_text().splitlines()
            for p in sorted(root.rglob("*.py"))}
    spans = [json.loads(l) for l in spans_file.open()]
    totals = {m: [0, 0.0] for m in MODES}
    for span in spans:
        snippets = oracle(repo, span)
        want = normalized(span["middle"])
        for mode in MODES:
            got = normalized(cut(span, complete(url, model, prompt(mode, span, snippets))))
            exact, sim = got == want, similarity(got, want)
            totals[mode][0] += exact
            totals[mode][1] += sim
            print(f"{span['id']:10} {mode:12} {'exact' if exact else '     '} {sim:.2f} "
                  f"{got[:60]!r}", flush=True)
        print(f"{span['id']:10} {'wanted':12}       {want[:60]!r} "
              f"({len(snippets)} declarations)", flush=True)
    print(f"\n{model}, {len(spans)} spans of {spans_file.name}: exact match / edit similarity")
    for mode in MODES:
        hits, sims = totals[mode]
        print(f"  {mode:12} {hits / len(spans):.3f} / {sims / len(spans):.3f}  ({hits} exact)")


if __name__ == "__main__":
    main()
