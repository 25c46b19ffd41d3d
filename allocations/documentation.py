"""The project's documentation (README.md and docs/*.md) as pages of the console.

Users of the console do not have the repository at hand, yet forms and pages point at
``docs/glossary.md`` and its neighbours, so the console serves them at ``/docs/<name>/``.
The Markdown is rendered by markdown-it-py (CommonMark and tables) with raw HTML off, so a page
can hold no HTML of its own, and links to anything but the web, an anchor or another served
document are refused by its link check; links and code spans naming a served document point
at its page in the console.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.utils.safestring import SafeString, mark_safe
from markdown_it import MarkdownIt
from markdown_it.token import Token

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


_WEB = re.compile(r"^(https?://|#)")


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _parser(names: set[str]) -> MarkdownIt:
    """CommonMark with tables, no raw HTML; a link must go to the web, an anchor or a document."""
    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    md.validateLink = lambda url: bool(_WEB.match(url)) or _doc_url(url, names) is not None  # type: ignore[method-assign]
    return md


def _linked_code(child: Token, url: str) -> list[Token]:
    """A code span naming a served document, wrapped in a link to its page."""
    opening = Token("link_open", "a", 1, attrs={"href": url})
    return [opening, child, Token("link_close", "a", -1)]


def render(text: str) -> SafeString:
    """The HTML of a Markdown page: headings get anchors, tables the console's look, links and
    code spans naming a served document point at its page."""
    names = {d.name for d in documents()}
    md = _parser(names)
    tokens = md.parse(text)
    for i, token in enumerate(tokens):
        if token.type == "heading_open":
            token.attrSet("id", _slug(tokens[i + 1].content))
        elif token.type == "table_open":
            token.attrSet("class", "table")
        elif token.type == "inline" and token.children:
            children: list[Token] = []
            for child in token.children:
                if child.type == "link_open":
                    url = _doc_url(str(child.attrGet("href")), names)
                    if url is not None:
                        child.attrSet("href", url)
                if child.type == "code_inline" and (url := _doc_url(child.content, names)) is not None:
                    children += _linked_code(child, url)
                else:
                    children.append(child)
            token.children = children
    return mark_safe(md.renderer.render(tokens, md.options, {}))  # raw HTML is off: all text is escaped
