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


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_docs_never_point_outside_the_repository():
    """Backticked paths (`docs/...`, `tests/...`) are the repository's; markdown links are relative to their
    document, as a markdown viewer reads them, and an anchor names a heading of the target."""
    for doc in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]:
        text = doc.read_text()
        assert "DESIGN.md" not in text, f"{doc.name} refers to the design card, which is not shipped"
        targets = [(m, doc.parent) for m in re.findall(r"\]\(([^)\s]+)\)", text)]
        targets += [(m, ROOT) for m in re.findall(r"`((?:\.\./|docs/|tests/|examples/)[\w./-]+)`", text)]
        for target, base in targets:
            if "://" in target or target.startswith("mailto:"):
                continue
            path, _, anchor = target.partition("#")
            resolved = (base / path).resolve() if path else doc
            assert resolved.is_relative_to(ROOT), f"{doc.name}: {target} is outside the repository"
            assert resolved.exists() or "*" in path, f"{doc.name}: {target} does not exist"
            if anchor and resolved.suffix == ".md":
                slugs = {_slug(h) for h in re.findall(r"^#+ (.+)$", resolved.read_text(), re.M)}
                assert anchor in slugs, f"{doc.name}: {target}: no heading with that anchor in {resolved.name}"
