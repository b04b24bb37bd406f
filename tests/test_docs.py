"""The README and docs/: a README a reader takes in at once, and no link or file named in them that is missing."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
TOP = ("ablations/", "bench/", "vit/", "docs/", "results/reference/", "benchmarks/", "tests/", ".ci/")


def test_the_readme_fits_in_200_lines_and_opens_with_what_vitbench_answers():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert headings[:3] == ["## What it answers", "## Quick start", "## Measure a model"]


def test_the_readmes_answers_are_the_committed_reports():
    """Every figure the README quotes from the reference (a difference's interval, a ratio, a share of the error)
    is in the committed report's findings table, so the README never says what the data no longer do."""
    readme = (ROOT / "README.md").read_text()
    quoted = readme.split("## What it answers", 1)[1].split("## Quick start", 1)[0]
    report = (ROOT / "results" / "reference" / "REPORT.md").read_text()
    findings = report.split("## Findings", 1)[1].split("\n## ", 1)[0]
    figures = re.findall(r"\[[-−\d.]+, [-−+\d.]+\]|[×÷]\d+\.\d+|\d+ % of its [\d.]+ % error|[+-]?\d+\.\d+ points"
                         r"|[+-]\d+\.\d+(?= \[)", quoted)
    assert len(figures) >= 8 and [f for f in figures if f not in findings] == []


def test_every_link_and_every_repository_path_the_docs_name_exists():
    """Markdown links resolve from the page that holds them; a path in backticks under one of the repository's
    folders (a sweep's TOML, a benchmark script) exists in the checkout, wildcards and placeholders aside."""
    missing = []
    for page in PAGES:
        text = page.read_text()
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            if not (page.parent / target).exists():
                missing.append(f"{page.relative_to(ROOT)}: link {target}")
        for path in re.findall(r"`([A-Za-z0-9_./-]+)`", text):
            if path.startswith(TOP) and not any(c in path for c in "<*$") and "/" in path.rstrip("/"):
                if not (ROOT / path).exists() and not (ROOT / path.rstrip("/")).exists():
                    missing.append(f"{page.relative_to(ROOT)}: path {path}")
    assert not missing, "\n".join(missing)


def test_the_committed_reference_report_opens_with_its_findings_and_reads_in_minutes():
    """The reference REPORT.md: its findings table within the first 40 lines, 550 lines at most, no sentence of a
    verdict over 60 words; every pair in verdicts.csv and every setting in settings.csv beside it."""
    import pandas as pd

    reference = ROOT / "results" / "reference"
    lines = (reference / "REPORT.md").read_text().splitlines()
    assert len(lines) <= 550 and "## Findings" in lines[:40]
    body = "\n".join(lines[:lines.index("## Method")])
    verdicts = [line for line in body.splitlines() if line.startswith("**")]
    words = [len(s.split()) for line in verdicts for s in re.split(r"(?<=[.!?])\*{0,2}\s+", line)]
    assert verdicts and max(words) <= 60
    pairs, settings = pd.read_csv(reference / "verdicts.csv"), pd.read_csv(reference / "settings.csv")
    blocks, block = [], []
    for line in body.splitlines() + [""]:
        if line.startswith("|"):
            block.append(line)
        elif block:
            blocks.append(block)
            block = []
    pair_rows = sum(len(b) - 2 for b in blocks if " a | " in b[0] and " b | " in b[0])
    setting_rows = sum(len(b) - 2 for b in blocks if "| test acc % [95 % interval] |" in b[0])
    assert pair_rows == len(pairs) and setting_rows == len(settings)


def test_every_make_variable_is_named_where_the_docs_list_every_target_and_variable():
    makefile = (ROOT / "Makefile").read_text()
    variables = re.findall(r"^([A-Z_]+)\s*\?=", makefile, flags=re.M)
    listed = (ROOT / "docs" / "targets.md").read_text()
    assert len(variables) > 30 and [v for v in variables if not re.search(rf"\b{v}\b", listed)] == []
