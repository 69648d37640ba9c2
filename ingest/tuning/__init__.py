"""Tuning the embedding model on the installation's own text (``citewise tune``).

``pairs.py`` mines (anchor, passage) pairs from the catalog, ``leakage.py`` keeps every
evaluation question out of them, ``train.py`` fine-tunes a copy of the model on them with
in-batch negatives and writes it to a folder of its own. Nothing here touches the live index:
a tuned model is adopted only by ``citewise reindex`` with the model setting pointing at it.
"""
