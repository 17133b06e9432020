"""Data: public problem sets turned into the canonical format, and the pipeline that builds a corpus.

    sources/          one module per public problem-set format (detect, convert, licence),
                      registered in one table, `sources.SOURCES`
    records.py        a source file's rows on their way to `Problem`s (`Row`, `Reject`)
    literals.py       values and signatures read out of dataset text with `ast`, never run
    leetcode_nodes.py linked-list and binary-tree arguments of LeetCode call problems
    livecodebench.py  LiveCodeBench's release files and its contest-date windows
    assert_tests.py   assert-style tests (HumanEval, MBPP) recorded as call tests in the sandbox
    loaders.py        one file -> problems (`microcoder data convert`), through the table
    cli.py            the `microcoder data` commands
    config.py         the pipeline's config; stages.py what every stage shares (records,
                      context, files, manifests, the stage order); pipeline.py runs the stages in order
    ingest.py, validate.py, dedup.py, decontaminate.py, amplify.py, difficulty.py, export.py:
                      one stage each, in that order
    constraints.py    what a statement says a valid input is (amplify's input generator)
    engines.py        the corpus as verl and TRL load it (export's formats)
    datasheet.py      the corpus's datasheet: what it holds and what each stage removed
"""
