"""The README stays a newcomer's page and the docs site stays buildable, so links cannot rot.

The site is built the way `make docs` builds it (`mkdocs build --strict`): a broken link or anchor, a page
missing from the nav, or a benchmark table whose result file is gone fails the build.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
README_MAX_LINES = 260
#: Markdown links and images, `[text](target)`; the target up to the first space or closing parenthesis.
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def test_readme_is_short() -> None:
    lines = README.read_text().count("\n")
    assert lines <= README_MAX_LINES, (
        f"README.md has {lines} lines (at most {README_MAX_LINES}): move the detail to a page in docs/ and link it"
    )


def test_readme_relative_links_exist() -> None:
    text = README.read_text()
    targets = LINK.findall(text)
    assert targets, "README.md links to nothing; it should link into docs/"
    missing = []
    for target in targets:
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):  # http:, mailto:, in-page anchors
            continue
        path = target.split("#", 1)[0]
        if not (README.parent / path).exists():
            missing.append(target)
    assert not missing, f"README.md links to files that do not exist: {missing}"


def test_docs_build_strict(tmp_path: Path) -> None:
    for module in ("mkdocs", "material"):  # dev dependencies: `make test` installs them
        assert importlib.util.find_spec(module) is not None, f"{module} is missing: pip install -e '.[dev]'"
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"),
                             "-d", str(site)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stdout}\n{result.stderr}"
    pages = list(site.rglob("*.html"))
    assert (site / "index.html").is_file() and len(pages) > 10
    leftover = [p.relative_to(site) for p in pages if "<!-- table:" in p.read_text()]
    assert not leftover, f"table markers the docs hook did not replace: {leftover}"
