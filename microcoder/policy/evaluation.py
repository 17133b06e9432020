"""`microcoder eval-model`: sample n responses per problem, judge them, report pass@1.

pass@1 is the unbiased estimate from n samples (c / n per problem, averaged over
problems), overall and by source and by difficulty, at one or more maximum response
lengths, as the paper reports LiveCodeBench at 4K and 8K. Each value comes with its
standard error over problems, and every sample is judged twice: by our robust judge and by
the strict one (LiveCodeBench's rules), printed side by side. `since` / `until` keep the
problems whose date lies in a window (LiveCodeBench's contest dates).

Several lengths from one generation (our choice; the paper is silent). Sampling with a
limit L only stops generation: the first L tokens of a response sampled with limit
L_max > L have exactly the distribution of a response sampled with limit L (no logits
processor here depends on the limit). So we sample once at the largest length and, for
each smaller L, cut every response to its first L tokens, re-decode it and judge it again
(a response cut this way is truncated at L). A response that already ended within L
tokens is the same text at L and keeps its verdict without a second run. The lengths'
estimates then share their samples (a paired comparison: their difference has less
variance than with independent draws), and cost one generation instead of one per length.

The output directory holds:
    config.json    the settings that the rows depend on (checked on resume)
    samples.jsonl  one row per sample at the largest length: text, token ids, truncated
    results.jsonl  one row per (sample, max_new_tokens): verdict, reward, tokens, truncated
    summary.json   the pass@1 table and per-length verdict counts

Resuming: problems are generated and judged in chunks, each chunk's rows appended when it
is done. Run the same command again and problems with all their rows are skipped (rows of
a problem cut off mid-write are dropped and redone). A chunk's sampling seed depends on
the run seed and the chunk's position, so a run resumed between chunks draws the same
samples as an uninterrupted one.
"""

from __future__ import annotations

import json
import math
import zlib
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from microcoder.algorithms.pass_at_k import pass_at_k, standard_error
from microcoder.evaluator.compare import JUDGE_MODES
from microcoder.policy.config import ModelEvalConfig
from microcoder.policy.generation import GeneratedText, ModelGenerator, ResponseGenerator
from microcoder.problems import Problem, ProblemFormatError, iter_jsonl

DIFFICULTY_ORDER = ("easy", "medium", "hard")
NO_LABEL = "(none)"


@dataclass
class ResultRow:
    """One row of results.jsonl: a sample judged at one maximum length."""

    problem_id: str
    sample_index: int
    max_new_tokens: int
    verdict: str
    reward: float
    num_tokens: int
    """Response tokens within this limit."""
    truncated: bool
    """The response hit this limit without an EOS."""
    detail: str = ""
    strict_verdict: str | None = None
    """The verdict of the strict judge (LiveCodeBench's rules); None when not judged."""

    def verdict_of(self, judge: str) -> str | None:
        return self.verdict if judge == "robust" else self.strict_verdict


def cut_to_length(sample: GeneratedText, max_new_tokens: int, decode) -> GeneratedText:
    """`sample` as if it had been generated with limit `max_new_tokens` (see module doc)."""
    if len(sample.token_ids) <= max_new_tokens:
        return sample
    token_ids = list(sample.token_ids[:max_new_tokens])
    return GeneratedText(token_ids, decode(token_ids), truncated=True)


