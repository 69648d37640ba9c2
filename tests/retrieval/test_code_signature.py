"""Reading a code chunk's signature and docstring, in the languages the code chunker reads."""

from __future__ import annotations

from citewise.retrieval.answering.code_signature import opens_definition, signature_and_docstring


def test_a_python_signature_keeps_its_decorator_and_its_lines():
    code = '''@router.get("/v1/answer")
def answer(
    question: str,
    top_k: int = 8,
) -> Answer:
    """The cited answer to a question.

    Abstains when nothing the caller may read is close enough.
    """
    return service.answer(question, top_k)'''
    signature, doc = signature_and_docstring(code)
    assert signature == code.split('\n    """')[0]
    assert signature.endswith(") -> Answer:") and signature.startswith("@router.get")
    assert doc == "The cited answer to a question."


def test_a_brace_function_is_read_up_to_its_brace_with_its_leading_comment():
    code = ("func (c *Client) Charge(amount int) error {\n"
            "\t// Charge charges a card, retrying on 5xx.\n"
            "\t// It gives up after c.Retries tries.\n"
            "\treturn c.try(amount)\n}")
    signature, doc = signature_and_docstring(code)
    assert signature == "func (c *Client) Charge(amount int) error {"
    assert doc == "Charge charges a card, retrying on 5xx. It gives up after c.Retries tries."


def test_what_opens_a_definition():
    assert opens_definition("\n@dataclass\nclass Evidence:")
    assert opens_definition("export async function fetchPage(client, path) {")
    assert opens_definition("pub(crate) fn parse(input: &str) -> Result<Doc> {")
    assert not opens_definition("# Backoff grows with each attempt.\ndef backoff(n):")
    assert not opens_definition("    return total")
    # A statement can read like one, which is why the code chunker marks the later parts of a
    # split function (``continues_symbol``) instead of leaving it to this line.
    assert opens_definition("  const response = await http.get(url);")
