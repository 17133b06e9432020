"""The datasheet: what the corpus holds and what every stage removed, in Markdown.

Reads the stage manifests and `removed.jsonl` / `rejects.jsonl` files under `work_dir`
and the exported problems; writes `datasheet.md`, `sources.png` and `difficulty.png`.
It names problems by id only (no statements or tests), so it can be committed.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path

from microcoder.data.config import PipelineConfig
from microcoder.data.reading_measure import datasheet_section as statement_readings_section
from microcoder.data.stages import STAGES, read_json_lines, read_manifest, write_lines_atomic, written_atomically
from microcoder.problems import Problem, iter_jsonl


def _relative(path: str, config: PipelineConfig) -> str:
    """Paths in the datasheet relative to the repository root, so it reads the same anywhere."""
    if path.startswith("hf:"):
        return path
    try:
        return str(Path(path).resolve().relative_to(Path(config.base_dir).resolve()))
    except (ValueError, OSError):
        import os

        try:
            return os.path.relpath(path, config.base_dir)
        except ValueError:
            return path


def _bar_chart(path: Path, counts: dict[str, int], title: str, xlabel: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = list(counts)
    figure, axes = plt.subplots(figsize=(7, 0.35 * max(4, len(labels)) + 1))
    axes.barh(labels[::-1], [counts[label] for label in labels][::-1], color="#4c72b0")
    for y, label in enumerate(labels[::-1]):
        axes.text(counts[label], y, f" {counts[label]}", va="center", fontsize=8)
    axes.set_title(title)
    axes.set_xlabel(xlabel)
    figure.tight_layout()
    try:
        with written_atomically(path, binary=True) as handle:
            figure.savefig(handle, dpi=80, format="png")
    finally:
        plt.close(figure)


class RemovalReason:
    """The removals of one stage for one reason, read one at a time: their count and what
    `examples` needs (the first of each source, and the first `wanted` of all)."""

    def __init__(self, wanted: int):
        self.wanted, self.count = wanted, 0
        self.firsts: dict[str, dict] = {}
        self.earliest: list[dict] = []

    def add(self, removal: dict) -> None:
        self.count += 1
        self.firsts.setdefault(removal["source"], removal)
        if len(self.earliest) < self.wanted + len(self.firsts):
            self.earliest.append(removal)

    def examples(self) -> list[dict]:
        """`wanted` examples, one per source first (the first few of a reason often share one)."""
        firsts = list(self.firsts.values())
        rest = [item for item in self.earliest if item not in firsts]
        return (firsts + rest)[:self.wanted]


READINGS_EVIDENCE = ("several answers, no checker", "several correct outputs", "interactive",
                     "reference fails its tests")
"""The removal reasons the statement readings section counts (reading_measure.datasheet_section)."""


def _json_lines(path: Path) -> Iterator[dict]:
    """The records of a JSONL file of ours, one at a time; none when it is absent (a line that
    is not JSON is skipped, as `read_json_lines` does)."""
    if path.exists():
        for _, record in iter_jsonl(path, on_error=lambda error: None):
            yield record


def _short(removal: dict) -> str:
    """A removal's detail without problem text: no expected/got outputs, no n-gram quotes."""
    detail = removal["detail"].split(", e.g. ")[0]
    if removal["reason"] == "reference fails its tests":
        detail = detail.split(": ")[0]
    return detail[:90]


def difficulty_bucket(problem: Problem) -> str:
    """A histogram label: the estimated pass rate in tenths when known, else the source label."""
    rate = (problem.metadata.get("pass_rate") or {}).get("rate")
    if rate is not None:
        low = min(int(rate * 10), 9) / 10
        return f"pass rate {low:.1f}-{low + 0.1:.1f}"
    return f"label: {problem.difficulty}" if problem.difficulty else "unlabelled"