def pass_at_1_table(rows: Sequence[ResultRow], problems: Mapping[str, Problem], judge: str = "robust") -> dict:
    """pass@1 by max length, overall, by source and by difficulty, under one judge's
    verdicts ("robust": `verdict`, "strict": `strict_verdict`).

    Each problem contributes c / n (the unbiased pass@1 from its n samples); a group's
    value is the mean over its problems, and its standard error is that of the mean of
    those per-problem values (`standard_error`; None for a group of one problem). Samples
    whose verdict is `judge_error` are left out, as in `microcoder.evaluator.summarize`
    (a broken problem never counts against the model); a problem with only judge errors is
    left out of every group.

    Problems whose metadata names a `platform` (LiveCodeBench's atcoder, leetcode) are also
    grouped by it, as the paper splits its table.

    Returns {length: {"all": {...}, "source": {name: {...}}, "difficulty": {name: {...}},
    "platform": {name: {...}} (empty without platforms),
    "fraction_truncated", "mean_tokens", "verdicts"}} where each {...} is
    {"pass@1": float, "stderr": float | None, "problems": int, "samples": int}; lengths
    are ints, ascending.
    """
    if judge not in JUDGE_MODES:
        raise ValueError(f"judge must be one of {', '.join(JUDGE_MODES)}, got {judge!r}")
    if any(row.verdict_of(judge) is None for row in rows):
        raise ValueError(f"some rows have no {judge} verdict")
    by_length: dict[int, list[ResultRow]] = defaultdict(list)
    for row in rows:
        by_length[row.max_new_tokens].append(row)
    table: dict = {}
    for length in sorted(by_length):
        tally: dict[str, list[int]] = {}  # problem id -> [samples, correct]
        for row in by_length[length]:
            verdict = row.verdict_of(judge)
            if verdict == "judge_error":
                continue
            counts = tally.setdefault(row.problem_id, [0, 0])
            counts[0] += 1
            counts[1] += verdict == "accepted"
        groups: dict[str, dict[str, list[str]]] = {"source": defaultdict(list), "difficulty": defaultdict(list),
                                                   "platform": defaultdict(list)}
        for problem_id in tally:
            problem = problems[problem_id]
            groups["source"][problem.source or NO_LABEL].append(problem_id)
            groups["difficulty"][problem.difficulty or NO_LABEL].append(problem_id)
            if isinstance(problem.metadata.get("platform"), str):
                groups["platform"][problem.metadata["platform"]].append(problem_id)

        def cell(problem_ids: Sequence[str]) -> dict:
            values = [pass_at_k(tally[p][0], tally[p][1], 1) for p in problem_ids]
            error = standard_error(values)
            return {"pass@1": sum(values) / len(values) if values else float("nan"),
                    "stderr": None if math.isnan(error) else error,
                    "problems": len(problem_ids), "samples": sum(tally[p][0] for p in problem_ids)}

        length_rows = by_length[length]
        table[length] = {
            "all": cell(list(tally)),
            "source": {name: cell(ids) for name, ids in sorted(groups["source"].items())},
            "difficulty": {name: cell(groups["difficulty"][name]) for name in _difficulty_order(groups["difficulty"])},
            "platform": {name: cell(ids) for name, ids in sorted(groups["platform"].items())},
            "fraction_truncated": sum(row.truncated for row in length_rows) / len(length_rows),
            "mean_tokens": sum(row.num_tokens for row in length_rows) / len(length_rows),
            "verdicts": dict(Counter(row.verdict_of(judge) for row in length_rows).most_common()),
        }
    return table


def _difficulty_order(names) -> list[str]:
    known = [name for name in DIFFICULTY_ORDER if name in names]
    return known + sorted(name for name in names if name not in DIFFICULTY_ORDER)


def problems_in_window(problems: Sequence[Problem], since: str | None, until: str | None) -> list[Problem]:
    """The problems dated within [since, until] (days, inclusive; either end may be open).
    With a window, an undated problem is left out: it cannot be placed in it."""
    if since is None and until is None:
        return list(problems)
    return [problem for problem in problems if problem.date is not None
            and (since is None or problem.date >= since) and (until is None or problem.date <= until)]


def load_eval_problems(spec: str, seed: int = 0) -> list[Problem]:
    """A problems JSONL path, or a generated set ("default", "decimal"): its held-out split."""
    from microcoder.problem_sets import named_problems

    return named_problems(spec, "heldout", seed)


