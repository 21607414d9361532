"""The model clients on the wire: Ollama and OpenAI-compatible request bodies, call records, and
every provider failure turned into ProviderError with the failed call attached."""

import json
import socket

import pytest

from pipeline import parsing
from pipeline.llm import ProviderError, get_chat_client, prompts
from pipeline.llm.ollama import OllamaChat
from pipeline.llm.openai import OpenAIChat
from pipeline.parsing import Candidate, Fact
from tests.fake_ollama import Script

TEXT = "Priya prefers squash merges for every repository."
FACT = Fact("Priya prefers squash merges for every repository", "preference", 0.9)
CANDIDATES = [Candidate(1, "mem-1", "Priya likes merge commits", "preference")]


def test_the_ollama_extraction_request_uses_the_schema_no_streaming_and_temperature_zero(
    fake_ollama, settings
):
    fake_ollama.chat_reply('{"facts": [], "entities": []}')
    client = get_chat_client()
    assert isinstance(client, OllamaChat)
    record = client.extract(TEXT)
    (body,) = fake_ollama.calls("/api/chat")
    assert body["stream"] is False
    assert body["format"] == prompts.EXTRACTION_SCHEMA
    assert {"facts", "entities"} <= set(body["format"]["properties"])
    assert body["options"]["temperature"] == 0
    assert body["model"] == settings.MEMORY_EXTRACTION_MODEL == record.model
    assert body["messages"][-1] == {"role": "user", "content": record.prompt}
    assert record.prompt.endswith(TEXT)
    assert record.kind == "extract" and record.provider == "ollama" and record.error is None
    assert record.raw_response == '{"facts": [], "entities": []}'
    assert (record.prompt_tokens, record.completion_tokens) == (42, 17)
    assert record.duration_ms > 0


def test_the_ollama_decision_request_uses_the_decision_schema(fake_ollama):
    reply = '{"action": "none", "targetId": 1, "confidence": 0.9, "reason": "same"}'
    fake_ollama.chat_reply(reply)
    record = get_chat_client().decide(FACT, CANDIDATES, {"mem-1": 0.6})
    (body,) = fake_ollama.calls("/api/chat")
    assert body["format"] == prompts.DECISION_SCHEMA
    assert set(body["format"]["properties"]) == {"action", "targetId", "confidence", "reason"}
    assert body["stream"] is False and body["options"]["temperature"] == 0
    assert "[1] ID: mem-1" in body["messages"][-1]["content"]
    assert FACT.content in record.prompt
    assert record.kind == "decide" and record.raw_response == reply
    assert (record.prompt_tokens, record.completion_tokens) == (42, 17)


@pytest.fixture
def openai(fake_ollama, settings):
    settings.OPENAI_BASE_URL = fake_ollama.url + "/v1"
    settings.OPENAI_API_KEY = "sk-test"
    settings.MEMORY_LLM_PROVIDER = "openai"
    return fake_ollama


def test_the_openai_provider_posts_chat_completions_with_a_json_schema(openai, settings):
    client = get_chat_client()
    assert isinstance(client, OpenAIChat)
    record = client.extract(TEXT)
    assert openai.calls("/api/chat") == []
    (body,) = openai.calls("/v1/chat/completions")
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["schema"] == prompts.EXTRACTION_SCHEMA
    assert body["temperature"] == 0
    assert body["model"] == settings.MEMORY_EXTRACTION_MODEL
    assert record.provider == "openai" and record.kind == "extract"
    facts, _, warnings = parsing.parse_extraction(record.raw_response)
    assert [f.content for f in facts] == [TEXT] and warnings == []
    assert record.prompt_tokens and record.completion_tokens  # from `usage`

    client.decide(FACT, CANDIDATES, {})
    body = openai.calls("/v1/chat/completions")[-1]
    assert body["response_format"]["json_schema"]["schema"] == prompts.DECISION_SCHEMA


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


OLLAMA_FAILURES = {
    "404": Script({"error": "model 'qwen3:4b' not found"}, 404),
    "500": Script({"error": "out of memory"}, 500),
    "empty body": Script(b"", 200),
    "invalid JSON": Script("<html>bad gateway</html>", 200),
    "JSON that is not an object": Script("[1, 2, 3]", 200),
    "missing message content": Script({"model": "qwen3:4b", "done": True}, 200),
    "content not a string": Script({"message": {"role": "assistant", "content": 7}}, 200),
    "empty content": Script({"message": {"role": "assistant", "content": ""}, "done": True}),
    "blank content": Script({"message": {"role": "assistant", "content": " \n "}, "done": True}),
    "connection dropped": Script(close=True),
    "timeout": Script({"message": {"content": "{}"}}, delay=0.6),
}


@pytest.mark.parametrize("kind", ["extract", "decide"])
@pytest.mark.parametrize("failure", list(OLLAMA_FAILURES))
def test_every_ollama_failure_is_a_provider_error_carrying_the_failed_call(
    fake_ollama, settings, failure, kind
):
    settings.MEMORY_LLM_TIMEOUT_SECONDS = 0.3
    fake_ollama.script("/api/chat", OLLAMA_FAILURES[failure])
    client = get_chat_client()
    with pytest.raises(ProviderError) as caught:
        if kind == "extract":
            client.extract(TEXT)
        else:
            client.decide(FACT, CANDIDATES, {})
    call = caught.value.call
    assert call.kind == kind and call.provider == "ollama"
    assert call.error and call.error == str(caught.value)
    assert call.prompt and call.raw_response == ""
    assert call.duration_ms > 0


