"""The markdown of the report and the record: text from computed values, no files read.

A grid's findings table (verdicts_text) and numbers (numbers_page); a record's summary
(record_summary): its count of verdicts (verdict_counts) and table (summary_table).
"""

from __future__ import annotations

from collections import Counter

from microcoder.experiments.analysis import TIME_SPLIT, arm_curve, mean_and_error, pairable, paired_change, tail_mean
from microcoder.experiments.findings import FindingRow, scored_count
from microcoder.experiments.layout import GridRuns
from microcoder.experiments.spec import Finding
from microcoder.experiments.verdict import (CONFOUNDED, IDLE, RULE, SCORED, UNTESTABLE, Verdict, sd_range,
                                            seeds_for_power)


def signed(value: float | None) -> str:
    """+0.123 / -0.123; a value that rounds to zero is +0.000 (never -0.000)."""
    return "-" if value is None else f"{round(value, 3) + 0.0:+.3f}"


def p_text(p: float) -> str:
    """A p-value as the pages print it: "p 0.042", and "p < 0.001" where three places would
    show 0.000."""
    return "p < 0.001" if p < 0.0005 else f"p {p:.3f}"


def mean_cell(verdict: Verdict) -> str:
    if verdict.mean is None:
        return "-"
    return f"{signed(verdict.mean)} +- {'undefined' if verdict.se is None else f'{verdict.se:.3f}'}"


def verdict_cell(verdict: Verdict) -> str:
    return f"**{verdict.verdict}**" + (f" ({verdict.reason})" if verdict.reason else "")


def test_cell(verdict: Verdict) -> str:
    """t (df), one-sided p in the paper's direction; "-" where no test is read (a finding
    declared untestable, or a mechanism that did not act)."""
    if verdict.p is None or verdict.verdict in (UNTESTABLE, IDLE):
        return "-"
    return f"{verdict.t:.2f} ({verdict.n - 1}), {p_text(verdict.p)}"


def detectable_cell(verdict: Verdict) -> str:
    """The effect detected with 80% power; "-" where the SE is undefined or 0 (every seed the
    same difference: no spread to scale an effect by)."""
    return "-" if verdict.mde is None or verdict.se == 0 else f"{verdict.mde:.3f}"


def effect_cell(finding: Finding, verdict: Verdict) -> str:
    """The paper's effect and the test's power there."""
    if finding.paper_effect is None:
        return "-"
    power = verdict.power_at(finding.paper_effect)
    return f"{finding.paper_effect:+.3f}" + ("" if power is None else f" (power {power:.2f})")


PAIRING_CAVEAT = ("The last column (by problem) is a statement about these trained models, not a verdict: it "
                  "holds the trained model pairs (the seeds) fixed and says how much the drawn held-out problems "
                  "blur the gap between them, not whether the mechanism trains better (the seeds' test already "
                  "holds the problem-draw noise, and only it gives the verdict). Its mean is the seeds'; its SE is "
                  "stratified by seed and given twice: problems independent (df = problem-results - seeds) and "
                  "clustered by template (the held-out problems are several instances of each template, "
                  "correlated across instances and seeds: df = templates - 1), the latter the one to read; p is one-sided in "
                  "the paper's direction.")


def pairing_cell(row: FindingRow) -> str:
    """The paired-by-problem-and-seed analysis of a held-out finding (problem_paired): the
    mean, its SE and p with problems independent and clustered by template; no verdict
    word, as it is a statement about these trained models. "-" for a finding of another kind."""
    if not pairable(row.finding):
        return "-"
    pairing = row.pairing
    if pairing is None:
        return ("no per-problem files published" if not row.problem_files else
                "per-problem files for some runs, but no seed has them for every arm compared")
    by_template = ("" if pairing["template_se"] is None else
                   f"; by template SE {pairing['template_se']:.3f} ({pairing['template_df']} df), "
                   f"{'no p (SE 0)' if pairing['template_se'] == 0 else p_text(pairing['template_p'])}")
    return (f"{signed(pairing['mean'])}: by problem SE {pairing['se']:.3f} ({pairing['df']} df), "
            f"{'no p (SE 0)' if pairing['se'] == 0 else p_text(pairing['p'])}{by_template} ({pairing['seeds']} seeds, {pairing['problems']} problem-results, "
            f"{pairing['templates']} templates)")


def holm_cell(row: FindingRow) -> str:
    if row.holm is None or row.holm[1] is None:
        return "-"
    return f"{row.holm[0]} ({p_text(row.holm[1])})"