def evaluate_model(config: ModelEvalConfig, console: Console | None = None,
                   generator: ResponseGenerator | None = None, problems: Sequence[Problem] | None = None) -> dict:
    """Sample from a model and judge its responses (run or resume `microcoder eval-model`);
    returns the summary also written to summary.json.

    `generator` and `problems` default to those named by the config (tests inject both).
    """
    from microcoder.evaluator import Evaluator, EvaluatorConfig

    console = console or Console()
    problems = list(problems) if problems is not None else load_eval_problems(config.problems, config.problems_seed)
    if not problems:
        raise ValueError(f"no problems in {config.problems}")
    if config.since is not None or config.until is not None:
        given = len(problems)
        undated = sum(problem.date is None for problem in problems)
        problems = problems_in_window(problems, config.since, config.until)
        window = f"{config.since or 'any date'} .. {config.until or 'any date'}"
        console.print(f"{len(problems)} of {given} problems dated within {window}"
                      + (f" ({undated} without a date left out)" if undated else ""))
        if not problems:
            raise ValueError(f"no problem of {config.problems} is dated within {window}")
    by_id = {problem.id: problem for problem in problems}
    out = Path(config.out)
    samples_path, results_path = out / "samples.jsonl", out / "results.jsonl"
    done = _prepare_out_dir(out, config, by_id)
    todo_count = sum(problem.id not in done for problem in problems)
    console.print(f"{len(problems)} problems, n={config.n}, max_new_tokens={config.lengths}, "
                  f"T={config.temperature}: {len(problems) - todo_count} already done in {out}, {todo_count} to go")
    if todo_count and generator is None:
        from microcoder.policy.model import load_model_and_tokenizer

        model, tokenizer = load_model_and_tokenizer(config.model)
        generator = ModelGenerator(model, tokenizer, config.temperature, config.top_p, config.batch_size, config.backend)

    if todo_count:
        with Evaluator(EvaluatorConfig(workers=config.workers)) as evaluator:
            for chunk_index, start in enumerate(range(0, len(problems), config.problems_per_chunk)):
                chunk = [p for p in problems[start : start + config.problems_per_chunk] if p.id not in done]
                if not chunk:
                    continue
                seed = _chunk_seed(config.seed, chunk_index)
                groups = generator.generate(chunk, config.n, max(config.lengths), seed)
                if len(groups) != len(chunk) or any(len(group) != config.n for group in groups):
                    raise RuntimeError(f"generator returned {[len(g) for g in groups]} samples for "
                                       f"{len(chunk)} problems x n={config.n}")
                rows = _judge_chunk(evaluator, by_id, chunk, groups, config.lengths, generator.decode,
                                    config.strict_judge)
                _append_jsonl(samples_path, [
                    {"problem_id": problem.id, "sample_index": index, "truncated": sample.truncated,
                     "num_tokens": len(sample.token_ids), "response": sample.text, "token_ids": list(sample.token_ids)}
                    for problem, group in zip(chunk, groups) for index, sample in enumerate(group)])
                _append_jsonl(results_path, [asdict(row) for row in rows])
                done.update(problem.id for problem in chunk)
                console.print(f"  judged {len(done)}/{len(problems)} problems")

    rows = _read_result_rows(results_path)
    table = pass_at_1_table(rows, by_id)
    summary = {"config": config.identity(), "problems": len(problems),
               "pass@1": {str(length): cell for length, cell in table.items()}}
    strict_table = pass_at_1_table(rows, by_id, "strict") if config.strict_judge else None
    if strict_table is not None:
        summary["pass@1_strict"] = {str(length): cell for length, cell in strict_table.items()}
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    console.print(render_table(table, strict_table))
    return summary


def render_table(table: Mapping[int, dict], strict_table: Mapping[int, dict] | None = None) -> Table:
    """The pass@1 table as the paper lays it out: one row per group, one column per length,
    or per length and judge (robust, strict) side by side when `strict_table` is given.
    Each value is "pass@1 ± standard error", in percent."""
    lengths = list(table)
    columns = [(length, "robust", table) for length in lengths]
    if strict_table is not None:
        columns = [column for length in lengths
                   for column in ((length, "robust", table), (length, "strict", strict_table))]
    rich_table = Table(title="pass@1 (%) ± standard error over problems, unbiased from n samples per problem; "
                             "columns: max new tokens" + (" and judge" if strict_table is not None else ""))
    rich_table.add_column("")
    rich_table.add_column("problems", justify="right")
    for length, judge, _ in columns:
        rich_table.add_column(f"{length} {judge}" if strict_table is not None else f"{length} tokens", justify="right")
    largest = table[lengths[-1]]
    rich_table.add_row("all", str(largest["all"]["problems"]),
                       *(_percent(source[length]["all"]) for length, _, source in columns))
    for kind in ("difficulty", "platform", "source"):
        for name, cell in largest[kind].items():
            rich_table.add_row(f"{kind}: {name}", str(cell["problems"]),
                               *(_percent(source[length][kind].get(name)) for length, _, source in columns))
    rich_table.add_row("truncated (%)", "", *(f"{source[length]['fraction_truncated'] * 100:.1f}"
                                               for length, _, source in columns))
    rich_table.add_row("mean tokens", "", *(f"{source[length]['mean_tokens']:.0f}" for length, _, source in columns))
    return rich_table


