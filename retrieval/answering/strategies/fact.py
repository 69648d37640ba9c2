"""Facts ("who owns", "which port", "how long"): a label and its value, where the sources give one.

In order: a section asked for by name ("what are the severity levels?", ``listing.py``); a table
row with its column headers, unless a sentence answers clearly better; a field of the best
document's front matter (owner, severity). The sentence that holds the value is the fallback
the composer tries next (``sentences.py``).
"""

from __future__ import annotations

from citewise.index.dense import embedding_text
from citewise.retrieval.answering.evidence import Citations, Composed, Evidence
from citewise.retrieval.answering.lexical import content_words
from citewise.retrieval.answering.model import AnswerBlock
from citewise.retrieval.answering.question import Question
from citewise.retrieval.answering.strategies.listing import ListingStrategy
from citewise.retrieval.answering.strategies.protocol import Scorer
from citewise.retrieval.answering.strategies.sentences import SentencesStrategy

# How much closer to the question a sentence must be than a table row to be the answer instead.
ROW_MARGIN = 0.1


class FactStrategy:
    def __init__(self, scorer: Scorer, listing: ListingStrategy,
                 sentences: SentencesStrategy) -> None:
        self.score = scorer
        self.listing = listing
        self.sentences = sentences

    def compose(self, q: Question, ev: Evidence) -> Composed | None:
        # "What are the severity levels?" names a section and wants it as the list it is; a
        # table row that only shares the word "severity" with the question answers less.
        listing = self.listing.compose(q, ev)
        if listing is not None:
            return listing
        row = self._table_row(q, ev)
        if row is not None:
            # A row that shares the question's rarer words can still be about something else
            # ("Where does the client wait after a 429?" and a table of Confluence's statuses):
            # the sentence that answers it, when it is clearly closer, wins; the row otherwise
            # (it is the structured answer, label and value), and always when it has the column
            # asked for ("who owns": an Owner column).
            if q.fact_label and any(q.fact_label in _label_family(b.label or "")
                                    for b in row.blocks):
                return row
            sentence = self.sentences.compose(q, ev)
            if sentence is not None and sentence.unit_score > row.unit_score + ROW_MARGIN:
                return sentence
            return row
        return self._front_matter(q, ev)

    def _table_row(self, q: Question, ev: Evidence) -> Composed | None:
        """The table row whose cells share the question's rarer words, with its headers."""
        terms = content_words(q.words)
        best, best_score = None, 0.0
        for doc_id in ev.documents():
            outline = ev.outlines[doc_id]
            hits = ev.hit_sections(doc_id)
            for i, s in enumerate(outline.sections):
                for b in s.blocks:
                    if b.kind != "table" or not b.header or not b.rows:
                        continue
                    # A word in many rows (a column's common value) tells rows apart poorly.
                    df: dict[str, int] = {}
                    for row in b.rows:
                        for w in terms & content_words(" ".join(row)):
                            df[w] = df.get(w, 0) + 1
                    for row in b.rows:
                        shared = terms & content_words(" ".join(row))
                        score = sum(1.0 / df[w] for w in shared)
                        if score >= 1.0 and score + (0.5 if i in hits else 0.0) > best_score:
                            best, best_score = (doc_id, s, b, row), score + (0.5 if i in hits
                                                                            else 0.0)
        if best is None:
            return None
        doc_id, s, b, row = best
        cites = Citations(ev)
        pairs = [(h, v) for h, v in zip(b.header, row, strict=False) if v.strip()]
        quote = " | ".join(f"{h}: {v}" for h, v in pairs)
        n = cites.cite(doc_id, s.path, s.anchor, b.start_line, b.end_line, quote)
        if q.fact_label:
            # The column asked for first, then the row's key (its first column).
            asked = [p for p in pairs if q.fact_label in _label_family(p[0])]
            pairs = asked + [p for p in pairs[:1] if p not in asked] if asked else pairs
        blocks = [AnswerBlock(type="fact", label=h, value=v, citations=[n]) for h, v in pairs]
        score = float(self.score([embedding_text(ev.records[doc_id].title, s.path, quote)])[0])
        return Composed(blocks, cites.all(), score, [doc_id])

    def _front_matter(self, q: Question, ev: Evidence) -> Composed | None:
        """A field of the best document's front matter (owner, severity)."""
        if q.fact_label not in ("owner", "severity"):
            return None
        top = ev.results[0].document_id
        record = ev.records[top]
        meta = record.metadata or {}
        if not meta.get(q.fact_label):
            return None
        cites = Citations(ev)
        value = str(meta[q.fact_label])
        n = cites.cite(top, "", None, 1, None, f"{q.fact_label}: {value}")
        blocks = [AnswerBlock(type="fact", label=q.fact_label.capitalize(), value=value,
                              citations=[n])]
        if meta.get("service"):
            blocks.append(AnswerBlock(type="fact", label="Service", value=str(meta["service"]),
                                      citations=[n]))
        score = float(self.score([embedding_text(record.title, "",
                                                 f"{q.fact_label} {value}")])[0])
        return Composed(blocks, cites.all(), score, [top])


def _label_family(label: str) -> str:
    """A column or field name as the fact label it stands for ("Team", "Maintainer": owner)."""
    low = label.lower()
    if low in ("team", "owning team", "owned by", "maintainer", "maintainers"):
        return "owner"
    return low
