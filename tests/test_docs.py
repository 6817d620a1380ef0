"""The documentation: README's front page and its links (default suite), and the site built by
README's own command with warnings as errors (marker ``docs``: ``pytest -m docs``, needs the
``docs`` extra; ``.ci/run`` runs it as its own step after the default suite)."""
from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"


def readme_build_command() -> list[str]:
    """The one documentation build command README gives (its ``sphinx-build`` line)."""
    lines = [line for line in README.read_text().splitlines() if "sphinx-build" in line
             and line.lstrip().startswith(".venv/bin/")]
    assert len(lines) == 1, f"README should give one sphinx-build command, found {lines}"
    command = lines[0].split("&&")[-1].strip()
    return shlex.split(command)


def test_readme_is_a_front_page():
    text = README.read_text()
    assert len(text.splitlines()) <= 250
    for heading in ("## Install", "## Quick start", "## One result", "## Documentation", "## Tests"):
        assert heading in text


def test_readme_links_point_to_pages_that_exist():
    links = re.findall(r"\]\((docs/[^)#]+)", README.read_text())
    assert len(links) >= 15
    missing = [link for link in links if not (REPO / link).exists()]
    assert missing == []


def test_readme_build_command_is_sphinx_with_warnings_as_errors():
    command = readme_build_command()
    assert command[0].endswith("sphinx-build")
    assert "-W" in command and command[-2:] == ["docs", "docs/_build/html"]


def test_every_guide_page_is_in_the_user_guide():
    """docs/user_guide.md lists the guide by a glob, so a page added to docs/guide/ is in it."""
    guide = (REPO / "docs" / "user_guide.md").read_text()
    assert ":glob:" in guide and "\nguide/*\n" in guide
    assert list((REPO / "docs" / "guide").glob("*.md"))


@pytest.mark.docs
@pytest.mark.timeout(900)
def test_site_builds_with_readme_command(tmp_path):
    """README's command, output redirected to a temporary directory: exit 0 with -W (so no
    warning at all), every estimator of the registry on the reference page, every gallery
    example executed with at least one figure."""
    pytest.importorskip("sphinx_gallery", reason="needs the docs extra: pip install -e '.[docs]'")
    from cvflow.estimators import REGISTRY

    command = readme_build_command()
    command[0] = str(Path(sys.executable).with_name("sphinx-build"))
    out = tmp_path / "html"
    command[-1] = str(out)
    command[1:1] = ["-d", str(tmp_path / "doctrees")]
    res = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-6000:]

    reference = (out / "reference" / "estimators.html").read_text()
    for name in REGISTRY:
        assert f'id="estimator-{name.replace("_", "-")}"' in reference, name
    examples = sorted((REPO / "examples").glob("plot_*.py"))
    assert len(examples) >= 6
    for example in examples:
        page = out / "auto_examples" / f"{example.stem}.html"
        assert page.exists(), page
        assert re.search(rf"sphx_glr_{example.stem}_\d+\.png", page.read_text()), example.name
    for page in (REPO / "docs" / "guide").glob("*.md"):
        assert (out / "guide" / f"{page.stem}.html").exists(), page.name

