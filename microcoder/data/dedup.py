"""Stage 3, dedup: one record per problem, within and across sources.

Problems are visited richest first (`richness`): more tests, then a reference solution,
then a difficulty label, a date and a checker; ties go to the earlier record (source
order in the config). Each problem is then
- an **exact duplicate** of a kept one when its normalised statement and normalised
  test set are equal (`exact_key`);
- a **near duplicate** when the Jaccard similarity of its statement's word shingles
  with a kept one's is at or above `threshold`. Candidates come from MinHash LSH
  (datasketch); the similarity reported and compared is the exact Jaccard of the
  shingle sets, so LSH only narrows the search;
- else kept, and added to the index.
Greedy, richest first, means the kept record is always the richest of its group, and a
problem is never removed through a chain of pairwise similarities (A~B, B~C, A!~C).

Statements that are near-identical but whose digits differ (LeetCode's "... I" and
"... II": same story, larger constraints, a harder problem) are constraint variants, not
copies: both are kept (`keep_constraint_variants`), the later one marked with
`metadata.constraint_variant_of`. Without this, dedup kept the variant with more tests
and dropped ~200 harder "II" problems from the shared sources.

Choices of ours: word 3-gram shingles (a one-word edit in a 100-word statement keeps
Jaccard ~0.94; "maximum" vs "minimum" in a 10-word MBPP task gives ~0.5, kept apart);
a statement shorter than one shingle is compared whole.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections.abc import Iterable

from microcoder.data.config import DedupConfig
from microcoder.data.stages import Removal, StageContext, StageInput, StageOutput, StageSink, passes_over
from microcoder.problems import Problem

_WORD = re.compile(r"[a-z0-9]+")


def normalise_statement(text: str) -> str:
    """Lowercase alphanumeric words joined by single spaces (markup and spacing ignored)."""
    return " ".join(_WORD.findall(text.lower()))


def normalised_tests(problem: Problem) -> list[tuple[str, str]]:
    """Tests as a sorted list of whitespace-normalised (input, output) pairs."""
    return sorted({(" ".join(t.input.split()), " ".join(t.output.split())) for t in problem.tests})


def exact_key(problem: Problem) -> str:
    payload = json.dumps([normalise_statement(problem.prompt), normalised_tests(problem)])
    return hashlib.sha1(payload.encode()).hexdigest()


def shingles(text: str, words: int) -> set[str]:
    tokens = normalise_statement(text).split()
    if len(tokens) < words:
        return {" ".join(tokens)} if tokens else set()
    return {" ".join(tokens[i : i + words]) for i in range(len(tokens) - words + 1)}


def numbers_in(text: str) -> str:
    """The statement's digits, in order: two near-identical statements whose digits differ
    are variants with other constraints (LeetCode's "I" and "II"), not copies. Digits, not
    numbers, so that one limit written three ways ("10^5", "10<sup>5</sup>" flattened to
    "105", "10⁵") compares equal."""
    return "".join(re.findall(r"\d", unicodedata.normalize("NFKC", text)))


def jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a or b else 1.0


def richness(problem: Problem) -> tuple:
    """Sort key, larger is richer (see the module docstring)."""
    return (len(problem.tests), "reference_solution" in problem.metadata, problem.difficulty is not None,
            problem.date is not None, problem.checker is not None)


def deduplicate(problems: Iterable[Problem], config: DedupConfig, context: StageContext,
                out: StageSink | None = None) -> StageSink:
    """The stage, in two passes over `problems` (a list or a `StageInput`). The first keeps,
    per problem, what ordering and exact matching need: its id, source, `richness`, exact
    key and where to read it again. The greedy walk, richest first, reads each problem it
    must compare again by that position; a kept problem adds its exact key and, with
    `near`, its MinHash to the LSH index (all told ~5 KB a kept problem at 128
    permutations, as tests/test_data_streaming.py measures it). Candidates' shingles are
    recomputed from their statements read again, not held. The second pass writes the kept
    problems in input order."""
    from datasketch import MinHash, MinHashLSH

    out = StageOutput() if out is None else out
    passes_over(problems, "dedup")
    located = problems.located() if isinstance(problems, StageInput) else enumerate(problems)
    read_again = problems.at if isinstance(problems, StageInput) else problems.__getitem__
    seen: list[tuple[tuple, int, str, str, str, int]] = []  # (richness, -index, exact key, id, source, position)
    for index, (position, problem) in enumerate(located):
        seen.append((richness(problem), -index, exact_key(problem), problem.id, problem.source, position))
    seen.sort(key=lambda entry: entry[:2], reverse=True)
    lsh = MinHashLSH(threshold=config.threshold, num_perm=config.num_perm)
    positions: dict[str, int] = {}
    exact_seen: dict[str, str] = {}
    kept_ids: set[str] = set()
    variants: list[tuple[str, str]] = []

    def statement_of(problem_id: str) -> str:
        return read_again(positions[problem_id]).prompt

    with context.progress("dedup", len(seen)) as advance:
        for _, _, key, problem_id, source, position in seen:
            advance()
            if key in exact_seen:
                out.remove(Removal(problem_id, source, "dedup", "exact duplicate",
                                   "same normalised statement and tests", exact_seen[key]))
                continue
            if config.near:
                prompt = read_again(position).prompt
                own = shingles(prompt, config.shingle_words)
                if own:
                    minhash = MinHash(num_perm=config.num_perm)
                    minhash.update_batch([s.encode() for s in own])
                    own_numbers = numbers_in(prompt)
                    best_id, best, variant_of = None, 0.0, None
                    for candidate in lsh.query(minhash):
                        candidate_statement = statement_of(candidate)
                        similarity = jaccard(own, shingles(candidate_statement, config.shingle_words))
                        if similarity < config.threshold:
                            continue
                        if config.keep_constraint_variants and numbers_in(candidate_statement) != own_numbers:
                            variant_of = variant_of or candidate
                        elif similarity > best:
                            best_id, best = candidate, similarity
                    if best_id is not None:
                        out.remove(Removal(problem_id, source, "dedup", "near duplicate",
                                           f"statement Jaccard {best:.2f}", best_id))
                        continue
                    if variant_of is not None:
                        variants.append((problem_id, variant_of))
                    lsh.insert(problem_id, minhash)
                    positions[problem_id] = position
            exact_seen[key] = problem_id
            kept_ids.add(problem_id)
    del seen
    variant_ids = dict(variants)
    for problem in problems:
        if problem.id in kept_ids:
            if problem.id in variant_ids:
                problem.metadata["constraint_variant_of"] = variant_ids[problem.id]
            out.keep(problem)
    out.extra = {"constraint_variants_kept": len(variants), "constraint_variant_examples": variants[:5]}
    return out
