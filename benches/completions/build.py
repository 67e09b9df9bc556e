#!/usr/bin/env python3
"""Builds the completion benchmark from a Debian package of a real library the project did
not write: Jinja2 3.1.2 (python3-jinja2, Debian 12), pinned by version and SHA-256.

    benches/completions/build.py [OUT]      OUT: default ~/.cache/assist-gateway/completion-bench

Writes, under OUT (rebuilt only when this script changes):
  repo/          the library's files that are NOT held out: the repository to index
  spans-cross-file.jsonl  the cross-file spans alone (below), the same objects
  spans.jsonl    spans masked from the held-out files, one JSON object a line:
                 {"id", "file", "kind": "line" | "block", "prefix", "suffix", "middle",
                  "cross_file", "needs": the names that make it cross-file}

A held-out file is never indexed, so the repository context cannot hold the answer. The
cursor is after a line's indentation; a "line" span is the rest of that line, a "block"
span the body (up to four lines) of a line that opens a block (ends with ':'), the cursor
on the body's first line. The prefix is at most the 24 lines before the cursor, the suffix
at most the 8 lines after the span. Spans are chosen by a fixed stride, not by hand.

A span is "cross_file" when its middle uses a name that only the repository can tell: one
the indexed files declare (a def, a class, a module-level or `self.` assignment) and the
held-out file does not, that neither the prefix nor the suffix shows, that the middle
does not bind itself (an assignment's target, a parameter), and that is not Python's own
(a keyword, a builtin, a name of `typing`, a method of a builtin type). A rough version of
how CrossCodeEval (Ding et al., 2023) selects its examples, by their need of other files;
the flag is computed, never set by hand, and every span is still evaluated.
Prints OUT.
"""

import builtins
import hashlib
import io
import json
import keyword
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import typing

PACKAGE = "python3-jinja2"
VERSION = "3.1.2-1+deb12u3"
SHA256 = "914e3a26742b488bca661dd12dc06198262c3a99b68f2f20ef7310aecdf82cae"
LIBRARY = "usr/lib/python3/dist-packages/jinja2"
HELD_OUT = ["filters.py", "loaders.py", "ext.py", "sandbox.py", "bccache.py", "debug.py",
            "tests.py", "exceptions.py"]
PREFIX_LINES, SUFFIX_LINES = 24, 8
WANT_LINES, WANT_BLOCKS = 240, 80

out = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else
                   pathlib.Path.home() / ".cache/assist-gateway/completion-bench")
stamp = hashlib.sha256(pathlib.Path(__file__).read_bytes()).hexdigest()
if (out / ".stamp").exists() and (out / ".stamp").read_text() == stamp:
    print(out)
    sys.exit(0)


def log(msg):
    print(f"[completion-bench] {msg}", file=sys.stderr)