def write_datasheet(config: PipelineConfig, problems: list[Problem], out_dir: Path) -> list[str]:
    """Write datasheet.md and its figures; returns the figure file names."""
    examples = config.export.examples_per_reason
    manifests = {stage: read_manifest(config, stage) for stage in STAGES[:-1]}
    lines = [f"# Datasheet: {config.export.name}", ""]
    lines += [f"{len(problems)} problems ({Counter(p.kind for p in problems)['stdin']} stdin, "
              f"{Counter(p.kind for p in problems)['call']} call) from {len(config.sources)} configured sources. "
              "Written by `microcoder data export`; every number below comes from the stage manifests "
              "and removal files under the build's work_dir.", ""]

    lines += ["## Counts after each stage", "",
              "| stage | in | out | removed | rejected (malformed) | seconds |", "|---|---:|---:|---:|---:|---:|"]
    total_seconds = 0.0
    for stage, manifest in manifests.items():
        if manifest:
            c = manifest["counts"]
            total_seconds += manifest["seconds"]
            lines.append(f"| {stage} | {c['in']} | {c['out']} | {c['removed']} | {c['rejected']} | {manifest['seconds']} |")
    lines.append(f"| export | {len(problems)} | {len(problems)} | 0 | 0 | |")
    lines += ["", f"Stage time before export: {total_seconds:.0f} s (the time of the run that produced each "
              "stage's output; a cached stage keeps its original time).", ""]

    # per source
    ingest_extra = (manifests.get("ingest") or {}).get("extra", {}).get("per_source", {})
    final_by_source = Counter(p.metadata.get("pipeline_source", p.source) for p in problems)
    removed_by_source: dict[str, Counter] = defaultdict(Counter)
    stage_removals: dict[str, dict[str, RemovalReason]] = {stage: {} for stage in STAGES[1:-1]}
    readings_evidence: list[dict] = []  # the removals the statement readings section counts
    source_of_id = _source_of_ids(config)
    for stage in STAGES[1:-1]:
        for removal in _json_lines(config.stage_dir(stage) / "removed.jsonl"):
            removed_by_source[source_of_id.get(removal["id"], removal["source"])][stage] += 1
            stage_removals[stage].setdefault(removal["reason"], RemovalReason(examples)).add(removal)
            if removal["reason"] in READINGS_EVIDENCE:
                readings_evidence.append(removal)
    del source_of_id
    lines += ["## Sources", "", "| source | ingested | rejected at ingest | "
              + " | ".join(f"{s} removed" for s in STAGES[1:-1]) + " | in corpus |",
              "|---|---:|---:|" + "---:|" * (len(STAGES) - 2) + "---:|"]
    for name, counts in ingest_extra.items():
        removed = " | ".join(str(removed_by_source[name][s]) for s in STAGES[1:-1])
        lines.append(f"| {name} | {counts['problems']} | {counts['rejected']} | {removed} | {final_by_source[name]} |")
    lines.append("")
    _bar_chart(out_dir / "sources.png", {name: final_by_source[name] for name in ingest_extra} or {"(none)": 0},
               "Problems in the corpus by source", "problems")
    lines += ["![problems by source](sources.png)", ""]

    lines += ["## Removals by reason", ""]
    for stage, by_reason in stage_removals.items():
        if not by_reason:
            lines += [f"**{stage}**: none.", ""]
            continue
        lines += [f"**{stage}** ({sum(reason.count for reason in by_reason.values())} removed)", "",
                  "| reason | count | examples |", "|---|---:|---|"]
        for reason, items in sorted(by_reason.items(), key=lambda kv: -kv[1].count):
            shown = "; ".join(
                f"`{r['id']}`" + (f" ~ `{r['match']}`" if r.get("match") else "") + (f" ({_short(r)})" if r.get("detail") else "")
                for r in items.examples()
            ).replace("|", "\\|").replace("\n", " ")
            lines.append(f"| {reason} | {items.count} | {shown} |")
        lines.append("")

    dedup_extra = (manifests.get("dedup") or {}).get("extra", {})
    if dedup_extra.get("constraint_variants_kept"):
        shown = "; ".join(f"`{a}` ~ `{b}`" for a, b in dedup_extra.get("constraint_variant_examples", [])[:examples])
        lines += [f"Kept as constraint variants (near-identical statements whose digits differ, e.g. LeetCode I/II): "
                  f"{dedup_extra['constraint_variants_kept']}, e.g. {shown}.", ""]

    rejects = [r for stage in STAGES[:-1] for r in read_json_lines(config.stage_dir(stage) / "rejects.jsonl")]
    lines += ["## Rejected records (malformed or unusable rows)", ""]
    if not rejects:
        lines += ["None.", ""]
    else:
        by_reason = defaultdict(list)
        for reject in rejects:
            by_reason[reject["reason"]].append(reject)
        lines += ["| reason | count | examples (file: row, field) |", "|---|---:|---|"]
        for reason, items in sorted(by_reason.items(), key=lambda kv: -len(kv[1])):
            shown = "; ".join(f"{_relative(r['path'], config)}: row {r['row']}, '{r['field']}'" for r in items[:examples])
            lines.append(f"| {reason} | {len(items)} | {shown.replace('|', '/')} |")
        lines.append("")

    dropped: Counter[str] = Counter()
    for problem in problems:
        dropped.update(problem.metadata.get("dropped_tests", {}))
    lines += ["## Tests dropped from kept problems", "",
              f"{sum(len(p.tests) for p in problems)} tests kept in the corpus.", ""]
    if dropped:
        lines += ["| reason | tests |", "|---|---:|"] + [f"| {r} | {n} |" for r, n in dropped.most_common()] + [""]

    lines += section_on_test_counts((manifests.get("validate") or {}).get("extra", {}).get("tests_per_problem", {}),
                                       problems, config)

    lines += shown_and_hidden_section((manifests.get("amplify") or {}).get("extra", {}), problems)
    lines += boundary_and_stdin_sections(problems, (manifests.get("amplify") or {}).get("extra", {}))
    lines += adequacy_section(out_dir / ADEQUACY_FILE)

    buckets = Counter(difficulty_bucket(p) for p in problems)
    ordered = dict(sorted(buckets.items()))
    _bar_chart(out_dir / "difficulty.png", ordered or {"(none)": 0}, "Difficulty (source label or estimated pass rate)", "problems")
    rated = [p for p in problems if (p.metadata.get("pass_rate") or {}).get("rate") is not None]
    lines += ["## Difficulty", "",
              f"{sum(p.difficulty is not None for p in problems)} problems carry a source label, normalised to "
              "easy/medium/hard (raw labels by scale: "
              + (", ".join(f"{scale} {count}" for scale, count in sorted(Counter(
                  (p.metadata.get("difficulty_label") or {}).get("scale", "none") for p in problems).items()))) + "); "
              f"{len(rated)} have a model pass rate"
              + (f" ({rated[0].metadata['pass_rate']['model']}, n={rated[0].metadata['pass_rate']['n']})" if rated else
                 " (the model stage was off)") + ".", "",
              "| difficulty | problems |", "|---|---:|"] + [f"| {k} | {v} |" for k, v in ordered.items()]
    lines += ["", "![difficulty](difficulty.png)", ""]

    lines += dates_section(problems, config)

    checkers = Counter()
    for problem in problems:
        if problem.checker:
            checkers["float tolerance"] += problem.checker.float_tolerance is not None
            checkers["any letter case"] += problem.checker.case_insensitive
            checkers["lines in any order (stdin)"] += problem.checker.unordered_lines
            checkers["result in any order (call, unordered_levels)"] += bool(problem.checker.unordered_levels)
        checkers["checker inferred from the statement (validate)"] += problem.metadata.get("checker_inferred") == "statement"
        checkers["reference solution (passed validate)"] += "reference_solution" in problem.metadata
    lines += ["## Checkers and references", "", "| | problems |", "|---|---:|"]
    lines += [f"| {k} | {v} |" for k, v in checkers.items()] + [""]
    rules = Counter(problem.metadata["checker_rule"].split(":")[0] for problem in problems
                    if problem.metadata.get("checker_rule"))
    if rules:
        lines += ["Checkers inferred from statements, by rule:", "", "| rule | problems |", "|---|---:|"]
        lines += [f"| {rule} | {count} |" for rule, count in sorted(rules.items())] + [""]
    from microcoder.data.validate import INNER_UNDECIDED

    undecided = [problem.id for problem in problems if INNER_UNDECIDED in (problem.metadata.get("checker_rule") or "")]
    if undecided:
        lines += [f"Nested results whose outer order the statement frees but whose inner order it neither frees nor "
                  f"fixes ({len(undecided)}; level 0 only, for a hand decision): "
                  + ", ".join(f"`{problem_id}`" for problem_id in undecided) + ".", ""]
    permuted = [problem.metadata["checker_permuted_tests"] for problem in problems
                if problem.metadata.get("checker_permuted_tests")]
    if permuted:
        lines += [f"Each any-order checker was checked on its problem's tests: {sum(p['tests'] for p in permuted)} "
                  f"expected results permuted at the checker's levels were all accepted, {sum(p['changed'] for p in permuted)} "
                  "of them permutations that exact comparison rejects; each reference passed with its checker.", ""]
    lines += statement_readings_section(problems, readings_evidence,
                                        [config.resolve(source.path) for source in config.sources])
    lines += time_limit_section(problems, config)
    lines += eval_sets_section((manifests.get("decontaminate") or {}).get("extra", {}).get("eval_sets", {}), config)
    lines += licence_section(problems)
    write_lines_atomic(out_dir / "datasheet.md", lines)
    return ["sources.png", "difficulty.png"]


