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

from microcoder.data.config import DedupConfig
from microcoder.data.stages import Removal, StageContext, StageOutput
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


def deduplicate(problems: list[Problem], config: DedupConfig, context: StageContext) -> StageOutput:
    from datasketch import MinHash, MinHashLSH

    order = sorted(range(len(problems)), key=lambda i: (richness(problems[i]), -i), reverse=True)
    lsh = MinHashLSH(threshold=config.threshold, num_perm=config.num_perm)
    exact_seen: dict[str, str] = {}
    kept_shingles: dict[str, set[str]] = {}
    kept_numbers: dict[str, str] = {}
    kept_ids: set[str] = set()
    removals: list[Removal] = []
    variants: list[tuple[str, str]] = []
    with context.progress("dedup", len(problems)) as advance:
        for index in order:
            advance()
            problem = problems[index]
            key = exact_key(problem)
            if key in exact_seen:
                removals.append(Removal(problem.id, problem.source, "dedup", "exact duplicate",
                                        "same normalised statement and tests", exact_seen[key]))
                continue
            own = shingles(problem.prompt, config.shingle_words)
            if config.near and own:
                minhash = MinHash(num_perm=config.num_perm)
                minhash.update_batch([s.encode() for s in own])
                own_numbers = numbers_in(problem.prompt)
                best_id, best, variant_of = None, 0.0, None
                for candidate in lsh.query(minhash):
                    similarity = jaccard(own, kept_shingles[candidate])
                    if similarity < config.threshold:
                        continue
                    if config.keep_constraint_variants and kept_numbers[candidate] != own_numbers:
                        variant_of = variant_of or candidate
                    elif similarity > best:
                        best_id, best = candidate, similarity
                if best_id is not None:
                    removals.append(Removal(problem.id, problem.source, "dedup", "near duplicate",
                                            f"statement Jaccard {best:.2f}", best_id))
                    continue
                if variant_of is not None:
                    variants.append((problem.id, variant_of))
                kept_numbers[problem.id] = own_numbers
                lsh.insert(problem.id, minhash)
                kept_shingles[problem.id] = own
            exact_seen[key] = problem.id
            kept_ids.add(problem.id)
    kept = [problem for problem in problems if problem.id in kept_ids]
    variant_ids = dict(variants)
    for problem in kept:
        if problem.id in variant_ids:
            problem.metadata["constraint_variant_of"] = variant_ids[problem.id]
    return StageOutput(kept, removals, extra={"constraint_variants_kept": len(variants),
                                              "constraint_variant_examples": variants[:5]})