with tempfile.TemporaryDirectory() as tmp:
    tmp = pathlib.Path(tmp)
    log(f"apt-get download {PACKAGE}={VERSION}")
    subprocess.run(["apt-get", "download", f"{PACKAGE}={VERSION}"], cwd=tmp, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deb = next(tmp.glob("*.deb"))
    digest = hashlib.sha256(deb.read_bytes()).hexdigest()
    if digest != SHA256:
        sys.exit(f"[completion-bench] {deb.name}: sha256 {digest}, expected {SHA256}")
    subprocess.run(["dpkg-deb", "-x", str(deb), str(tmp / "x")], check=True)
    library = tmp / "x" / LIBRARY
    if out.exists():
        shutil.rmtree(out)
    (out / "repo" / "jinja2").mkdir(parents=True)
    held = []
    for f in sorted(library.glob("*.py")):
        if f.name in HELD_OUT:
            held.append((f.name, f.read_text()))
        else:
            shutil.copy(f, out / "repo" / "jinja2" / f.name)


def candidates(lines, kind):
    """(start, end) line ranges of the kind's spans, in file order."""
    in_doc = False
    for i, line in enumerate(lines):
        s = line.strip()
        # Docstrings and comments are prose, not code to complete.
        if s.count('"""') % 2 == 1:
            in_doc = not in_doc
            continue
        if in_doc or not s or s.startswith(("#", '"""', "@")) or i < 3:
            continue
        if kind == "line" and 12 <= len(s) <= 100 and not s.endswith((":", "(", "[", "{", ",")):
            yield i, i + 1
        elif kind == "block" and s.endswith(":") and not s.startswith(("class ", "def ")):
            # The body, without a docstring; it must end within four lines (a whole body).
            indent = len(line) - len(line.lstrip())
            end = i + 1
            while (end < len(lines) and end - i <= 5 and lines[end].strip()
                   and len(lines[end]) - len(lines[end].lstrip()) > indent
                   and not lines[end].strip().startswith(('"""', "#"))):
                end += 1
            closed = end >= len(lines) or not lines[end].strip() or (
                len(lines[end]) - len(lines[end].lstrip()) <= indent)
            if 1 <= end - i - 1 <= 4 and closed:
                yield i + 1, end


DECLARED = re.compile(
    r"^\s*(?:async\s+)?(?:def|class)\s+(\w+)|self\.(\w+)\s*(?::[^=\n]*)?=(?!=)"
    r"|^(\w+)\s*(?::[^=\n]*)?=(?!=)", re.M)
NAME = re.compile(r"[A-Za-z_]\w*")
PYTHONS_OWN = set(keyword.kwlist) | set(dir(builtins)) | set(dir(typing)) | {
    n for kind in (dict, list, str, bytes, set, tuple, io.IOBase) for n in dir(kind)}


def declared(text):
    return {name for m in DECLARED.finditer(text) for name in m.groups() if name}


REPOSITORY = declared("\n".join(f.read_text() for f in (out / "repo").rglob("*.py")))


# What a middle binds itself: `x = …`, `x: T = …`, and parameters (`x: T,` / `x=…`).
BOUND = re.compile(r"(?:^|[(,])\s*(\w+)\s*(?::[^=,)]*)?(?:=(?!=)|,|\)|$)|^\s*(\w+)\s*=(?!=)",
                   re.M)


def repository_names(prefix, middle, suffix, own):
    """The names of the middle that only the repository can tell, in the middle's order."""
    shown = set(NAME.findall(prefix)) | set(NAME.findall(suffix))
    bound = {n for m in BOUND.finditer(middle) for n in m.groups() if n}
    names = []
    for n in NAME.findall(middle):
        if len(n) >= 3 and n in REPOSITORY and n not in own and n not in names \
                and n not in shown | bound | PYTHONS_OWN:
            names.append(n)
    return names


def spans(kind, want):
    pool = []
    for name, text in held:
        lines = text.split("\n")
        pool += [(name, lines, a, b) for a, b in candidates(lines, kind)]
    stride = max(1, len(pool) // want)
    chosen = pool[::stride][:want]
    for n, (name, lines, a, b) in enumerate(chosen):
        own = declared("\n".join(lines))
        first = lines[a]
        indent = first[: len(first) - len(first.lstrip())]
        prefix = "\n".join(lines[max(0, a - PREFIX_LINES):a] + [indent])
        middle = "\n".join([first[len(indent):]] + lines[a + 1:b])
        suffix = "\n".join([""] + lines[b:b + SUFFIX_LINES])
        needs = repository_names(prefix, middle, suffix, own)
        yield {"id": f"{kind}-{n:03}", "file": f"jinja2/{name}", "kind": kind,
               "prefix": prefix, "suffix": suffix, "middle": middle,
               "cross_file": bool(needs), "needs": needs}


lines, blocks = list(spans("line", WANT_LINES)), list(spans("block", WANT_BLOCKS))
# Three lines, then a block: any first N spans (--limit) have both kinds.
rows = []
while lines or blocks:
    rows += lines[:3] + blocks[:1]
    lines, blocks = lines[3:], blocks[1:]
for name, chosen in [("spans.jsonl", rows),
                     ("spans-cross-file.jsonl", [r for r in rows if r["cross_file"]])]:
    with open(out / name, "w") as f:
        for row in chosen:
            f.write(json.dumps(row) + "\n")
(out / ".stamp").write_text(stamp)
log(f"{len(rows)} spans ({sum(r['cross_file'] for r in rows)} cross-file) "
    f"from {len(held)} held-out files; "
    f"{len(list((out / 'repo' / 'jinja2').glob('*.py')))} files in repo/")
print(out)