def eval_sets_section(eval_sets: dict[str, dict], config: PipelineConfig) -> list[str]:
    """The evaluation sets the decontaminate stage used, each file with its sha256, so a
    reader can check that the sets they evaluate on are the ones removed from the corpus."""
    lines = ["## Evaluation sets decontaminated against", ""]
    if not eval_sets:
        return lines + ["None: the config names no evaluation set, and nothing was decontaminated.", ""]
    lines += ["| set | problems | rows rejected (not matched) | file | sha256 |", "|---|---:|---:|---|---|"]
    for name, used in eval_sets.items():
        files = used["files"] or {"(a hub dataset: no local file)": ""}
        for path, digest in files.items():
            lines.append(f"| {name} | {used['problems']} | {used['rejected']} | {_relative(path, config)} | "
                         f"{f'`{digest}`' if digest else ''} |")
    return lines + [""]


ADEQUACY_FILE = "adequacy.json"
"""Written beside the corpus by benchmarks/corpus_adequacy.py; the datasheet shows it when present."""


def shown_and_hidden_section(extra: dict, problems: list[Problem]) -> list[str]:
    """Per source: tests shown in the statement, stored hidden ones, generated ones, and
    the problems the amplify stage removed."""
    lines = ["## Shown and hidden tests", "",
             "A test is *shown* when its input and output appear in the statement: a program that prints the "
             "shown outputs passes it. The training reward judges hidden tests first "
             "(`select_tests`); the amplify stage generates hidden tests for `call` problems with a reference "
             "and removes problems left with none, and problems with no reference (unverified).", ""]
    per_source = extra.get("per_source", {})
    if not per_source:
        return lines + ["(no amplify manifest)", ""]
    columns = ["problems", "shown tests", "stored hidden tests", "generated tests", "amplified problems",
               "removed: sample output differs", "removed: unverified", "removed: no hidden tests",
               "removed: one hidden answer", "kept"]
    lines += ["| source | " + " | ".join(columns) + " |", "|---|" + "---:|" * len(columns)]
    for source, tally in per_source.items():
        lines.append(f"| {source} | " + " | ".join(str(tally.get(column, 0)) for column in columns) + " |")
    discarded = extra.get("discarded_candidates", {})
    if discarded:
        lines += ["", "Generated inputs the reference did not answer (not kept): "
                  + "; ".join(f"{reason}: {count}" for reason, count in discarded.items()) + "."]
    generated = sum(test.generated for p in problems for test in p.tests)
    only_generated = sum(all(test.shown or test.generated for test in p.tests) and any(t.generated for t in p.tests)
                         for p in problems)
    lines += ["", f"In the corpus: {generated} generated tests; {only_generated} problems whose only hidden tests "
              "are generated ones; every problem has at least one hidden test.", ""]
    return lines


