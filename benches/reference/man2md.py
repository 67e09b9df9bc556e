#!/usr/bin/env python3
"""Convert man pages to Markdown via `mandoc -T html` (python3 stdlib only).

Usage: man2md.py MANDOC JOBS.tsv

JOBS.tsv has one line per page: SOURCE<TAB>DEST.md<TAB>TITLE, where SOURCE is a
(gzipped) man(7) or mdoc(7) page, DEST.md the Markdown file to write and TITLE the
page name with its section, e.g. "ls(1)". mandoc renders the page as an HTML
fragment; this script turns that fragment into Markdown:

- H1: "# TITLE — <one-line description from the NAME section>";
- man sections (.SH/.Sh) become "##", subsections (.SS/.Ss) "###";
- .nf/.EX blocks (<pre>) become fenced code; tagged lists (.TP/.IP, .Bl -tag)
  become "- **term**" items with the description below; tbl tables become pipe
  tables; bullet/enumerated lists become "-"/"1." items;
- inline bold/italic/code are kept as plain text (no emphasis markers), so that
  options and identifiers read exactly as on the page;
- the header/footer tables (title, volume, date) are dropped.

The output is deterministic (no dates, no tool versions). Exits 1 if any page fails.
"""
import concurrent.futures
import html.parser
import os
import re
import subprocess
import sys

BLOCK = {"p", "div", "section", "pre", "dl", "dt", "dd", "ul", "ol", "li", "table",
         "tr", "td", "th", "h1", "h2", "h3", "br"}


class Node:
    __slots__ = ("tag", "attrs", "children")

    def __init__(self, tag, attrs):
        self.tag = tag
        self.attrs = attrs
        self.children = []


VOID = {"br", "hr", "img", "meta", "link", "col", "wbr"}


class TreeBuilder(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.root = Node("root", {})
        self.stack = [self.root]

    def handle_starttag(self, tag, attrs):
        n = Node(tag, dict(attrs))
        self.stack[-1].children.append(n)
        if tag not in VOID:
            self.stack.append(n)

    def handle_startendtag(self, tag, attrs):
        self.stack[-1].children.append(Node(tag, dict(attrs)))

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        for i in range(len(self.stack) - 1, 0, -1):
            if self.stack[i].tag == tag:
                del self.stack[i:]
                return

    def handle_data(self, data):
        self.stack[-1].children.append(data)


def cls(n):
    return n.attrs.get("class", "") or ""


def inline_text(n, pre=False):
    """Plain text of a node; <br> becomes a newline."""
    out = []

    def walk(x):
        if isinstance(x, str):
            out.append(x)
            return
        if x.tag == "br":
            out.append("\x00" if not pre else "")
            return
        for c in x.children:
            walk(c)

    walk(n)
    return "".join(out)


def squash(s):
    """Reflow source line wrapping; keep explicit <br> line breaks (\\x00)."""
    lines = [re.sub(r"\s+", " ", ln).strip() for ln in s.split("\x00")]
    return "\n".join(ln for ln in lines if ln)


def reflow(s):
    return re.sub(r"[\s\x00]+", " ", s).strip()


class Renderer:
    def __init__(self):
        self.blocks = []  # list of strings (already formatted blocks)

    def emit(self, text, indent=""):
        if not text.strip():
            return
        lines = text.split("\n")
        self.blocks.append("\n".join((indent + ln) if ln else ln for ln in lines))

    def para(self, n, indent):
        # A paragraph can mix inline content and block children (mandoc nests
        # <div class="Bd-indent"> etc. in <p> rarely); render inline runs as text.
        buf = []

        def flush():
            t = squash("".join(buf))
            buf.clear()
            if t:
                self.emit(t, indent)

        for c in n.children:
            if isinstance(c, Node) and c.tag in BLOCK and c.tag != "br":
                flush()
                self.block(c, indent)
            else:
                buf.append(c if isinstance(c, str) else inline_text(c))
        flush()

    def pre(self, n, indent):
        t = inline_text(n, pre=True)
        t = t.expandtabs(8)
        lines = [ln.rstrip() for ln in t.split("\n")]
        while lines and not lines[0].strip():
            lines.pop(0)
        while lines and not lines[-1].strip():
            lines.pop()
        out = []
        for ln in lines:
            if not ln and out and not out[-1]:
                continue
            out.append(ln)
        # remove common indentation
        ind = min((len(ln) - len(ln.lstrip()) for ln in out if ln.strip()), default=0)
        out = [ln[ind:] for ln in out]
        if out:
            self.emit("```\n" + "\n".join(out) + "\n```", indent)

    def table(self, n, indent):
        if "head" in cls(n) or "foot" in cls(n):
            return
        rows = []
        for tr in self.find_all(n, "tr"):
            cells = [reflow(inline_text(td)).replace("|", "\\|")
                     for td in tr.children if isinstance(td, Node) and td.tag in ("td", "th")]
            if any(cells):
                rows.append(cells)
        if not rows:
            return
        if "Nm" in cls(n):  # mdoc synopsis: command name + arguments
            self.emit("\n".join(" ".join(c for c in r if c) for r in rows), indent)
            return
        width = max(len(r) for r in rows)
        if width == 1:
            self.emit("\n".join(r[0] for r in rows), indent)
            return
        rows = [r + [""] * (width - len(r)) for r in rows]
        lines = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * width]
        lines += ["| " + " | ".join(r) + " |" for r in rows[1:]]
        self.emit("\n".join(lines), indent)

    @staticmethod
    def find_all(n, tag):
        out = []
        for c in n.children:
            if isinstance(c, Node):
                if c.tag == tag:
                    out.append(c)
                elif c.tag != "table":
                    out.extend(Renderer.find_all(c, tag))
        return out

    def dl(self, n, indent):
        bullet = False
        for c in n.children:
            if not isinstance(c, Node):
                continue
            if c.tag == "dt":
                t = reflow(inline_text(c))
                # .IP \(bu (or a lone dash/star) is a bullet list, not a term
                bullet = t in ("•", "·", "o", "-", "*", "+", "–", "—")
                if t and not bullet:
                    self.emit("- **" + t + "**", indent)
            elif c.tag == "dd":
                start = len(self.blocks)
                self.container(c, indent + "  ")
                if bullet:
                    if len(self.blocks) > start:
                        self.blocks[start] = indent + "- " + self.blocks[start][len(indent) + 2:]
                    bullet = False

    def lst(self, n, indent, ordered):
        i = 0
        for c in n.children:
            if not isinstance(c, Node) or c.tag != "li":
                continue
            i += 1
            mark = f"{i}. " if ordered else "- "
            start = len(self.blocks)
            self.container(c, indent + " " * len(mark))
            if len(self.blocks) > start:
                first = self.blocks[start]
                stripped = first[len(indent) + len(mark):] if first.startswith(indent + " " * len(mark)) else first.lstrip()
                self.blocks[start] = indent + mark + stripped
            else:
                self.emit(mark.strip(), indent)

    def container(self, n, indent):
        """Children may be a mix of inline content and blocks."""
        buf = []

        def flush():
            t = squash("".join(buf))
            buf.clear()
            if t:
                self.emit(t, indent)

        for c in n.children:
            if isinstance(c, Node) and c.tag in BLOCK and c.tag != "br":
                flush()
                self.block(c, indent)
            elif isinstance(c, Node) and c.tag == "br":
                buf.append("\x00")
            else:
                buf.append(c if isinstance(c, str) else inline_text(c))
        flush()

    def block(self, n, indent=""):
        t = n.tag
        if t == "section":
            self.container(n, indent)
        elif t == "h1":
            self.emit("## " + reflow(inline_text(n)), "")
        elif t in ("h2", "h3"):
            self.emit("### " + reflow(inline_text(n)), "")
        elif t == "p":
            self.para(n, indent)
        elif t == "pre":
            self.pre(n, indent)
        elif t == "dl":
            self.dl(n, indent)
        elif t == "ul":
            self.lst(n, indent, False)
        elif t == "ol":
            self.lst(n, indent, True)
        elif t == "table":
            self.table(n, indent)
        elif t in ("div", "li", "dd", "dt", "td", "tr", "th"):
            self.container(n, indent)
        elif t == "br":
            pass
        else:
            self.container(n, indent)


