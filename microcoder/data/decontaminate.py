"""Stage 4, decontaminate: remove training problems that are evaluation problems.

Each named evaluation set is read with the same loaders as the sources (and cached the
same way, under `decontaminate/eval_sets/`). A training problem is removed, with the
evaluation problem it matched, when
- **statement overlap**: the word n-grams (`ngram` words of the normalised statement)
  it shares with one evaluation problem are at least `overlap_threshold` of the n-grams
  of the shorter of the two statements (a copy with edits, or a statement embedded in
  a longer one). N-grams found in more than `common_ngram_max` evaluation problems are
  boilerplate ("the first line contains a single integer t") and do not count. Two
  statements shorter than one n-gram match when their normalised text is equal.
- **identical tests**: its normalised test set equals an evaluation problem's, with at
  least `min_tests_for_identical` tests.

An evaluation set that is missing, cannot be read or gives no problem stops the build
(`remove_contaminated`); the manifest, and the datasheet after it, name each set used
with the sha256 of each of its files.

Limitation: evaluation rows the loaders reject (e.g. interactive problems) are not
matched; a training copy of one is usually rejected by the same rule.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable

from microcoder.data.dedup import normalise_statement, normalised_tests
from microcoder.data.config import PipelineConfig
from microcoder.data.stages import MissingInput, Removal, StageContext, StageOutput, StageSink, file_sha256
from microcoder.problems import Problem


def ngrams(text: str, n: int) -> dict[str, None]:
    """The statement's distinct word n-grams, in the order they first appear (a dict as an
    ordered set: what is reported about a match must not depend on the hash seed)."""
    tokens = normalise_statement(text).split()
    return dict.fromkeys(" ".join(tokens[i : i + n]) for i in range(len(tokens) - n + 1))


class ContaminationIndex:
    """N-gram and test-set index over evaluation problems. Pure (no I/O)."""

    def __init__(self, eval_problems: list[tuple[str, Problem]], ngram: int, common_ngram_max: int,
                 min_tests_for_identical: int):
        self.ngram, self.min_tests = ngram, min_tests_for_identical
        self.names = [f"{set_name}:{problem.id}" for set_name, problem in eval_problems]
        self.sizes: list[int] = []
        self.short: dict[str, int] = {}
        postings: dict[str, list[int]] = defaultdict(list)
        self.tests: dict[tuple, int] = {}
        for index, (_, problem) in enumerate(eval_problems):
            grams = ngrams(problem.prompt, ngram)
            self.sizes.append(len(grams))
            if not grams:
                self.short.setdefault(normalise_statement(problem.prompt), index)
            for gram in grams:
                postings[gram].append(index)
            tests = tuple(normalised_tests(problem))
            if len(tests) >= min_tests_for_identical:
                self.tests.setdefault(tests, index)
        self.postings = {gram: ids for gram, ids in postings.items() if len(ids) <= common_ngram_max}

    def match(self, problem: Problem, threshold: float) -> tuple[str, str, str] | None:
        """(reason, eval problem, detail) for the strongest match, or None."""
        grams = ngrams(problem.prompt, self.ngram)
        if grams:
            shared: Counter[int] = Counter()
            example: dict[int, str] = {}
            for gram in grams:
                for index in self.postings.get(gram, ()):
                    shared[index] += 1
                    example.setdefault(index, gram)
            best, best_overlap = None, 0.0
            for index, count in sorted(shared.items()):  # a tie goes to the first evaluation problem
                overlap = count / max(1, min(len(grams), self.sizes[index]))
                if overlap > best_overlap:
                    best, best_overlap = index, overlap
            if best is not None and best_overlap >= threshold:
                return ("statement overlap", self.names[best],
                        f"{shared[best]} shared {self.ngram}-grams ({best_overlap:.0%} of the shorter), "
                        f"e.g. '{example[best]}'")
        else:
            index = self.short.get(normalise_statement(problem.prompt))
            if index is not None:
                return "statement overlap", self.names[index], "identical short statement"
        tests = tuple(normalised_tests(problem))
        if len(tests) >= self.min_tests and tests in self.tests:
            return "identical tests", self.names[self.tests[tests]], f"{len(tests)} identical tests"
        return None


def remove_contaminated(problems: Iterable[Problem], config: PipelineConfig, context: StageContext,
                        out: StageSink | None = None) -> StageSink:
    """The stage, one problem at a time: what it holds is the index of the evaluation sets
    (their size, not the corpus's). An evaluation set that cannot be read, or gives no
    problem, stops it: a corpus decontaminated against less than its config names must not
    be labelled clean. The manifest records each set's problem count and the sha256 of each
    file read."""
    out = StageOutput() if out is None else out
    from microcoder.data.ingest import ingest_source_cached, source_files, source_name

    settings = config.decontaminate
    cache_dir = config.stage_dir("decontaminate") / "eval_sets"
    eval_problems: list[tuple[str, Problem]] = []
    used: dict[str, dict] = {}
    for position, eval_set in enumerate(settings.eval_sets):
        name = source_name(eval_set)
        loaded, rejected, _ = ingest_source_cached(config, eval_set, context, cache_dir)
        loaded = list(loaded)  # an evaluation set is held whole: the index is built from it
        what = f"decontaminate.eval_sets[{position}] ({name})"
        failed = [reject for reject in rejected if reject.reason == "unreadable source"]
        if failed:
            raise MissingInput(f"{what}: {failed[0].message}; nothing was decontaminated")
        if not loaded:
            raise MissingInput(f"{what}: {eval_set.path} gave no problem ({len(rejected)} rows rejected); "
                               "nothing was decontaminated")
        eval_problems.extend((name, problem) for problem in loaded)
        used[name] = {"problems": len(loaded), "rejected": len(rejected),
                      "files": {str(path): file_sha256(path) for path in source_files(config, eval_set)}}
    index = ContaminationIndex(eval_problems, settings.ngram, settings.common_ngram_max, settings.min_tests_for_identical)
    with context.progress("decontaminate", None) as advance:
        for problem in problems:
            advance()
            found = index.match(problem, settings.overlap_threshold)
            if found is None:
                out.keep(problem)
            else:
                reason, match, detail = found
                out.remove(Removal(problem.id, problem.source, "decontaminate", reason, detail, match))
    out.extra = {"eval_sets": used}
    return out