def verdicts_text(rows: list[FindingRow], quoted: list[str], holm_family: int | None = None) -> str:
    """The findings table of a grid (markdown), with the rule; quoted claims for string findings.
    With `holm_family` (the record's count of scored findings), each row's verdict after Holm."""
    lines = [RULE, ""]
    holm_header = f" after Holm (m = {holm_family}) |" if holm_family is not None else ""
    if rows:
        lines += [f"| # | the paper's claim | comparison | per seed | mean +- SE | t in the paper's direction (df), "
                  f"one-sided p | detectable (80% power) | paper's effect, borrowed (power) | verdict |{holm_header} "
                  "by problem, these trained models (mean: SE, p) |",
                  "|---|---|---|---|---|---|---|---|---|" + ("---|" if holm_header else "") + "---|"]
    for index, row in enumerate(rows, start=1):
        finding, verdict = row.finding, row.verdict
        per_seed = ", ".join(f"{seed}: {signed(value)}" for seed, value in row.differences.items()) or "-"
        mde = detectable_cell(verdict)
        holm = f" {holm_cell(row)} |" if holm_header else ""
        lines.append(f"| {index} | {finding.claim} | {finding.label} ({finding.direction} in the paper) | {per_seed} "
                     f"| {mean_cell(verdict)} | {test_cell(verdict)} | {mde} | {effect_cell(finding, verdict)} "
                     f"| {verdict_cell(verdict)} |{holm} {pairing_cell(row)} |")
    if any(pairable(row.finding) for row in rows):
        lines += ["", PAIRING_CAVEAT]
    if quoted:
        lines += ["", *(f"> {finding}" for finding in quoted), "", "(Quoted only: no comparison declared, no verdict.)"]
    return "\n".join(lines)


def numbers_page(spec, arms: dict[str, list[list[dict]]], budgets: dict[str, list[dict[int, dict]]],
                 facts: GridRuns) -> str:
    """Per arm and metric the first, last and tail values and the change paired by seed; the
    budget each arm spent and its runs' wall minutes; then what `facts` says of the grid's runs."""
    lines = ["| arm | metric | first (mean +- SE) | last (mean +- SE) | last 3 points after step 0 (mean +- SE) "
             "| last - first, paired by seed (mean +- SE) | last step | n |",
             "|---|---|---|---|---|---|---|---|"]
    for arm, runs in arms.items():
        for key in spec.metrics:
            if key == "time_split":
                for part in TIME_SPLIT:
                    tail = tail_mean(runs, part, points=10**9)
                    shown = f"{tail[0]:.1f} +- {tail[1]:.1f} s" if tail else "-"
                    lines.append(f"| {arm} | {part} (all steps) | | | {shown} | | | {len(runs)} |")
                continue
            steps, means, errors = arm_curve(runs, key)
            if not steps:
                lines.append(f"| {arm} | {key} | - | - | - | - | - | {len(runs)} |")
                continue
            tail = tail_mean(runs, key)  # None: nothing logged after step 0 yet (a run in progress)
            shown = f"{tail[0]:.3f} +- {tail[1]:.3f}" if tail else "-"
            change = paired_change(runs, key)
            moved = f"{change[0]:+.3f} +- {change[1]:.3f}" if change else "-"
            lines.append(f"| {arm} | {key} | {means[0]:.3f} +- {errors[0]:.3f} | {means[-1]:.3f} +- {errors[-1]:.3f} "
                         f"| {shown} | {moved} | {steps[-1]} | {len(runs)} |")
    lines += ["", "Budget spent per run (mean +- SE over seeds, to the last step): groups generated (refill "
              "rounds counted), responses judged, tokens generated in each step's final batch (the "
              "groups DAPO's filter drops from the loss counted: tokens generated, not tokens that enter the loss; "
              "refill rounds' earlier batches not counted), and seconds of rollout + reward waited for + update "
              "(held-out evaluations not counted); and each run's wall minutes (summary.json `seconds`: "
              "held-out evaluations counted, step 0's too where the run made it). Arms with equal groups "
              "generated need not have spent equal tokens or seconds.", "",
              "| arm | groups generated | responses judged | tokens generated | seconds | wall minutes per run (min-max) | n |",
              "|---|---|---|---|---|---|---|"]
    own, shared_minutes, resumed = 0.0, 0.0, []
    for arm, spent in budgets.items():
        totals = [run[max(run)] for run in spent]
        cells = []
        for key, digits in (("groups_generated", 1), ("responses_judged", 1), ("tokens", 0), ("seconds", 0)):
            mean, error = mean_and_error([total[key] for total in totals])
            cells.append(f"{mean:.{digits}f} +- {error:.{digits}f}")
        minutes = facts.minutes[arm]
        walls = [wall for wall, _, _ in minutes]
        cells.append(f"{min(walls):.1f}-{max(walls):.1f}" if walls else "-")
        own += sum(wall for wall, elsewhere, _ in minutes if not elsewhere)
        shared_minutes += sum(wall for wall, elsewhere, _ in minutes if elsewhere)
        resumed += [arm for _, _, again in minutes if again]
        lines.append(f"| {arm} | {' | '.join(cells)} | {len(spent)} |")
    if own or shared_minutes:
        lines += ["", f"Wall minutes in all: {own:.0f} in this grid's own runs"
                  + (f", {shared_minutes:.0f} more in the runs it shares with other grids" if shared_minutes else "")
                  + (f"; {len(resumed)} resumed run(s) ({', '.join(sorted(set(resumed)))}) count from the resume"
                     if resumed else "") + "."]
    if facts.shared:
        lines += ["", f"Shared runs (the same resolved config and seed, run once and read from there): "
                  f"{'; '.join(facts.shared)}."]
    unjudged = facts.judge_errors
    if unjudged:
        # A judge error is no reward, not a wrong answer: a run with many trained on a
        # fraction of its batch, and a held-out evaluation with every sample unjudged
        # measured nothing (NaN, missing from its curve).
        lines += ["", f"**Runs with judge errors: {', '.join(unjudged)}.** "
                  "Their numbers are not the method's; find the cause before comparing."]
    unfinished = facts.unfinished
    lines += ["", f"Runs not finished: {', '.join(unfinished) if unfinished else 'none'}"
              + (" (an arm with a finished run is reported from its finished runs only; n counts them)."
                 if unfinished else "."), ""]
    return "\n".join(lines)


