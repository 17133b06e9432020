"""Data: public problem sets turned into the canonical format, and the pipeline that builds a corpus.

    sources/        one module per public problem-set format (detect, convert, licence),
                    registered in one table, `sources.SOURCES`
    records.py      a source file's rows on their way to `Problem`s (`Row`, `Reject`)
    loaders.py      one file -> problems (`microcoder data convert`), through the table;
                    assert_tests.py records assert-style tests in the sandbox
    config.py       the pipeline's config; stages.py what every stage shares (records,
                    context, files, manifests); pipeline.py runs the stages in order
    ingest.py, validate.py, dedup.py, decontaminate.py, difficulty.py, export.py: one stage each
"""
