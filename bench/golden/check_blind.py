#!/usr/bin/env python3
"""Mechanical check of bench/golden/blind.jsonl, or of dev.jsonl or dev2.jsonl (stdlib only; does
not import citewise). A file's rows must all carry its own split ("blind" in blind.jsonl, "dev"
in dev.jsonl, "dev2" in dev2.jsonl).

Every line parses; fields are exactly the expected ones with the expected types;
every relevant path exists under the corpora root; every must_contain_any string
occurs verbatim in at least one relevant file. Prints counts per corpus and kind.

usage: python3 bench/golden/check_blind.py [blind.jsonl | dev.jsonl | dev2.jsonl] [corpora root]
"""
import collections
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PATH = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "blind.jsonl")
SPLIT = os.path.splitext(os.path.basename(PATH))[0]
ROOT = sys.argv[2] if len(sys.argv) > 2 else os.environ.get("CORPORA", "/work/shared/corpora")
FIELDS = {"question": str, "relevant": list, "answerable": bool, "kind": str,
          "must_contain_any": list, "split": str, "paraphrased": bool}
KINDS = {"action", "fact", "alert", "policy", "code", "explain"}
CORPORA = ["gitlab-com-runbooks", "govuk-developer-docs", "openshift-runbooks",
           "prometheus-operator-runbooks", "sourcegraph-handbook"]

errors = []
per_corpus = collections.Counter()
per_kind = collections.Counter()
para = unans = n = 0
seen = set()
for i, line in enumerate(open(PATH, encoding="utf-8"), 1):
    where = f"line {i}"
    try:
        row = json.loads(line)
    except ValueError as e:
        errors.append(f"{where}: not JSON ({e})")
        continue
    n += 1
    if set(row) != set(FIELDS):
        errors.append(f"{where}: fields {sorted(row)}")
        continue
    for k, t in FIELDS.items():
        if not isinstance(row[k], t):
            errors.append(f"{where}: {k} is not {t.__name__}")
    q = row["question"].strip()
    if not q or q.lower() in seen:
        errors.append(f"{where}: empty or duplicate question")
    seen.add(q.lower())
    if row["kind"] not in KINDS:
        errors.append(f"{where}: kind {row['kind']!r}")
    if row["split"] != SPLIT:
        errors.append(f"{where}: split {row['split']!r}")
    per_kind[row["kind"]] += 1
    para += row["paraphrased"]
    if not row["answerable"]:
        unans += 1
        per_corpus["(unanswerable)"] += 1
        if row["relevant"] or row["must_contain_any"]:
            errors.append(f"{where}: unanswerable row with relevant/must_contain_any")
        continue
    if not row["relevant"] or not row["must_contain_any"]:
        errors.append(f"{where}: answerable row without relevant or must_contain_any")
        continue
    texts = []
    corpora = set()
    for rel in row["relevant"]:
        corpora.add(rel.split("/", 1)[0])
        if rel.split("/", 1)[0] not in CORPORA:
            errors.append(f"{where}: unknown corpus in {rel}")
        full = os.path.join(ROOT, rel)
        if not os.path.isfile(full):
            errors.append(f"{where}: missing {rel}")
            continue
        texts.append(open(full, encoding="utf-8", errors="replace").read())
    # a row counts for the corpus of its first relevant document
    per_corpus[row["relevant"][0].split("/", 1)[0]] += 1
    for s in row["must_contain_any"]:
        if not isinstance(s, str) or len(s.strip()) < 2:
            errors.append(f"{where}: bad must_contain_any {s!r}")
        elif not any(s in t for t in texts):
            errors.append(f"{where}: {s!r} not found verbatim in any relevant file")

print(f"rows {n}: answerable {n - unans}, unanswerable {unans}, paraphrased {para}")
print("per corpus:", dict(sorted(per_corpus.items())))
print("per kind:  ", dict(sorted(per_kind.items())))
for e in errors:
    print("ERROR", e)
sys.exit(1 if errors else 0)
