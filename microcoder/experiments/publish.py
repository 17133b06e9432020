"""Publishing reported grids into a record (`experiment report --record DOCS`).

DOCS/<spec>.png (and its budget figures), DOCS/data/<spec>/ (spec.yaml and each run's
metrics.jsonl, config.yaml, summary.json and, where the run kept them, heldout_start.json
and heldout_end.json, or a shared run's config.yaml and shared.yaml: a grid folder the
report redraws from, no checkpoints), DOCS/data/heldout-start (the step-0 evaluations the
runs read), and DOCS/<spec>.md, whose verdict table (between the VERDICTS markers) and
numbers block (between the NUMBERS markers) are rewritten while the hand-written text
around them is kept. DOCS/README.md's summary (between the SUMMARY markers) is rewritten
from every grid published under DOCS/data: the count of verdicts raw and after Holm's
correction across the record, the table with each finding's verdict after Holm (also
written into each page's verdict table), the seeds 80% power at the paper's effects needs,
and the runs whose step-0 evaluation is not published. Nothing outside DOCS is written.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from microcoder.experiments.findings import published_rows, scored_count
from microcoder.experiments.layout import (HELDOUT_FILES, SHARED_FILE, START_CACHE, load_grid_spec, seed_dirs,
                                           shared_target)
from microcoder.experiments.pages import record_summary, verdicts_text
from microcoder.training.metrics import METRICS_FILE


NUMBERS_BEGIN = "<!-- NUMBERS: written by `microcoder experiment report --record`; edits here are lost -->"
NUMBERS_END = "<!-- /NUMBERS -->"
VERDICTS_BEGIN = "<!-- VERDICTS: written by `microcoder experiment report --record` by the rule below; edits here are lost -->"
VERDICTS_END = "<!-- /VERDICTS -->"
SUMMARY_BEGIN = "<!-- SUMMARY: written by `microcoder experiment report --record` from every grid in data/; edits here are lost -->"
SUMMARY_END = "<!-- /SUMMARY -->"
PUBLISHED_FILES = (METRICS_FILE, "config.yaml", "summary.json", *HELDOUT_FILES)
SHARED_FILES = ("config.yaml", SHARED_FILE)


def publish(grid: Path, docs: Path) -> Path:
    """Copy a reported grid's figures and small per-run files under `docs`; refresh
    DOCS/<name>.md's verdict table and numbers."""
    spec = load_grid_spec(grid)
    data = docs / "data" / spec.name
    data.mkdir(parents=True, exist_ok=True)
    _copy(grid / "spec.yaml", data / "spec.yaml")
    for arm in spec.arms:
        # A mirror: a run the grid no longer has (deleted to be redone) leaves the record too.
        for stale in (data / arm).glob("seed-*") if (data / arm).is_dir() else ():
            if not (grid / arm / stale.name).exists():
                shutil.rmtree(stale)
        for run in seed_dirs(grid / arm):
            target = data / arm / run.name
            target.mkdir(parents=True, exist_ok=True)
            names = SHARED_FILES if shared_target(run) is not None else PUBLISHED_FILES
            for name in (*PUBLISHED_FILES, SHARED_FILE):
                if name in names and (run / name).is_file():
                    _copy(run / name, target / name)
                elif (target / name).is_file():
                    (target / name).unlink()  # e.g. the summary of a run that is being redone
    publish_start_cache(grid, docs / "data" / START_CACHE)
    figures = ["figure.png", *(f"figure-{axis}.png" for axis in spec.budget_axes)]
    for figure in figures:
        _copy(grid / figure, docs / f"{spec.name}{figure.removeprefix('figure')}")
    report = (grid / "report.md").read_text(encoding="utf-8")
    verdicts = report.split("## Findings\n", 1)[1].split("\n## Numbers\n", 1)[0].strip()
    numbers = report.split("\n## Numbers\n", 1)[1].strip()
    links = ", ".join(f"[{spec.name}{name.removeprefix('figure')}]({spec.name}{name.removeprefix('figure')})"
                      for name in figures)
    block = f"{NUMBERS_BEGIN}\n{numbers}\n\nFigures: {links}; redraw: " \
            f"`microcoder experiment report {repository_path(docs / 'data' / spec.name)}`.\n{NUMBERS_END}"
    verdict_block = f"{VERDICTS_BEGIN}\n{verdicts}\n{VERDICTS_END}"
    page = docs / f"{spec.name}.md"
    if page.is_file():
        text = page.read_text(encoding="utf-8")
        text = replace_block(page, text, NUMBERS_BEGIN, NUMBERS_END, block)
        if VERDICTS_BEGIN not in text and "## Verdict\n" in text:  # a page from before computed verdicts
            head, rest = text.split("## Verdict\n", 1)
            text = f"{head}## Verdict\n\n{verdict_block}\n{rest}"
        text = replace_block(page, text, VERDICTS_BEGIN, VERDICTS_END, verdict_block)
    else:
        text = (f"# {spec.name}\n\n![{spec.name}]({spec.name}.png)\n\n## Verdict\n\n{verdict_block}\n\n"
                f"No reading written yet: what the numbers below show beside each verdict (prose explains a "
                f"verdict, never overrides it).\n\n## Numbers\n\n{block}\n")
    page.write_text(text, encoding="utf-8")
    return page


