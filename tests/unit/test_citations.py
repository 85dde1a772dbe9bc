"""Code cites only what a reader of this repository can open: no design notes kept elsewhere (DESIGN.md,
STYLE.md, the shared folder beside the repository) and no issue numbers; the design lives in docs/."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = re.compile(
    r"DESIGN\.md|STYLE\.md|\.\./shared\b|(?<![\w.-])shared/(?:fixtures|realservers|notes)\b|\bissues? #?\d+",
    re.IGNORECASE,
)


def test_no_citation_points_outside_the_repository():
    found = []
    for folder in ("lpxtop", "tests", "benchmarks", "screenshots"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if FORBIDDEN.search(line) and path.name != "test_citations.py":
                    found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert found == []
