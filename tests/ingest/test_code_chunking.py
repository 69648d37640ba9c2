"""Code chunking: structure, exact lines, symbols and the embedding window, on real code."""

from __future__ import annotations

import pytest

from citewise.index.dense import embedding_text
from citewise.ingest.chunking.code import CodeChunker
from citewise.types import SourceDocument

PYTHON = '''"""Retry policy for outbound calls."""

import random

MAX_ATTEMPTS = 4


# Backoff grows with each attempt; jitter spreads retries from many clients.
def backoff(attempt: int) -> float:
    return min(30.0, 0.5 * 2 ** attempt) * random.random()


class RetryPolicy:
    """When and how often to retry."""

    budget = 3

    @classmethod
    def default(cls) -> "RetryPolicy":
        """The policy most clients use."""
        return cls()

    def should_retry(self, attempt: int, status: int) -> bool:
        return attempt < self.budget and status >= 500


if __name__ == "__main__":
    print(backoff(2))
'''

GO = '''package payments

import (
	"fmt"
	"time"
)

// Client calls the payment provider.
type Client struct {
	BaseURL string
	Retries int
}

// Charge charges a card, retrying on 5xx.
func (c *Client) Charge(amount int) error {
	for i := 0; i < c.Retries; i++ {
		if err := c.try(amount); err == nil {
			return nil
		}
		time.Sleep(time.Second)
	}
	return fmt.Errorf("charge failed after %d tries", c.Retries)
}

func NewClient(url string) *Client {
	return &Client{BaseURL: url, Retries: 3}
}
'''

TS = '''import { Region } from "./regions";

/** Picks the deploy region: the flag, else the team default. */
export function pickRegion(flag?: string): Region {
  if (flag) {
    return flag as Region;
  }
  return "eu-west-1";
}

export class Deployer {
  constructor(private readonly region: Region) {}

  async deploy(app: string): Promise<void> {
    console.log(`deploying ${app} to ${this.region}`);
  }
}
'''

YAML = '''name: deploy
on:
  push:
    branches: [main]
jobs:
  deploy:
    runs-on: ubuntu-latest
    steps:
      - name: Check out
        uses: actions/checkout@v4
      - name: Deploy
        run: ./deploy/deploy.sh
'''


def chunks_of(dense, text, language, path="src/file", max_tokens=200):
    doc = SourceDocument(external_id=path, title=path, content=text.encode(),
                         media_type="text/x-code", path=path, metadata={"language": language},
                         body=text)
    return CodeChunker(dense.count_tokens, max_tokens).chunk("doc", doc)


def assert_exact(chunks, text, dense, title, max_tokens=200):
    """Each chunk is exactly its lines, within the window; every non-blank line is covered."""
    lines = text.split("\n")
    covered = set()
    for c in chunks:
        assert c.anchor is None
        assert c.text == "\n".join(lines[c.start_line - 1 : c.end_line])
        assert dense.count_tokens(embedding_text(title, c.heading, c.text)) <= max_tokens
        covered.update(range(c.start_line, c.end_line + 1))
    assert [n for n, line in enumerate(lines, 1) if line.strip() and n not in covered] == []
    assert [c.ordinal for c in chunks] == list(range(len(chunks)))


def find(chunks, symbol):
    found = [c for c in chunks if c.symbol == symbol]
    assert found, [c.symbol for c in chunks]
    return found[0]


def test_python_definitions_with_decorators_docstrings_and_comments(dense):
    chunks = chunks_of(dense, PYTHON, "python", "app/retry.py")
    assert_exact(chunks, PYTHON, dense, "app/retry.py")
    lines = PYTHON.split("\n")
    backoff = find(chunks, "def backoff")
    # The comment right above the function belongs to it.
    assert lines[backoff.start_line - 1].startswith("# Backoff grows")
    assert backoff.heading == "def backoff"
    default = find(chunks, "class RetryPolicy > def default")
    assert lines[default.start_line - 1].strip() == "@classmethod"
    assert '"""The policy most clients use."""' in default.text
    should = find(chunks, "class RetryPolicy > def should_retry")
    assert should.end_line == should.start_line + 1
    # The class line, docstring and attribute stay together under the class's name.
    header = find(chunks, "class RetryPolicy")
    assert "budget = 3" in header.text and "def " not in header.text
    # Module-level code is packed, without a symbol, under the file's path.
    module = [c for c in chunks if c.symbol is None]
    assert module and all(c.heading == "app/retry.py" for c in module)
    assert any("MAX_ATTEMPTS = 4" in c.text for c in module)
    assert any('if __name__ == "__main__":' in c.text for c in module)