def repository_path(path: Path) -> str:
    """`path` as a page names it: relative to the repository that holds it (the nearest folder
    above it with a .git), so that a page reads the same whoever regenerates it and from
    which folder; outside a repository, as given."""
    resolved = path.resolve()
    for folder in resolved.parents:
        if (folder / ".git").exists():
            return resolved.relative_to(folder).as_posix()
    return path.as_posix()


def replace_block(page: Path, text: str, begin: str, end: str, block: str) -> str:
    """`text` with what lies between the markers `begin` ... `end` (both included) replaced by `block`."""
    if begin not in text or end not in text:
        raise ValueError(f"{page}: has no block to refresh (markers {begin!r} ... {end!r})")
    head, rest = text.split(begin, 1)
    return head + block + rest.split(end, 1)[1]


def unpublished_start_caches(data: Path) -> dict[str, str]:
    """The runs of a published record (`data`: DOCS/data) that read a step-0 cache and whose
    step-0 evaluation is not among data/heldout-start's: a run of the same config and seed
    that trains (a rerun, a restore with a run missing) evaluates its starting model again.
    <spec>/<arm>/seed-<k> -> the evaluation's key (runs of one seed and limit share one), or
    for a run whose config or problems do not load here (a file of another machine), why."""
    from microcoder.training.config import TrainConfig
    from microcoder.training.run import load_problem_split, start_key

    published = {path.name.removeprefix("heldout-start-").removesuffix(".json")
                 for path in (data / START_CACHE).glob("heldout-start-*.json")}
    missing = {}
    for config_path in sorted(data.glob("*/*/seed-*/config.yaml")):
        run = config_path.parent
        if shared_target(run) is not None:
            continue
        name = run.relative_to(data).as_posix()
        try:
            config = TrainConfig.model_validate(yaml.safe_load(config_path.read_text(encoding="utf-8")))
            if config.heldout_start_cache is None:
                continue
            heldout = load_problem_split(config)[1]
        except (OSError, ValueError) as error:  # pydantic's ValidationError is a ValueError
            missing[name] = f"its config or held-out problems do not load here: {error}"
            continue
        key = start_key(config, heldout) if heldout else None
        if key is not None and key not in published:
            missing[name] = key
    return missing


