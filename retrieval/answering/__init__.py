"""Cited answers: what the question wants, composed from the sources' own units.

* ``question.py``: the shape of the question (steps, fact, code, definition...) and its names;
* ``compose.py``: the extractive answer, from document outlines and passages;
* ``markdown.py``: a model's Markdown answer as blocks;
* ``model.py``: the answer, its blocks and citations;
* ``service.py``: ``AnswerService``, which searches, decides whether to abstain, and composes.
"""

from citewise.retrieval.answering.model import Answer, AnswerBlock, Citation
from citewise.retrieval.answering.service import NO_ANSWER, AnswerService

__all__ = ["NO_ANSWER", "Answer", "AnswerBlock", "AnswerService", "Citation"]
