"""The README's links and the docs site's page list.

`make docs` (MkDocs, strict) checks the links between pages under `docs/`; it never reads README.md, which links
into `docs/` from outside. This checks those links (files and anchors) and that every page under `docs/` is in
mkdocs.yml's nav and every nav entry exists, without building the site.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"

_FENCE = re.compile(r"^ {0,3}```.*?^ {0,3}```[^\n]*$", re.M | re.S)
_CODE_SPAN = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^ {0,3}#{1,6}\s+(.+?)\s*#*\s*$", re.M)


def links(markdown: str) -> list[str]:
    """Targets of the Markdown links and images outside code (fenced blocks and code spans)."""
    prose = _CODE_SPAN.sub("", _FENCE.sub("", markdown))
    return _LINK.findall(prose)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation other than `-` and `_` dropped, spaces as `-`."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    return {slug(h) for h in _HEADING.findall(_FENCE.sub("", markdown))}


def local(target: str) -> bool:
    return not re.match(r"^[a-z][a-z0-9+.-]*:", target)  # http:, https:, mailto: … are not checked here


def nav_pages(nav: Any) -> Iterator[str]:
    """Every page path in an MkDocs nav (nested sections, `title: page` entries and bare page names)."""
    if isinstance(nav, str):
        if local(nav):
            yield nav
    elif isinstance(nav, list):
        for item in nav:
            yield from nav_pages(item)
    elif isinstance(nav, dict):
        for value in nav.values():
            yield from nav_pages(value)


def test_the_helpers_find_links_and_anchors() -> None:
    text = (
        "# Title `x`\n\nSee [a](docs/a.md#b-c), ![i](docs/images/p.png), `[not](a link)` and\n\n"
        "```\n[nor](this.md)\n```\n\n## B, c (`d/e`)\n"
    )
    assert links(text) == ["docs/a.md#b-c", "docs/images/p.png"]
    assert anchors(text) == {"title-x", "b-c-de"}
    assert slug("Connection `prometheus_default`") == "connection-prometheus_default"
    assert slug("GPU Operator files (`include/k8s/`)") == "gpu-operator-files-includek8s"


README_LINKS = [t for t in links((REPO / "README.md").read_text()) if local(t)]


def test_the_readme_links_into_docs() -> None:
    assert any(t.startswith("docs/") and t.endswith(".md") for t in README_LINKS)


@pytest.mark.parametrize("target", README_LINKS)
def test_every_relative_link_in_the_readme_resolves(target: str) -> None:
    path, _, anchor = target.partition("#")
    file = (REPO / path) if path else REPO / "README.md"
    assert file.exists(), f"README.md links to {target}, but {file.relative_to(REPO)} does not exist"
    if anchor:
        assert file.suffix == ".md", f"README.md links to an anchor in {path}, which is not a Markdown page"
        assert anchor in anchors(file.read_text()), f"README.md links to #{anchor}, not a heading of {path}"


def test_every_docs_page_is_in_the_mkdocs_nav_and_every_nav_entry_exists() -> None:
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    assert config["docs_dir"] == "docs"
    listed = list(nav_pages(config["nav"]))
    pages = sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md"))
    assert sorted(set(listed)) == pages, "docs/ pages and mkdocs.yml nav differ"
    assert len(listed) == len(set(listed)), "a page is listed twice in mkdocs.yml nav"