def summary_table(rows: list[FindingRow]) -> str:
    """One row per finding of `published_rows`: aspect, claim, comparison, mean +- SE, the
    t test, the detectable effect, the paper's effect and the power there, the verdict and
    the verdict after Holm; then the seeds that 80% power at the paper's effect needs."""
    lines = [RULE, "", f"| aspect | the paper's claim | comparison | mean +- SE (n) | t in the paper's direction (df), "
             f"one-sided p | detectable (80% power) | paper's effect, borrowed (power) | verdict "
             f"| after Holm (m = {scored_count(rows)}) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        spec, finding, verdict = row.spec, row.finding, row.verdict
        mde = detectable_cell(verdict)
        lines.append(f"| [{spec.name}]({spec.name}.md) | {finding.claim} | {finding.label} | "
                     f"{mean_cell(verdict)} ({verdict.n}) | {test_cell(verdict)} | {mde} | "
                     f"{effect_cell(finding, verdict)} | {verdict_cell(verdict)} | {holm_cell(row)} |")
    heldout = [row for row in rows if pairable(row.finding)]
    paired = [row for row in heldout if row.pairing is not None]
    whole = [row for row in paired if row.pairing["seeds"] == len(row.differences)]
    lines += ["", f"By problem (each page's last column): {len(whole)} of the {len(heldout)} held-out "
              "findings have per-problem files for every seed"
              + (f", {len(paired) - len(whole)} for some seeds" if len(paired) > len(whole) else "")
              + (" (heldout_start.json and heldout_end.json; a grid whose runs lack them gets them by a rerun)."
                 if paired else
                 "; the published runs predate publishing them, and only a rerun of their grids can add them.")]
    if paired:
        lines[-1] += " " + PAIRING_CAVEAT
    power_rows = [row for row in rows if row.finding.paper_effect is not None and row.verdict.se
                  and row.verdict.verdict in SCORED]
    if power_rows:
        lines += ["", "Seeds for 80% power at the paper's effect, from each finding's measured per-seed sd of the "
                  "difference (`seeds_for_power`), and what that many seeds of the finding's arms would take at "
                  "their measured wall minutes per run (run-hours; hours two at a time on 2 cores). Each is a point "
                  "estimate from the sd of few seeds; in brackets its 95% range, from the chi-square interval on "
                  "the variance (`sd_range`). The paper's effect is borrowed from the paper's scale (its models, "
                  "its hundreds of steps): the power against it says what these runs would detect, not what they "
                  "should show.", "",
                  "| aspect | comparison | paper's effect (borrowed) | per-seed sd | power now (n) "
                  "| seeds for 80% (95% range) | run-hours (95% range) | hours two at a time (95% range) |",
                  "|---|---|---|---|---|---|---|---|"]

        def seeds_text(seeds: int | None) -> str:
            return "over 10,000" if seeds is None else f"{seeds}"

        def needed(row: FindingRow) -> tuple[int | None, int | None, int | None]:
            """(seeds, low, high) for 80% power: at the measured sd and at its 95% range's ends."""
            low, high = sd_range(row.verdict.sd, row.verdict.n)
            effect = row.finding.paper_effect
            return seeds_for_power(effect, row.verdict.sd), seeds_for_power(effect, low), seeds_for_power(effect, high)

        def hours_text(seeds: tuple, minutes: float | None, share: float = 1.0) -> str:
            if minutes is None or None in seeds:
                return "-"
            point, low, high = (count * minutes / 60 / share for count in seeds)
            return f"{point:.1f} ({low:.1f}-{high:.1f})"

        for row in power_rows:
            verdict, finding = row.verdict, row.finding
            seeds = needed(row)
            lines.append(f"| {row.spec.name} | {finding.label} | {finding.paper_effect:+.3f} | {verdict.sd:.3f} "
                         f"| {verdict.power_at(finding.paper_effect):.2f} ({verdict.n}) "
                         f"| {seeds_text(seeds[0])} ({seeds_text(seeds[1])}-{seeds_text(seeds[2])}) "
                         f"| {hours_text(seeds, row.minutes_per_seed)} | {hours_text(seeds, row.minutes_per_seed, 2)} |")
        for first in {row.spec.name: row for row in power_rows}.values():
            grid = [needed(row) for row in power_rows if row.spec.name == first.spec.name]
            if any(None in seeds for seeds in grid) or first.grid_minutes_per_seed is None:
                continue
            most = tuple(max(seeds[index] for seeds in grid) for index in range(3))
            per_seed = first.grid_minutes_per_seed / 60
            more = tuple(count - first.verdict.n for count in most)
            lines += ["", f"{first.spec.name} at {most[0]} seeds (95% range {most[1]}-{most[2]}; the most any of its "
                      f"findings above needs), each of its {len(first.spec.arms)} arms: "
                      f"{hours_text(most, first.grid_minutes_per_seed)} run-hours, "
                      f"{hours_text(most, first.grid_minutes_per_seed, 2)} h two at a time at the measured minutes "
                      "per run"
                      + (f"; the {more[0]} seeds not yet run, {more[0] * per_seed:.1f} run-hours "
                         f"({more[0] * per_seed / 2:.1f} h two at a time; 95% range "
                         f"{max(more[1], 0) * per_seed / 2:.1f}-{max(more[2], 0) * per_seed / 2:.1f} h)."
                         if more[0] > 0 else ".")]
    return "\n".join(lines)


def verdict_counts(rows: list[FindingRow]) -> str:
    """One sentence counting the verdicts of `published_rows`, in the rule's order, raw and
    after Holm's correction: "Of 39 findings, 30 scored: 8 reproduced, ...; after Holm ...". """
    counts = Counter(row.verdict.verdict for row in rows)
    corrected = Counter(row.holm[0] for row in rows if row.holm is not None and row.holm[1] is not None)
    scored = scored_count(rows)
    raw = ", ".join(f"{counts[name]} {name}" for name in SCORED if counts[name])
    after = ", ".join(f"{corrected[name]} {name}" for name in SCORED if corrected[name])
    others = ", ".join(f"{counts[name]} {name}" for name in (CONFOUNDED, UNTESTABLE, IDLE) if counts[name])
    text = f"Of {len(rows)} findings, {scored} scored by a one-sided t test at 5%: {raw or 'none'}"
    if scored:
        text += f"; after Holm's correction across the {scored}: {after}"
    return text + (f"; not scored: {others}." if others else ".")


def record_summary(rows: list[FindingRow], missing: dict[str, str], grids: int) -> str:
    """A record's summary from its `grids` published grids: the count of verdicts, the table
    (summary_table) and the runs whose step-0 evaluation is not published (`missing`:
    unpublished_start_caches)."""
    if not grids:
        return "No grid is published under data/."
    caches = ("Every published run's step-0 evaluation is in data/heldout-start/, so `run --restore` of the "
              "record evaluates nothing." if not missing else
              f"Step-0 evaluations not in data/heldout-start/ ({len(set(missing.values()))}, read by "
              f"{len(missing)} runs; a run of the same config and seed that trains evaluates its starting model "
              f"again, and nothing can pair these runs' step 0 by problem): {', '.join(missing)}.")
    return f"{verdict_counts(rows)}\n\n{summary_table(rows)}\n\n{caches}"