def boundary_and_stdin_sections(problems: list[Problem], amplify_extra: dict) -> list[str]:
    """The generated tests made from boundary inputs, per source and kind (boundaries.py);
    then what the stdin problems lack (`stdin_section`)."""
    from microcoder.data.boundaries import KINDS

    by_source: dict[str, Counter[str]] = defaultdict(Counter)
    for problem in problems:
        made = (problem.metadata.get("amplified") or {}).get("boundary")
        if made is None:
            continue
        tally = by_source[problem.metadata.get("pipeline_source", problem.source)]
        tally["problems"] += 1
        tally["with boundary tests"] += bool(made)
        tally.update(made)
    lines = ["## Boundary inputs", "",
             "Generated tests whose inputs sit at the edges of the problem's input space (`amplify.boundary_inputs` "
             "per problem, beside the random ones; each inside the stated constraints and the stored inputs' "
             "domains): per source, the amplified problems, those with at least one boundary test, and the "
             "boundary tests of each kind.", ""]
    if not by_source:
        return lines + ["No amplified problem in the corpus.", ""] + stdin_section(amplify_extra.get("stdin", {}),
                                                                                     problems)
    kinds = [kind for kind in KINDS if any(tally[kind] for tally in by_source.values())]
    lines += ["| source | amplified problems | with boundary tests | " + " | ".join(kinds) + " |",
              "|---|---:|---:|" + "---:|" * len(kinds)]
    for source, tally in sorted(by_source.items()):
        lines.append(f"| {source} | {tally['problems']} | {tally['with boundary tests']} | "
                     + " | ".join(str(tally[kind]) for kind in kinds) + " |")
    return lines + [""] + stdin_section(amplify_extra.get("stdin", {}), problems)


