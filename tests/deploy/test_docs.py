"""The docs stay inside the repository, and docs/configuration.md names every TENSORWIRE_* variable the code reads."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PARTS = ("client", "protocol", "dispatcher", "backends", "autograd", "collectives", "hub")


def test_every_environment_variable_is_documented():
    used = set()
    for part in PARTS:
        for f in (ROOT / part).rglob("*.py"):
            used |= set(re.findall(r"TENSORWIRE_[A-Z0-9_]*[A-Z0-9]", f.read_text()))
    documented = set(re.findall(r"^\| `(TENSORWIRE_[A-Z0-9_]+)`", (ROOT / "docs/configuration.md").read_text(), re.M))
    assert not used - documented, f"read by the code, not in docs/configuration.md: {sorted(used - documented)}"
    assert not documented - used, f"documented, never read: {sorted(documented - used)}"


def test_docs_never_point_outside_the_repository():
    for doc in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]:
        text = doc.read_text()
        assert "DESIGN.md" not in text, f"{doc.name} refers to the design card, which is not shipped"
        for target in re.findall(r"\]\(([^)#]+)\)|`((?:\.\./|docs/|tests/|examples/)[\w./-]+)`", text):
            path = next(t for t in target if t)
            if "://" in path:
                continue
            resolved = ((doc.parent if path.startswith("../") else ROOT) / path).resolve()
            assert resolved.is_relative_to(ROOT), f"{doc.name}: {path} is outside the repository"
            assert resolved.exists() or "*" in path, f"{doc.name}: {path} does not exist"
