"""Measuring retrieval and answer quality: BEIR benchmarks and an organisation's golden set.

* ``beir``: read a BEIR-format folder (corpus, queries, qrels) and fingerprint it.
* ``ir_metrics``: nDCG@10, Recall@100 and MRR@10 as trec_eval computes them.
* ``runner``: ingest a corpus into an isolated index and run its queries through ``SearchService``.
* ``qa``: the golden set (questions, relevant documents, answerable or not) against search and
  ``/v1/answer``'s service.
* ``report``: the side-by-side table and the JSON file.
"""