def publish_summary(docs: Path) -> Path:
    """Rewrite the SUMMARY block of DOCS/README.md from every grid under DOCS/data (the count
    of verdicts, the table, the step-0 evaluations not published) and each published page's
    VERDICTS block with the verdicts after Holm's correction across them."""
    readme = docs / "README.md"
    rows = published_rows(docs / "data")
    family = scored_count(rows)
    for spec in {row.spec.name: row.spec for row in rows}.values():
        page = docs / f"{spec.name}.md"
        if page.is_file() and VERDICTS_BEGIN in (text := page.read_text(encoding="utf-8")):
            own = [row for row in rows if row.spec.name == spec.name]
            quoted = [finding for finding in spec.findings if isinstance(finding, str)]
            block = f"{VERDICTS_BEGIN}\n{verdicts_text(own, quoted, family)}\n{VERDICTS_END}"
            page.write_text(replace_block(page, text, VERDICTS_BEGIN, VERDICTS_END, block), encoding="utf-8")
    grids = len(list((docs / "data").glob("*/spec.yaml")))
    summary = record_summary(rows, unpublished_start_caches(docs / "data"), grids)
    block = f"{SUMMARY_BEGIN}\n{summary}\n{SUMMARY_END}"
    if readme.is_file():
        text = replace_block(readme, readme.read_text(encoding="utf-8"), SUMMARY_BEGIN, SUMMARY_END, block)
    else:
        text = f"# Experiments\n\n## Summary\n\n{block}\n"
    readme.write_text(text, encoding="utf-8")
    return readme


def grids_sharing(data: Path, names: set[str]) -> list[Path]:
    """The published grids under `data` (DOCS/data), other than those named, with a shared
    run that lives in one of the grids named."""
    found = []
    for spec_path in sorted(data.glob("*/spec.yaml")):
        grid = spec_path.parent
        if grid.name in names:
            continue
        for record in grid.glob(f"*/seed-*/{SHARED_FILE}"):
            target = shared_target(record.parent)
            if target is not None and target.is_relative_to(data) and target.relative_to(data).parts[0] in names:
                found.append(grid)
                break
    return found


def check_shared_records(data: Path) -> None:
    """ValueError naming every shared record under `data` (DOCS/data) whose run is missing or
    is itself a shared record: a grid published whose twin's grid was rerun at its own place
    (the shared control moved), which publishing that other grid too resolves."""
    broken = []
    for record in sorted(data.glob(f"*/*/seed-*/{SHARED_FILE}")):
        target = shared_target(record.parent)
        if not (target / METRICS_FILE).is_file():
            problem = "a shared record itself" if (target / SHARED_FILE).is_file() else "not published"
            broken.append(f"{record.parent.relative_to(data).as_posix()} -> "
                          f"{target.relative_to(data).as_posix() if target.is_relative_to(data) else target} ({problem})")
    if broken:
        raise ValueError(f"{data}: shared runs that do not lead to a run: {'; '.join(broken)}. Publish the grids "
                         "they name from the same runs root as the grids that share them")


def publish_start_cache(grid: Path, target: Path) -> None:
    """Copy every step-0 held-out evaluation in the cache folders the grid's runs read from
    (their heldout_start_cache; one folder is shared by the grids of a runs root, so others'
    come too) to `target`, so that a later sitting restoring the grid (`run --restore`) reads
    them instead of evaluating each seed's starting model again."""
    caches = set()
    for config_path in grid.glob("*/seed-*/config.yaml"):
        cache = (yaml.safe_load(config_path.read_text(encoding="utf-8")) or {}).get("heldout_start_cache")
        if cache and Path(cache).is_dir():
            caches.add(Path(cache))
    for cache in sorted(caches):
        for path in sorted(cache.glob("heldout-start-*.json")):
            target.mkdir(parents=True, exist_ok=True)
            _copy(path, target / path.name)


def _copy(source: Path, target: Path) -> None:
    """Copy, unless `target` is `source` (redrawing a published grid in place)."""
    if not (target.exists() and target.samefile(source)):
        shutil.copyfile(source, target)