def test_long_function_is_split_along_statements_within_the_window(dense):
    body = "\n".join(f"    total += compute_step_{i}(value, factor={i})" for i in range(120))
    text = f"def accumulate(value):\n    total = 0\n{body}\n    return total\n"
    chunks = chunks_of(dense, text, "python", "app/steps.py", max_tokens=120)
    assert len(chunks) > 3
    assert {c.symbol for c in chunks} == {"def accumulate"}
    assert_exact(chunks, text, dense, "app/steps.py", max_tokens=120)
    assert chunks[0].start_line == 1 and chunks[-1].end_line == 123


def test_go_methods_types_and_doc_comments(dense):
    chunks = chunks_of(dense, GO, "go", "payments/client.go")
    assert_exact(chunks, GO, dense, "payments/client.go")
    charge = find(chunks, "Client > func Charge")
    assert GO.split("\n")[charge.start_line - 1].startswith("// Charge charges")
    assert charge.text.endswith("}")
    assert find(chunks, "func NewClient").end_line == GO.rstrip("\n").count("\n") + 1
    assert find(chunks, "type Client")


def test_typescript_functions_classes_and_methods(dense):
    chunks = chunks_of(dense, TS, "typescript", "deploy/region.ts")
    assert_exact(chunks, TS, dense, "deploy/region.ts")
    pick = find(chunks, "function pickRegion")
    assert TS.split("\n")[pick.start_line - 1].startswith("/** Picks the deploy region")
    assert find(chunks, "class Deployer > deploy()")


def test_yaml_blocks_by_key(dense):
    chunks = chunks_of(dense, YAML, "yaml", ".github/workflows/deploy.yml")
    assert_exact(chunks, YAML, dense, ".github/workflows/deploy.yml")
    jobs = find(chunks, "jobs")
    assert jobs.start_line == 5 and jobs.end_line == 12


def test_unknown_language_and_minified_line_stay_within_the_window(dense):
    minified = "var a=" + "+".join(f"f{i}(x{i})" for i in range(600)) + ";"
    text = f"first block\nstill first\n\nsecond block\n\n{minified}\n"
    chunks = chunks_of(dense, text, "text", "weird.xyz", max_tokens=100)
    for c in chunks:
        assert dense.count_tokens(embedding_text("weird.xyz", c.heading, c.text)) <= 100
    long_line = [c for c in chunks if c.start_line == 6]
    assert len(long_line) > 2 and all(c.end_line == 6 for c in long_line)
    assert chunks[0].text == "first block\nstill first\n\nsecond block"


@pytest.mark.parametrize("language", ["python", "go", "rust", "yaml", "json", "shell"])
def test_broken_or_odd_input_never_fails(dense, language):
    text = "def broken(:\n  {{{ ]]] \"unterminated\n'also\n\t}\n}\n}\n" * 5
    chunks = chunks_of(dense, text, language)
    assert_exact(chunks, text, dense, "src/file")


def test_line_numbers_follow_the_body_offset(dense):
    doc = SourceDocument(external_id="x.py", title="x.py", content=b"", media_type="text/x-code",
                         path="x.py", metadata={"language": "python"}, body_line_offset=3,
                         body="def f():\n    return 1\n")
    chunks = CodeChunker(dense.count_tokens, 200).chunk("doc", doc)
    assert (chunks[0].start_line, chunks[0].end_line) == (4, 5)


