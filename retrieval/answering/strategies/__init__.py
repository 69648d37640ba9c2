"""Answer strategies: one shape of answer each, behind ``protocol.Strategy``.

* ``code.py``: a function's signature and docstring, with file and lines;
* ``steps.py``: a runbook's procedure, whole and in order, with its commands;
* ``alert.py``: what a fired alert means, then the steps;
* ``fact.py``: a label and its value (table row, front matter), via ``listing.py`` for a
  section asked for by name;
* ``cause.py``: the section that says why;
* ``expansion.py``: what an abbreviation stands for;
* ``definition.py``: the unit that defines a term;
* ``sentences.py``: the best whole sentences (every question's last resort).

Which of them a question gets, and in which order they are tried, is decided in one place:
``retrieval/answering/compose.py``.
"""