def _percent(cell: dict | None) -> str:
    if cell is None:
        return "-"
    text = f"{cell['pass@1'] * 100:.1f}"
    return text if cell["stderr"] is None else f"{text} ± {cell['stderr'] * 100:.1f}"


def _judge_chunk(evaluator, by_id, chunk, groups, lengths, decode, strict_judge: bool = False) -> list[ResultRow]:
    """Judge every (sample, length) view, by the strict judge too when asked; identical
    texts of one problem are judged once."""
    from microcoder.evaluator import Sample

    views: list[tuple[str, int, int, GeneratedText]] = []
    for problem, group in zip(chunk, groups):
        for index, sample in enumerate(group):
            for length in lengths:
                views.append((problem.id, index, length, cut_to_length(sample, length, decode)))
    unique = list(dict.fromkeys((problem_id, view.text) for problem_id, _, _, view in views))
    samples = [Sample(problem_id, response=text) for problem_id, text in unique]
    verdicts = dict(zip(unique, evaluator.judging("robust").evaluate(by_id, samples)))
    strict = dict(zip(unique, evaluator.judging("strict").evaluate(by_id, samples))) if strict_judge else {}
    rows = []
    for problem_id, index, length, view in views:
        result = verdicts[(problem_id, view.text)]
        strict_result = strict.get((problem_id, view.text))
        rows.append(ResultRow(problem_id, index, length, result.verdict, result.reward, len(view.token_ids),
                              view.truncated, result.detail,
                              strict_result.verdict if strict_result is not None else None))
    return rows


def _chunk_seed(seed: int, chunk_index: int) -> int:
    return zlib.crc32(f"{seed}:{chunk_index}".encode())


def _append_jsonl(path: Path, records: Sequence[dict]) -> None:
    with open(path, "a", encoding="utf-8") as handle:
        handle.write("".join(json.dumps(record) + "\n" for record in records))


def _read_result_rows(path: Path) -> list[ResultRow]:
    rows = []
    if not path.exists():
        return rows
    for row_number, record in iter_jsonl(path):
        try:
            rows.append(ResultRow(**record))
        except TypeError as error:
            raise ProblemFormatError(path, row_number, "(row)", f"not a result row: {error}") from None
    return rows


def _prepare_out_dir(out: Path, config: ModelEvalConfig, by_id: Mapping[str, Problem]) -> set[str]:
    """Create `out` or resume it: check the settings match, keep only complete problems'
    rows, and return their ids."""
    out.mkdir(parents=True, exist_ok=True)
    config_path = out / "config.json"
    identity = config.identity()
    if config_path.exists():
        previous = json.loads(config_path.read_text())
        changed = {key: (previous.get(key), value) for key, value in identity.items() if previous.get(key) != value}
        if changed:
            details = ", ".join(f"{key}: {old!r} there, {new!r} now" for key, (old, new) in changed.items())
            raise ValueError(f"{out} holds an evaluation with other settings ({details}); use another --out")
    else:
        config_path.write_text(json.dumps(identity, indent=2) + "\n")
    samples_path, results_path = out / "samples.jsonl", out / "results.jsonl"
    rows = _read_result_rows(results_path)
    unknown = sorted({row.problem_id for row in rows} - set(by_id))
    if unknown:
        raise ValueError(f"{results_path} has rows for problems not in {config.problems}: {unknown[:5]}")
    needed = {(index, length) for index in range(config.n) for length in config.lengths}
    have: dict[str, set] = defaultdict(set)
    for row in rows:
        have[row.problem_id].add((row.sample_index, row.max_new_tokens))
    sample_rows = [record for _, record in iter_jsonl(samples_path)] if samples_path.exists() else []
    sampled: dict[str, set] = defaultdict(set)
    for record in sample_rows:
        sampled[record["problem_id"]].add(record["sample_index"])
    done = {pid for pid, keys in have.items() if keys == needed and sampled[pid] == set(range(config.n))}
    # Rewrite both files with complete problems only, so a redone problem has no stale rows.
    if len(done) != len(have) or len(sample_rows) != sum(len(sampled[pid]) for pid in done):
        kept_rows = [asdict(row) for row in rows if row.problem_id in done]
        kept_samples = [record for record in sample_rows if record["problem_id"] in done]
        results_path.write_text("".join(json.dumps(record) + "\n" for record in kept_rows))
        samples_path.write_text("".join(json.dumps(record) + "\n" for record in kept_samples))
    return done