def stdin_section(per_source: dict[str, dict[str, int]], problems: list[Problem]) -> list[str]:
    """Per source, what its stdin problems lack to enter the corpus, from the amplify
    stage's counts: a reference (nothing else checks a test or answers a generated input),
    hidden tests, enough of them for the `unverified_hidden` tier."""
    lines = ["## Stdin problems", "",
             "The amplify stage generates no input for a `stdin` problem (its input grammar is no JSON value), "
             "so a stdin problem enters the default corpus only with a reference solution and a hidden stored "
             "test. What each source's stdin problems, as they reach the amplify stage, bring and lack:", ""]
    if not per_source:
        return lines + ["No stdin problem reached the amplify stage.", ""]
    minimum = next((key.split()[1] for tally in per_source.values() for key in tally if key.endswith("+ hidden tests")),
                   "5+")
    lines += [f"| source | problems | with a reference | with a hidden test | with {minimum} hidden tests | "
              "stored tests | of them shown | lacks |", "|---|---:|---:|---:|---:|---:|---:|---|"]
    for source, tally in sorted(per_source.items()):
        count = tally.get("problems", 0)
        many = next((value for key, value in tally.items() if key.endswith("+ hidden tests")), 0)
        lacks = []
        if tally.get("with a reference", 0) < count:
            lacks.append(f"a reference solution ({count - tally.get('with a reference', 0)} of {count})")
        if tally.get("with a hidden test", 0) < count:
            lacks.append(f"any hidden test: every stored test is the statement's "
                         f"({count - tally.get('with a hidden test', 0)} of {count})")
        if many < count:
            lacks.append(f"{minimum} hidden tests for the unverified_hidden tier ({count - many} of {count})")
        lines.append(f"| {source} | {count} | {tally.get('with a reference', 0)} | {tally.get('with a hidden test', 0)} "
                     f"| {many} | {tally.get('stored tests', 0)} | {tally.get('shown tests', 0)} | "
                     + ("; ".join(lacks) or "nothing") + " |")
    tier = [problem for problem in problems if problem.metadata.get("tier") == "unverified_hidden"]
    if tier:
        shares = sorted(problem.metadata["unverified_hidden"].get("constant_output_share", 0) for problem in tier)
        lines += ["", f"**unverified_hidden** (opt-in, `amplify.unverified_hidden`): {len(tier)} problems with no "
                  "reference, kept for their hidden stored tests, labelled `metadata.tier: unverified_hidden`. Nothing "
                  "checked their tests. Their adequacy estimate, the share of a problem's hidden tests the best constant "
                  f"output passes (read off the expected outputs): median {shares[len(shares) // 2]:.2f}, "
                  f"worst {shares[-1]:.2f}; `metadata.unverified_hidden` also has the empty output's and "
                  "the echoed input's share."]
    return lines + [""]