def test_a_bare_class_line_goes_with_its_first_method(dense):
    text = (
        "class Pipeline:\n\n"
        "    def __init__(self, catalog, index):\n"
        "        self.catalog = catalog\n        self.index = index\n\n"
        "    def run(self, source):\n"
        + "".join(f"        step_{i}(source, self.catalog, self.index)\n" for i in range(40))
    )
    chunks = chunks_of(dense, text, "python", "app/pipeline.py")
    assert_exact(chunks, text, dense, "app/pipeline.py")
    # No chunk holds only the declaration; the constructor's chunk starts at it.
    assert all(c.text.strip() != "class Pipeline:" for c in chunks)
    init = find(chunks, "class Pipeline > def __init__")
    assert init.start_line == 1 and "def __init__" in init.text
    assert find(chunks, "class Pipeline > def run").start_line == 7



PAGED_FETCH = '''// Fetches one page of the partner API, waiting out its rate limit.
export async function fetchPage(client, path) {
  let attempt = 0;
  while (attempt < client.maxRetries) {
    attempt += 1;
    await client.limiter.wait();
    client.log.debug("waiting for the partner API limiter before %s", path);
    client.metrics.increment("partner.waits", { path, attempt });
  }
  const response = await http.get(client.base + path, { timeout: client.timeoutMs });
  if (response.status === 404) {
    throw new Error(`the partner API has no ${path}`);
  }
  const retryAfter = Number(response.headers["retry-after"] || 0);
  return response.json();
}

export function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
'''


def test_the_later_parts_of_a_split_definition_are_marked(dense):
    """A part that starts with ``const response = ...`` looks like a definition's first line;
    the chunker knows it continues ``fetchPage`` and says so, so no answer shows it as the
    function's signature."""
    chunks = chunks_of(dense, PAGED_FETCH, "javascript", "partner/fetch.js", max_tokens=80)
    assert_exact(chunks, PAGED_FETCH, dense, "partner/fetch.js", max_tokens=80)
    parts = [c for c in chunks if c.symbol == "function fetchPage"]
    assert len(parts) >= 3
    assert [c.continues_symbol for c in parts] == [False] + [True] * (len(parts) - 1)
    assert parts[0].start_line == 1  # the comment above it and its signature
    assert any(c.text.lstrip().startswith("const ") for c in parts[1:]), [c.text for c in parts]
    assert find(chunks, "function sleep").continues_symbol is False


def test_a_definition_whose_first_line_is_cut_into_pieces_continues_after_the_first(dense):
    text = "def big(" + ", ".join(f"p{i}=f{i}(x{i})" for i in range(120)) + "):\n    return p0\n"
    chunks = chunks_of(dense, text, "python", "app/big.py", max_tokens=100)
    assert {c.symbol for c in chunks} == {"def big"} and len(chunks) > 2
    assert chunks[0].text.startswith("def big(") and chunks[0].continues_symbol is False
    assert all(c.continues_symbol for c in chunks[1:])


def test_whole_definitions_and_module_code_continue_nothing(dense):
    chunks = chunks_of(dense, PYTHON, "python", "app/retry.py")
    assert {c.continues_symbol for c in chunks} == {False}


def test_the_parts_up_to_a_definitions_declaration_do_not_continue_it(dense):
    """Decorators long enough to fill a chunk of their own: the parts up to the ``def`` line
    hold the signature still to come, or hold it; only the parts past it continue it."""
    options = "\n".join(f'@click.option("--{n}", help="Only documents whose {n} matches this '
                        f'value, case-insensitive.")' for n in ("tag", "source", "path", "service"))
    body = "\n".join(f"    results.extend(search_step_{i}(query, top_k, sources))"
                     for i in range(12))
    text = (f"@cli.command()\n{options}\ndef search(query, top_k, sources):\n"
            f'    """Search the knowledge base."""\n    results = []\n{body}\n    return results\n')
    chunks = chunks_of(dense, text, "python", "cli/query.py", max_tokens=80)
    assert {c.symbol for c in chunks} == {"def search"} and len(chunks) > 3
    declaration = text.split("\n").index("def search(query, top_k, sources):") + 1
    for c in chunks:
        assert c.continues_symbol == (c.start_line > declaration), (c.start_line, c.text)
    # The decorators fill a chunk of their own before the one that holds the ``def`` line.
    holding = next(c for c in chunks if c.start_line <= declaration <= c.end_line)
    assert chunks[0].end_line < declaration and not holding.continues_symbol