def test_a_refused_connection_is_a_provider_error_carrying_the_failed_call(settings):
    settings.MEMORY_LLM_PROVIDER = "ollama"
    settings.OLLAMA_URL = f"http://127.0.0.1:{_closed_port()}"
    with pytest.raises(ProviderError, match="unreachable") as caught:
        get_chat_client().extract(TEXT)
    assert caught.value.call.error and caught.value.call.kind == "extract"


def test_the_timeout_error_names_the_timeout(fake_ollama, settings):
    settings.MEMORY_LLM_TIMEOUT_SECONDS = 0.3
    fake_ollama.script("/api/chat", Script({"message": {"content": "{}"}}, delay=0.6))
    with pytest.raises(ProviderError, match="timed out") as caught:
        get_chat_client().extract(TEXT)
    assert "timed out" in caught.value.call.error


OPENAI_FAILURES = {
    "500": Script({"error": {"message": "boom"}}, 500),
    "no choices": Script({"choices": []}),
    "no message": Script({"choices": [{"index": 0}]}),
    "null content": Script({"choices": [{"message": {"role": "assistant", "content": None}}]}),
    "empty content": Script({"choices": [{"message": {"role": "assistant", "content": ""}}]}),
    "invalid JSON": Script("not json"),
}


@pytest.mark.parametrize("failure", list(OPENAI_FAILURES))
def test_every_openai_failure_is_a_provider_error_carrying_the_failed_call(openai, failure):
    openai.script("/v1/chat/completions", OPENAI_FAILURES[failure])
    with pytest.raises(ProviderError) as caught:
        get_chat_client().extract(TEXT)
    assert caught.value.call.provider == "openai" and caught.value.call.error


def test_a_schema_ignoring_reply_is_returned_as_is_for_the_tolerant_parser(fake_ollama):
    reply = '<think>hmm</think>\n```json\n{"facts": [{"content": "Priya prefers squash merges", "type": "preference", "confidence": 0.9},], "entities": []}\n```'
    fake_ollama.chat_reply(reply)
    record = get_chat_client().extract(TEXT)
    assert record.raw_response == reply and record.error is None
    facts, _, _ = parsing.parse_extraction(record.raw_response)
    assert [f.content for f in facts] == ["Priya prefers squash merges"]
    assert json.loads(json.dumps(record.as_dict()))["kind"] == "extract"


@pytest.mark.parametrize(
    ("url", "shown", "hook"),
    [
        (
            "http://hookuser:hookpass@127.0.0.1:8659/services/T0?token=Q1",
            "http://127.0.0.1:8659/services/T0?…",
            "http://127.0.0.1:8659/…?…",
        ),
        ("u:pw@127.0.0.1:11434/api/chat", "127.0.0.1:11434/api/chat", "127.0.0.1:11434/…"),
        ("http://[::1]:8080/api/chat", "http://[::1]:8080/api/chat", "http://[::1]:8080/…"),
        ("http://u:1234/pw@h/x", "http URL (not shown", "http URL (not shown"),
        # A "#" or "?" in the password cut the host short: "http://u:S3cr" was shown.
        ("http://u:S3cr#etPw@127.0.0.1:11434", "http URL (not shown", "http URL (not shown"),
        ("http://u:S3cr?etPw@127.0.0.1:11434/x", "http URL (not shown", "http URL (not shown"),
        # An "@" in the password too: "ss/word@127.0.0.1:9" was shown (a second review).
        ("http://u:S3@cr/word@127.0.0.1:9", "http URL (not shown", "http URL (not shown"),
        ("http://u:S3@cr#word@127.0.0.1:9", "http URL (not shown", "http URL (not shown"),
        ("http://u:1234?S3cr@127.0.0.1:9/x", "http URL (not shown", "http URL (not shown"),
    ],
)
def test_a_url_in_an_error_text_shows_no_user_password_or_token(url, shown, hook):
    """Error texts are logged and shown to viewers (a QA pass read a hook's password there)."""
    from pipeline.llm.transport import shown_url

    assert shown_url(url).startswith(shown) and shown_url(url, path=False).startswith(hook)
    for secret in ("hookpass", "pw@", "Q1", "u:", "S3cr"):
        assert secret not in shown_url(url) + shown_url(url, path=False)


def test_a_url_no_request_can_be_made_of_is_a_provider_error_quoting_no_part_of_it(settings):
    """Found by a QA pass: an unencoded "#" in a password made the parser read a port from it,
    and its message ("Invalid port: 'S3cr'") reached the health probe's log and the digest; a
    password with an "@" sent the request to a piece of itself as its host."""
    for url in (
        "http://ollama:S3cr#etPw@127.0.0.1:11434/api/chat",
        "http://ollama:pa@S3cr/word@127.0.0.1:11434/api/chat",  # would go to host "S3cr"
        "http://ollama:1234?S3cr@127.0.0.1:11434/api/chat",  # would go to host "ollama"
    ):
        _refused_quoting_nothing(url)


def _refused_quoting_nothing(url):
    from pipeline.llm.transport import ProviderError, post_json, post_notice, reachable

    for call in (
        lambda: post_json(url, {}, timeout=1),
        lambda: post_notice(url, {}, timeout=1),
    ):
        with pytest.raises(ProviderError) as refused:
            call()
        assert "not a valid URL" in str(refused.value) and "S3cr" not in str(refused.value)
    assert reachable(url) is False
