#!/usr/bin/env python3
"""Convert one DocBook-generated XHTML chapter to Markdown (python3 stdlib only).

Usage: html2md.py IN.html OUT.md

Built for the chapters of debian-reference and maint-guide (DocBook XSL output):
- h1..h6 become '#'..'######' headings, so a Markdown chunker splits by section;
- navigation headers/footers and the per-chapter table of contents are dropped;
- <pre> becomes a fenced code block, lists become '- ' items, tables become
  pipe tables, admonitions (note/tip/warning/caution/important) become a bold
  label followed by their paragraphs (no heading, so they stay in their section);
- links keep their text only, images are dropped.
The output is deterministic (same input, same bytes).
"""
import re
import sys
from html.parser import HTMLParser

SKIP_DIV_CLASSES = {"navheader", "navfooter", "toc", "list-of-tables", "list-of-examples",
                    "list-of-figures"}
ADMONITIONS = {"note", "tip", "warning", "caution", "important"}
BLOCK_TAGS = {"p", "div", "dl", "dt", "dd", "ul", "ol", "blockquote", "hr", "table",
              "h1", "h2", "h3", "h4", "h5", "h6", "pre", "li", "tr"}
VOID = {"br", "hr", "img", "col", "meta", "link", "input", "area", "base", "wbr"}