def convert(mandoc, src, dest, title):
    r = subprocess.run([mandoc, "-T", "html", "-O", "fragment", src],
                       capture_output=True)
    if r.returncode > 2 or not r.stdout:  # mandoc: 1/2 = warnings/errors, output still usable
        raise RuntimeError(f"mandoc failed ({r.returncode}) on {src}: {r.stderr.decode(errors='replace')[:300]}")
    tb = TreeBuilder()
    tb.feed(r.stdout.decode("utf-8", errors="replace"))
    tb.close()
    rd = Renderer()
    rd.container(tb.root, "")
    blocks = rd.blocks
    # one-line description from the NAME section: text after " - " / " — "
    desc = ""
    for i, b in enumerate(blocks):
        if re.match(r"## (NAME|NOMBRE)\b", b) and i + 1 < len(blocks):
            first = blocks[i + 1].split("\n")[0]  # several names: keep the first line
            m = re.search(r"\s(?:-|\\-|—|–)\s+(.*)", first)
            if m:
                desc = reflow(m.group(1))
            break
    head = f"# {title}" + (f" — {desc}" if desc else "")
    text = head + "\n\n" + "\n\n".join(blocks) + "\n"
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    with open(dest, "w", encoding="utf-8") as f:
        f.write(text)


def main():
    if len(sys.argv) != 3:
        print("usage: man2md.py MANDOC JOBS.tsv", file=sys.stderr)
        return 2
    mandoc, jobs_path = sys.argv[1], sys.argv[2]
    with open(jobs_path, encoding="utf-8") as f:
        jobs = [ln.rstrip("\n").split("\t") for ln in f if ln.strip()]
    errors = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 4) as ex:
        futs = {ex.submit(convert, mandoc, *j): j for j in jobs}
        for fu in concurrent.futures.as_completed(futs):
            try:
                fu.result()
            except Exception as e:  # report all failures
                errors.append(f"{futs[fu][0]}: {e}")
    for e in sorted(errors):
        print("man2md: " + e, file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
