"""Cited answers: what the question wants, composed from the sources' own units.

* ``question.py``: the shape of the question (steps, fact, code, definition...) and its names;
* ``compose.py``: the extractive answer: which strategies (``strategies/``, one shape of answer
  each) a question gets, in which order;
* ``evidence.py``: what the strategies work from (the passages and outlines the caller may read)
  and hand back; ``quoting.py``: what of a document may be quoted on its own;
  ``lexical.py``: the question's words in a passage; ``code_signature.py``: a code chunk's
  signature and docstring;
* ``markdown.py``: a model's Markdown answer as blocks;
* ``model.py``: the answer, its blocks and citations;
* ``service.py``: ``AnswerService``, which searches, decides whether to abstain, and composes.
"""

from citewise.retrieval.answering.model import Answer, AnswerBlock, Citation
from citewise.retrieval.answering.service import NO_ANSWER, AnswerService

__all__ = ["NO_ANSWER", "Answer", "AnswerBlock", "AnswerService", "Citation"]
