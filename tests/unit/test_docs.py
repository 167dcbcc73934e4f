"""Every page under doc/ is reachable from doc/index.md, and every page the
index names exists."""

import pathlib
import re

DOC = pathlib.Path(__file__).resolve().parents[2] / "doc"


def test_index_links_every_page():
    linked = set(re.findall(r"\]\(([\w.-]+\.md)\)", (DOC / "index.md").read_text()))
    pages = {p.name for p in DOC.glob("*.md")} - {"index.md"}
    assert linked == pages