def adequacy_section(path: Path) -> list[str]:
    """The corpus's quality figure (benchmarks/corpus_adequacy.py), when it has been measured:
    per source, problems accepting a provably wrong mutant under the build's own generator and
    under the independent oracle."""
    lines = ["## Test adequacy", ""]
    if not path.exists():
        return lines + ["Not measured for this build: `python benchmarks/corpus_adequacy.py --config CONFIG "
                        "--write-datasheet` mutates references, decides which mutants are provably wrong by two "
                        "oracles (the build's generator, and an independent one), judges them on the stored and on "
                        "the corpus's tests and writes the figures here.", ""]
    report = json.loads(path.read_text())
    lines += [report.get("summary", ""), "",
              "| source | problems | mutants | provably wrong (own / independent) | problems accepting a wrong "
              "mutant, stored tests (own) | corpus tests (own) | corpus tests (independent) | shown-outputs program "
              "rewarded |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for source, row in report.get("per_source", {}).items():
        lines.append(f"| {source} | {row['problems']} | {row['mutants']} | {row['provably_wrong']} / "
                     f"{row.get('provably_wrong_independent', 'n/a')} | {row['accepting_stored']} / "
                     f"{row['problems_with_wrong_mutants']} | {row['accepting_corpus']} / "
                     f"{row['problems_with_wrong_mutants']} | {row.get('accepting_corpus_independent', 'n/a')} / "
                     f"{row.get('problems_with_wrong_independent', 'n/a')} | {row['shown_outputs_rewarded']} / "
                     f"{row['shown_outputs_judged']} |")
    return lines + ["", f"Command: `{report.get('command', '')}`", ""]


def licence_section(problems: list[Problem]) -> list[str]:
    """The licence each source's records carry (the loaders record it per record)."""
    by_source: dict[str, Counter[str]] = defaultdict(Counter)
    for problem in problems:
        by_source[problem.metadata.get("pipeline_source", problem.source)][
            str(problem.metadata.get("licence") or "not stated")] += 1
    lines = ["## Licences", "", "The licence recorded on each source's records (the source's own terms; problem "
             "statements may carry their platform's terms too). Generated tests are answers of the source's "
             "reference solution and follow its licence.", "", "| source | licence | problems |", "|---|---|---:|"]
    for source, licences in sorted(by_source.items()):
        for licence, count in sorted(licences.items()):
            lines.append(f"| {source} | {licence.replace('|', '/')} | {count} |")
    return lines + [""]


def section_on_test_counts(histograms: dict[str, dict[str, dict[str, int]]], problems: list[Problem],
                              config: PipelineConfig) -> list[str]:
    """Tests per problem by source, as validate received the problems and as it kept them."""
    from microcoder.data.validate import TEST_COUNT_BANDS, band_of_test_count

    settings = config.validate
    lines = ["## Tests per problem", "",
             f"Test policy (`validate.min_tests`, `validate.max_tests`): at least {settings.min_tests}, "
             + (f"at most {settings.max_tests} stored (the longest inputs)." if settings.max_tests else "no upper limit.")
             + " Each cell is before validate / after it (problems).", ""]
    if not histograms:
        return lines + ["(no validate manifest)", ""]
    bands = [band_of_test_count(low) for low, _ in TEST_COUNT_BANDS]
    lines += ["| source | " + " | ".join(bands) + " |", "|---|" + "---:|" * len(bands)]
    for source, sides in histograms.items():
        cells = [f"{sides['before'].get(band, 0)} / {sides['after'].get(band, 0)}" for band in bands]
        lines.append(f"| {source} | " + " | ".join(cells) + " |")
    counts = sorted(len(p.tests) for p in problems)
    if counts:
        lines += ["", f"In the corpus: {sum(counts)} tests, median {counts[len(counts) // 2]} per problem, "
                  f"{sum(c < 5 for c in counts)} problems with fewer than 5."]
    return lines + [""]


def dates_section(problems: list[Problem], config: PipelineConfig) -> list[str]:
    """Dated problems per source and year, where their dates came from, and the cutoff."""
    lines = ["## Dates", ""]
    dates = sorted(p.date for p in problems if p.date)
    cutoff = config.difficulty.date_cutoff
    if not dates:
        lines += ["No problem carries a date."]
    else:
        origins = Counter(p.metadata.get("date_from", "source") for p in problems if p.date)
        lines += [f"{len(dates)} dated problems, from {dates[0]} to {dates[-1]}; {len(problems) - len(dates)} undated. "
                  "Where the dates came from: " + ", ".join(f"{k} {v}" for k, v in sorted(origins.items())) + ".", ""]
        years = sorted({d[:4] for d in dates})
        by_source: dict[str, Counter[str]] = defaultdict(Counter)
        for problem in problems:
            by_source[problem.metadata.get("pipeline_source", problem.source)][problem.date[:4] if problem.date else "undated"] += 1
        lines += ["| source | " + " | ".join(years) + " | undated |", "|---|" + "---:|" * (len(years) + 1)]
        for source, counts in by_source.items():
            lines.append(f"| {source} | " + " | ".join(str(counts[y]) for y in years) + f" | {counts['undated']} |")
    lines += ["", f"Date cutoff: {cutoff or 'none'}"
              + (f" (undated problems {'kept' if config.difficulty.keep_undated else 'removed'})." if cutoff else "."), ""]
    return lines


def time_limit_bucket(limit: float | None, floor_s: float, cap_s: float) -> str:
    """A histogram label for a per-test limit: at the floor, at the cap, or a band between
    (edges at doublings of the floor)."""
    if limit is None:
        return "none (the judge's default)"
    if limit == floor_s:
        return f"{floor_s:g} s (the floor)"
    if limit == cap_s:
        return f"{cap_s:g} s (the cap)"
    low = floor_s if limit > floor_s else 0.0
    while low * 2 < limit and low * 2 < cap_s:
        low *= 2
    high = min(low * 2, cap_s) if low else floor_s
    return f"{low:g}-{high:g} s"


def time_limit_section(problems: list[Problem], config: PipelineConfig) -> list[str]:
    """Where each problem's per-test CPU limit came from, and their distribution."""
    settings = config.validate
    floor_s, cap_s = settings.time_limit_floor_s, settings.time_limit_cap_s
    origin = Counter(p.metadata.get("time_limit_from", "default") for p in problems)
    lines = ["## Time limits", ""]
    if origin["reference"]:
        lines += [f"Per-test CPU limits (`time_limit_s`) from each reference solution's slowest test: "
                  f"{settings.time_limit_multiple:g} x its CPU time, rounded up to a multiple of "
                  f"{settings.time_limit_step_s:g} s, within "
                  f"[{floor_s:g} s, {cap_s:g} s] (`validate.time_limit_*`; the defaults are measured in "
                  "results/data_pipeline.md, \"Time limits\", which also counts the verdicts they change).", ""]
    lines += [f"Problems with a limit from their reference: {origin['reference']}; with their source's own: "
              f"{origin['source']}; with none, so the judge's default applies (`microcoder evaluate "
              f"--time-limit`, training's `reward_time_limit_s`): {origin['default']}.", ""]
    buckets = Counter(time_limit_bucket(p.time_limit_s, floor_s, cap_s) for p in problems
                      if p.metadata.get("time_limit_from", "default") != "source")
    order = lambda label: (label.startswith("none"), float(label.split("-")[0].split(" ")[0]) if label[0].isdigit() else 0)  # noqa: E731
    lines += ["| limit per test | problems |", "|---|---:|"]
    lines += [f"| {label} | {count} |" for label, count in sorted(buckets.items(), key=lambda kv: order(kv[0]))]
    lines.append("")
    slowest = sorted(max(p.metadata["reference_cpu_s"]) for p in problems if p.metadata.get("reference_cpu_s"))
    if slowest:
        pick = lambda q: slowest[min(len(slowest) - 1, int(q * len(slowest)))]  # noqa: E731
        lines += [f"The references' slowest test, CPU seconds: median {pick(0.5):.4f}, 90th percentile "
                  f"{pick(0.9):.4f}, 99th {pick(0.99):.3f}, max {slowest[-1]:.3f} ({len(slowest)} problems).", ""]
    return lines


def _source_of_ids(config: PipelineConfig) -> dict[str, str]:
    """problem id -> pipeline source name, from the ingest output (read line by line)."""
    path = config.stage_dir("ingest") / "problems.jsonl"
    mapping: dict[str, str] = {}
    if not path.exists():
        return mapping
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            try:
                record = json.loads(line)
                mapping[record["id"]] = record.get("metadata", {}).get("pipeline_source", record.get("source", ""))
            except (json.JSONDecodeError, KeyError, TypeError):
                continue
    return mapping
