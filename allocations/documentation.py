"""The project's documentation (README.md and docs/*.md) as pages of the console.

Users of the console do not have the repository at hand, yet forms and pages point at
``docs/glossary.md`` and its neighbours, so the console serves them at ``/docs/<name>/``.
The Markdown is rendered by the small converter below (headings, paragraphs, lists, tables,
fenced code, inline code, links and bold): the project's docs use nothing else, and it needs
no package beyond Django. Every piece of text is escaped before any markup is added, so a page
can hold no HTML of its own.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.utils.safestring import SafeString, mark_safe

NAME = re.compile(r"^[a-z0-9][a-z0-9_-]*$")


@dataclass(frozen=True, slots=True)
class Document:
    name: str  # the URL's part: "glossary" for docs/glossary.md, "readme" for README.md
    path: Path

    @property
    def title(self) -> str:
        for line in self.path.read_text(encoding="utf-8").splitlines():
            if line.startswith("# "):
                return line[2:].strip().strip("`")
        return self.name


def documents() -> list[Document]:
    """README.md first, then docs/*.md by name; what the console serves and nothing else."""
    base = Path(settings.BASE_DIR)
    found = []
    if (base / "README.md").is_file():
        found.append(Document("readme", base / "README.md"))
    found += [
        Document(p.stem, p)
        for p in sorted((base / "docs").glob("*.md"))
        if NAME.match(p.stem) and p.is_file()
    ]
    return found


def document(name: str) -> Document | None:
    return next((d for d in documents() if d.name == name), None)


def _doc_url(target: str, names: set[str]) -> str | None:
    """The console's URL of a link to another document (``docs/x.md``, ``x.md``, ``README.md``,
    with an optional ``#anchor``), or None when it names none the console serves."""
    path, _, anchor = target.partition("#")
    stem = path.rsplit("/", 1)[-1]
    if not stem.endswith(".md") or path.startswith(("../", "/")):
        return None
    name = "readme" if stem == "README.md" else stem[:-3]
    if name not in names:
        return None
    return f"/docs/{name}/" + (f"#{anchor}" if anchor else "")


_CODE = re.compile(r"`([^`]+)`")
_LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")
_BOLD = re.compile(r"\*\*(.+?)\*\*")
_EMPHASIS = re.compile(r"(?<![\w*])\*(?![\s*])([^*]+?)(?<!\s)\*(?![\w*])")


def _inline(text: str, names: set[str]) -> str:
    """Escape ``text`` and add its inline markup: code spans (kept verbatim), links, bold."""
    pieces: list[str] = []

    def code(match: re.Match[str]) -> str:
        inner = match.group(1)
        url = _doc_url(inner, names)
        rendered = f"<code>{html.escape(inner)}</code>"
        pieces.append(f'<a href="{url}">{rendered}</a>' if url else rendered)
        return f"\x00{len(pieces) - 1}\x00"

    text = _CODE.sub(code, text)

    def link(match: re.Match[str]) -> str:
        label, target = match.group(1), match.group(2)
        url = _doc_url(target, names)
        if url is None and re.match(r"^https?://", target):
            url = target
        if url is None and target.startswith("#"):
            url = target
        label_html = _BOLD.sub(r"<strong>\1</strong>", html.escape(label))
        pieces.append(f'<a href="{html.escape(url)}">{label_html}</a>' if url else label_html)
        return f"\x00{len(pieces) - 1}\x00"

    text = _LINK.sub(link, text)
    text = _BOLD.sub(r"<strong>\1</strong>", html.escape(text))
    text = _EMPHASIS.sub(r"<em>\1</em>", text)
    # Put the code spans and links back (their placeholders came through escaping unchanged).
    return re.sub(r"\x00(\d+)\x00", lambda m: pieces[int(m.group(1))], text)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _row(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def render(text: str) -> SafeString:
    """The HTML of a Markdown page (the subset the project's docs use), escaped throughout."""
    names = {d.name for d in documents()}
    out: list[str] = []
    lines = text.splitlines()
    i = 0
    paragraph: list[str] = []

    def flush() -> None:
        if paragraph:
            out.append(f"<p>{_inline(' '.join(paragraph), names)}</p>")
            paragraph.clear()

    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if stripped.startswith("```"):  # 1. fenced code, verbatim
            flush()
            body = []
            i += 1
            while i < len(lines) and not lines[i].strip().startswith("```"):
                body.append(lines[i])
                i += 1
            out.append(f"<pre><code>{html.escape(chr(10).join(body))}</code></pre>")
            i += 1
            continue
        heading = re.match(r"^(#{1,6})\s+(.*)$", line)
        if heading:  # 2. headings, with an anchor
            flush()
            level, title = len(heading.group(1)), heading.group(2).strip()
            out.append(f'<h{level} id="{_slug(title)}">{_inline(title, names)}</h{level}>')
            i += 1
            continue
        if (
            stripped.startswith("|")
            and i + 1 < len(lines)
            and re.match(r"^\s*\|[\s:|-]+\|\s*$", lines[i + 1])
        ):
            flush()  # 3. a table: header, separator, rows
            head = "".join(f"<th>{_inline(c, names)}</th>" for c in _row(line))
            rows = []
            i += 2
            while i < len(lines) and lines[i].strip().startswith("|"):
                rows.append(
                    "<tr>" + "".join(f"<td>{_inline(c, names)}</td>" for c in _row(lines[i])) + "</tr>"
                )
                i += 1
            out.append(
                f'<table class="table"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'
            )
            continue
        item = re.match(r"^(\s*)([-*]|\d+\.)\s+(.*)$", line)
        if item and not line.startswith("    "):  # 4. a list; indented lines continue an item
            flush()
            ordered = item.group(2)[0].isdigit()
            items: list[str] = []
            while i < len(lines):
                current = re.match(r"^(\s*)([-*]|\d+\.)\s+(.*)$", lines[i])
                if current and len(current.group(1)) <= len(item.group(1)):
                    items.append(current.group(3).strip())
                elif lines[i].strip() and (lines[i].startswith(" ") or current):
                    items[-1] += " " + lines[i].strip()
                else:
                    break
                i += 1
            tag = "ol" if ordered else "ul"
            out.append(f"<{tag}>" + "".join(f"<li>{_inline(x, names)}</li>" for x in items) + f"</{tag}>")
            continue
        if stripped.startswith(">"):  # 5. a quote
            flush()
            quoted = []
            while i < len(lines) and lines[i].strip().startswith(">"):
                quoted.append(lines[i].strip()[1:].strip())
                i += 1
            out.append(f"<blockquote><p>{_inline(' '.join(quoted), names)}</p></blockquote>")
            continue
        if not stripped:
            flush()
        else:
            paragraph.append(stripped)
        i += 1
    flush()
    return mark_safe("\n".join(out))  # built from escaped text only