class Converter(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.out = []            # finished blocks (strings)
        self.inline = []         # pieces of the current paragraph
        self.stack = []          # open tags: (tag, flags)
        self.skip = 0            # >0 while inside a skipped subtree
        self.pre = None          # list of raw pieces while inside <pre>
        self.list_depth = 0
        self.admon = 0           # >0 inside an admonition div
        self.table = None        # list of rows (each a list of cell strings) of the current table
        self.cell = None         # pieces of the current table cell
        self.table_depth = 0
        self.heading = None      # level while inside h1..h6
        self.in_title = False
        self.in_code = 0         # >0 inside inline code (no nested markup)
        self.pending_li = None   # list marker waiting for the item's first text

    # -- helpers ---------------------------------------------------------
    def emit_text(self, s):
        if self.cell is not None:
            self.cell.append(s)
        else:
            self.inline.append(s)

    def flush(self, prefix=""):
        text = re.sub(r"\s+", " ", "".join(self.inline)).strip()
        self.inline = []
        text = re.sub(r"``", "", text)
        text = re.sub(r"\*\*\s*\*\*", "", text).strip()
        if text:
            if self.pending_li is not None:
                prefix = self.pending_li + prefix
                self.pending_li = None
            elif self.list_depth:
                prefix = "  " * self.list_depth + prefix
            self.out.append(prefix + text)

    def list_prefix(self):
        return "  " * max(self.list_depth - 1, 0) + "- "

    # -- parser callbacks ---------------------------------------------------
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        cls = set((a.get("class") or "").split())
        if tag in VOID:
            if self.skip:
                return
            if tag == "br":
                if self.pre is not None:
                    self.pre.append("\n")
                else:
                    self.emit_text(" ")
            return
        flags = set()
        if self.skip:
            self.stack.append((tag, {"skipped"}))
            self.skip += 1
            return
        if tag in ("head", "script", "style") or (tag == "div" and cls & SKIP_DIV_CLASSES):
            self.stack.append((tag, {"skipped"}))
            self.skip = 1
            return
        if self.pre is not None:
            self.stack.append((tag, flags))
            return
        if tag == "div" and cls & ADMONITIONS:
            self.flush()
            self.admon += 1
            flags.add("admon")
        elif tag in ("h1", "h2", "h3", "h4", "h5", "h6"):
            self.flush()
            if self.admon or self.table is not None:
                flags.add("admon-title")
            else:
                self.heading = int(tag[1])
        elif tag == "pre":
            self.flush()
            self.pre = []
        elif tag in ("ul", "ol"):
            self.flush()
            self.list_depth += 1
        elif tag == "li":
            self.flush()
            self.pending_li = self.list_prefix()
        elif tag == "table" and not self.admon:
            self.flush()
            if self.table is None:
                self.table = []
                flags.add("table-root")
            self.table_depth += 1
        elif tag == "tr" and self.table is not None and self.table_depth == 1:
            self.table.append([])
        elif tag in ("td", "th") and self.table is not None and self.table_depth == 1:
            self.cell = []
        elif tag in ("td", "th") and self.admon:
            pass
        elif tag == "code" or (tag == "span" and cls & {"command", "filename"}):
            if not self.heading and not self.in_code:
                self.emit_text("`")
                flags.add("code")
                self.in_code += 1
        elif tag in ("strong", "b") and not self.heading and self.cell is None and not self.in_code:
            self.emit_text("**")
            flags.add("strong")
        elif tag == "p" and "title" in cls and self.table is None:
            self.flush()
        elif tag in BLOCK_TAGS:
            self.flush()
        self.stack.append((tag, flags))

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        # pop up to and including the matching tag (tolerate sloppy nesting)
        idx = None
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i][0] == tag:
                idx = i
                break
        if idx is None:
            return
        while len(self.stack) > idx:
            t, flags = self.stack.pop()
            self._close(t, flags)

    def _close(self, tag, flags):
        if "skipped" in flags:
            self.skip -= 1
            return
        if self.pre is not None and tag != "pre":
            return
        if tag == "pre":
            body = "".join(self.pre).strip("\n")
            self.pre = None
            body = body.replace("```", "`\u200b``")
            if self.cell is not None:
                self.cell.append(" " + re.sub(r"\s+", " ", body) + " ")
            else:
                self.out.append("```\n" + body + "\n```")
            return
        if "admon" in flags:
            self.flush()
            self.admon -= 1
            return
        if "admon-title" in flags:
            text = re.sub(r"\s+", " ", "".join(self.inline)).strip()
            self.inline = []
            if text:
                self.out.append("**" + text + ":**")
            return
        if tag in ("h1", "h2", "h3", "h4", "h5", "h6") and self.heading:
            text = re.sub(r"\s+", " ", "".join(self.inline)).strip()
            self.inline = []
            if text:
                self.out.append("#" * self.heading + " " + text)
            self.heading = None
            return
        if "code" in flags:
            self.emit_text("`")
            self.in_code -= 1
            return
        if "strong" in flags:
            self.emit_text("**")
            return
        if tag in ("td", "th") and self.cell is not None and self.table_depth == 1:
            text = re.sub(r"\s+", " ", "".join(self.cell)).strip().replace("|", "\\|")
            if self.table:
                self.table[-1].append(text)
            self.cell = None
            return
        if tag == "table" and self.table is not None and not self.admon:
            self.table_depth -= 1
            if "table-root" in flags:
                self._emit_table()
            return
        if tag in ("ul", "ol"):
            self.flush()
            self.list_depth = max(self.list_depth - 1, 0)
            return
        if tag == "li":
            self.flush()
            return
        if tag in BLOCK_TAGS:
            self.flush()

    def _emit_table(self):
        rows = [r for r in self.table if any(c for c in r)]
        self.table = None
        if not rows:
            return
        width = max(len(r) for r in rows)
        lines = []
        for i, r in enumerate(rows):
            r = r + [""] * (width - len(r))
            lines.append("| " + " | ".join(r) + " |")
            if i == 0:
                lines.append("|" + "---|" * width)
        self.out.append("\n".join(lines))

    def handle_data(self, data):
        if self.skip:
            return
        if self.pre is not None:
            self.pre.append(data)
            return
        self.emit_text(data)

    def result(self):
        self.flush()
        text = "\n\n".join(self.out)
        return text.strip() + "\n"


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: html2md.py IN.html OUT.md")
    with open(sys.argv[1], encoding="utf-8") as f:
        html = f.read()
    conv = Converter()
    conv.feed(html)
    conv.close()
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        f.write(conv.result())


if __name__ == "__main__":
    main()
