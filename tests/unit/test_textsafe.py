"""Outside text is shown and stored without secrets or terminal control sequences."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from lpxtop import textsafe


def test_registered_secret_is_masked_wherever_it_appears():
    textsafe.register_secret("sk-test-0123456789")
    echoed = 'HTTP 401: invalid header {"authorization": "Bearer sk-test-0123456789"} key=sk-test-0123456789'
    out = textsafe.scrub(echoed)
    assert "sk-test-0123456789" not in out and "0123456789" not in out
    assert out.startswith("HTTP 401: invalid header")


def test_bearer_and_key_assignments_are_masked_but_prose_is_not():
    assert textsafe.redact("Authorization: Bearer abcdef123456") == "Authorization: Bearer ***"
    assert textsafe.redact("--api-key=hunter2hunter2 x") == "--api-key=*** x"
    assert textsafe.redact("api_key: 'verysecret1'") == "api_key: '***'"
    prose = "token limit exceeded: max_tokens must be <= 4096 (the request's tokens: 5000)"
    assert textsafe.redact(prose) == prose


def test_escape_sequences_and_controls_are_removed():
    hostile = "model\x1b[2J\x1b[H\x1b]0;pwned\x07-id\x00\x07\r\nnext\x9b31m"
    assert textsafe.printable(hostile) == "model-id next"
    assert textsafe.printable("a\nb", newlines=True) == "a\nb"
    assert textsafe.scrub(None) is None


@given(st.text())
def test_scrubbed_text_never_holds_a_control_character(text):
    out = textsafe.scrub(text)
    assert not any(ord(c) < 32 and c != "\t" or 0x7F <= ord(c) <= 0x9F for c in out)


@given(st.text())
def test_the_remembering_scrub_is_scrub(text):
    assert textsafe.scrub_recurring(text) == textsafe.scrub(text)
    assert textsafe.scrub_recurring(text) == textsafe.scrub(text)  # a second time: from memory


def test_the_remembering_scrub_forgets_when_a_secret_is_registered():
    text = "label recurring-value-9f3a"
    assert textsafe.scrub_recurring(text) == text
    textsafe.register_secret("recurring-value-9f3a")
    assert textsafe.scrub_recurring(text) == "label ***"


def test_values_of_one_request_are_masked_without_being_registered():
    registered = len(textsafe._secrets)
    assert textsafe.redact("GET /probe?api_key=stranger-12345", also=["stranger-12345", "ab"]) == \
        "GET /probe?api_key=***"
    assert len(textsafe._secrets) == registered
    assert textsafe.redact("stranger-12345") == "stranger-12345"
