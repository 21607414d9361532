"""Decision calls side by side (issue 24, item 2): the transport's event loop sends a job's
decision calls at once, never more than MEMORY_LLM_PARALLEL of this process at a time, each
logged with its own reply and duration; timeouts, failures, dropped connections, proxies and
the transaction guard behave as for a call on its own."""

import asyncio
import threading
import time

import pytest
from django.db import transaction

from memory.guard import ModelCallInTransaction
from pipeline import decision, tasks
from pipeline.llm import ProviderError, get_chat_client, transport
from pipeline.llm.transport import Post, post_json_each
from pipeline.models import LlmCall, Proposal
from pipeline.parsing import Candidate, Fact
from tests.fake_ollama import FakeOllama, Script
from tests.pipeline_support import ScriptedModel, raw, seed

pytestmark = pytest.mark.django_db

NAMES = ["Priya", "Kenji", "Lena", "Mara", "Omar", "Sana", "Ivo", "Yuki", "Aiko", "Bruno"]
CANDIDATES = [Candidate(1, "mem-1", "Priya likes merge commits", "preference")]


class InFlight:
    """Counts the decision calls the fake server is answering at the same moment, and when the
    server took up and let go of each (by the fact's text, in perf_counter seconds)."""

    def __init__(self, hold: float = 0.0, barrier: threading.Barrier | None = None):
        self.lock = threading.Lock()
        self.now = self.most = self.calls = 0
        self.hold, self.barrier = hold, barrier
        self.spans: dict[str, tuple[float, float]] = {}

    def __call__(self, content: str, prompt: str) -> None:
        arrived = time.perf_counter()
        with self.lock:
            self.now += 1
            self.calls += 1
            self.most = max(self.most, self.now)
        try:
            if self.barrier is not None:
                self.barrier.wait()
            time.sleep(self.hold)
        finally:
            with self.lock:
                self.now -= 1
                self.spans[content] = (arrived, time.perf_counter())


def job_of(fake_ollama, count: int, in_flight: InFlight):
    """A raw memory whose `count` facts each have a candidate (so each gets a decision call)."""
    for name in NAMES[:count]:
        seed(f"{name} shares notes on Mondays")
    facts = [f"{name} shares notes every week" for name in NAMES[:count]]
    ScriptedModel(fake_ollama, facts=facts, on_decide=in_flight)
    return raw("Weekly notes: who shares notes with whom, and when.").job


def test_ten_decision_calls_are_all_on_the_wire_at_once(fake_ollama, settings):
    settings.MEMORY_LLM_PARALLEL = 10
    # Every reply waits until all ten calls reached the server: one at a time (or four), the
    # barrier would break after its timeout and the job would fail.
    in_flight = InFlight(barrier=threading.Barrier(10, timeout=5))
    job = job_of(fake_ollama, 10, in_flight)
    assert tasks.run_job(job.id) == "completed"
    assert in_flight.most == 10 and not in_flight.barrier.broken
    decides = LlmCall.objects.filter(job=job, kind="decide")
    assert sorted(decides.values_list("fact_index", flat=True)) == list(range(10))
    assert all(call.error is None and call.raw_response for call in decides)
    assert Proposal.objects.filter(job=job).count() == 10


def test_never_more_calls_at_once_than_memory_llm_parallel(fake_ollama, settings):
    settings.MEMORY_LLM_PARALLEL = 3
    in_flight = InFlight(hold=0.1)  # each reply takes a while: more would pile up if allowed
    job = job_of(fake_ollama, 8, in_flight)
    assert tasks.run_job(job.id) == "completed"
    assert in_flight.calls == 8 and in_flight.most == 3
    durations = dict(
        LlmCall.objects.filter(job=job, kind="decide").values_list("fact_index", "duration_ms")
    )
    assert len(durations) == 8 and all(ms >= 90 for ms in durations.values()), durations
    # A call's duration starts when it may go, not while it waited for its turn. The last round
    # of 8 calls in rounds of 3 is answered after three of the server's holds: counted with its
    # wait, a call of it takes all of that span (more: it began before the first call reached the
    # server); counted from its turn, about a third. Measured against the server's own clock, not
    # a fixed bound, so a loaded machine's slower replies do not fail it.
    facts = [f"{name} shares notes every week" for name in NAMES[:8]]
    first = min(arrived for arrived, _ in in_flight.spans.values())
    last_round = sorted(facts, key=lambda fact: in_flight.spans[fact][0])[-2:]
    for fact in last_round:
        since_first_ms = (in_flight.spans[fact][1] - first) * 1000
        assert durations[facts.index(fact)] < 0.8 * since_first_ms, (durations, since_first_ms)


def test_the_limit_is_per_process_across_jobs_running_at_once(fake_ollama):
    in_flight = InFlight(hold=0.1)
    ScriptedModel(fake_ollama, on_decide=in_flight)
    client = get_chat_client()
    asks = [
        (i, Fact(f"{name} shares notes", "fact", 0.9), CANDIDATES)
        for i, name in enumerate(NAMES[:4])
    ]
    answered = []

    def one_job():
        answered.extend(call for _, call in client.decide_each(asks, parallel=2))

    threads = [threading.Thread(target=one_job) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert len(answered) == 8 and in_flight.most == 2


def test_a_decision_that_outlives_its_timeout_fails_the_job_with_its_call_logged(
    fake_ollama, settings
):
    settings.MEMORY_LLM_PARALLEL = 4
    settings.MEMORY_LLM_TIMEOUT_SECONDS = 0.3
    slow = {"Kenji shares notes every week"}

    def hang(content, prompt):
        if content in slow:
            time.sleep(1.0)

    seed("Priya and Kenji and Lena share notes")
    ScriptedModel(
        fake_ollama,
        facts=[f"{name} shares notes every week" for name in ("Priya", "Kenji", "Lena")],
        on_decide=hang,
    )
    job = raw("Weekly notes about who shares notes.").job
    assert tasks.run_job(job.id) == "pending"  # retried later, as any failed call
    failed = LlmCall.objects.get(job=job, kind="decide", error__isnull=False)
    assert "timed out after 0.3s" in failed.error and failed.fact_index == 1
    assert 250 <= failed.duration_ms < 900
    assert not Proposal.objects.filter(job=job).exists()


SIDE_BY_SIDE_FAILURES = {
    "500": (Script({"error": "out of memory"}, 500), "answered 500"),
    "empty body": (Script(b"", 200), "empty body"),
    "invalid JSON": (Script("<html>bad gateway</html>", 200), "invalid JSON"),
    "not an object": (Script("[1, 2, 3]", 200), "not an object"),
    "no message": (Script({"model": "qwen3:4b", "done": True}), "no message content"),
    "blank reply": (Script({"message": {"role": "assistant", "content": " "}}), "empty reply"),
    "connection dropped": (Script(close=True), "unreachable"),
}


@pytest.mark.parametrize("failure", list(SIDE_BY_SIDE_FAILURES))
def test_every_failure_side_by_side_is_a_provider_error_carrying_its_call(fake_ollama, failure):
    script, message = SIDE_BY_SIDE_FAILURES[failure]
    fake_ollama.script("/api/chat", script)
    asks = [(0, Fact("Priya prefers squash merges", "fact", 0.9), CANDIDATES)]
    with pytest.raises(ProviderError, match=message) as caught:
        list(get_chat_client().decide_each(asks, parallel=4))
    call = caught.value.call
    assert call.kind == "decide" and call.provider == "ollama"
    assert call.error == str(caught.value) and call.prompt and call.raw_response == ""


def test_the_openai_provider_side_by_side_sends_its_key_and_reads_its_replies(
    fake_ollama, settings
):
    settings.OPENAI_BASE_URL = fake_ollama.url + "/v1"
    settings.OPENAI_API_KEY = "sk-test"
    client = get_chat_client("openai")
    asks = [(i, Fact(f"{NAMES[i]} shares notes", "fact", 0.9), CANDIDATES) for i in (2, 5, 7)]
    calls = dict(client.decide_each(asks, parallel=3))
    assert sorted(calls) == [2, 5, 7]
    assert all(call.fact_index == index for index, call in calls.items())
    assert all(c.provider == "openai" and '"action"' in c.raw_response for c in calls.values())
    assert all(c.prompt_tokens and c.completion_tokens for c in calls.values())
    assert len(fake_ollama.calls("/v1/chat/completions")) == 3
    assert fake_ollama.headers[-1]["Authorization"] == "Bearer sk-test"


def test_a_kept_alive_connection_the_server_closed_is_not_reused(settings):
    # A server that keeps connections open (HTTP/1.1, as Ollama does) and closes idle ones
    # after 0.1 s: the second round finds the first round's connections closed.
    server = FakeOllama(settings.MEMORY_EMBEDDING_DIMENSIONS, keep_alive=0.1).start()
    try:
        posts = [Post(server.url + "/api/tags", {}, 2.0) for _ in range(3)]
        first = list(post_json_each(posts, parallel=3))
        time.sleep(0.4)
        second = list(post_json_each(posts, parallel=3))
    finally:
        server.stop()
    for answers in (first, second):
        assert sorted(position for position, _, _ in answers) == [0, 1, 2]
        assert all(isinstance(body, dict) and "models" in body for _, body, _ in answers)


def test_a_url_behind_a_proxy_goes_through_the_proxy(fake_ollama, monkeypatch):
    proxy = FakeOllama().start()  # answers 404 to what it does not know: the proxied URL
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    monkeypatch.setenv("NO_PROXY", "")
    monkeypatch.setattr(transport, "_shared", {})  # a new sync client reads the proxy settings
    try:
        ((_, answer, _),) = post_json_each(
            [Post(fake_ollama.url + "/api/tags", {}, 2.0)], parallel=2
        )
    finally:
        proxy.stop()
    assert isinstance(answer, ProviderError) and "answered 404" in str(answer)
    assert [path for path, _ in proxy.requests] == [fake_ollama.url + "/api/tags"]
    assert fake_ollama.requests == []


def _answers_within(seconds: float, posts: list[Post], **kwargs) -> dict:
    """post_json_each's answers ("answers") or what it raised ("raised"), read in a thread: a
    caller left waiting fails the test after `seconds` instead of hanging the suite."""
    outcome: dict = {}

    def read() -> None:
        try:
            outcome["answers"] = list(post_json_each(posts, **kwargs))
        except BaseException as exc:  # noqa: BLE001 - the test looks at it
            outcome["raised"] = exc

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(seconds)
    assert not reader.is_alive(), f"the caller was still waiting after {seconds} s"
    return outcome


def test_an_error_raised_inside_one_call_reaches_the_caller(fake_ollama, monkeypatch):
    def broken(url, status, content, **kwargs):
        raise RuntimeError(f"a defect reading {url}")

    monkeypatch.setattr(transport, "_decoded", broken)
    posts = [Post(fake_ollama.url + "/api/tags", {}, 5.0) for _ in range(3)]
    raised = _answers_within(10, posts, parallel=3).get("raised")
    assert isinstance(raised, RuntimeError) and "a defect reading" in str(raised)


def test_a_malformed_model_url_is_an_error_at_once_not_a_wait():
    raised = _answers_within(10, [Post("http://[::1/api/chat", {}, 2.0)], parallel=2).get("raised")
    assert isinstance(raised, ValueError)


def test_whatever_ends_the_calls_outside_any_one_of_them_reaches_the_caller(
    fake_ollama, monkeypatch
):
    class Escaped(BaseException):
        """Not an Exception: no single call catches it, so it ends the whole batch."""

    def escaping(url):
        raise Escaped(url)

    monkeypatch.setattr(transport, "_proxied", escaping)
    posts = [Post(fake_ollama.url + "/api/tags", {}, 5.0) for _ in range(2)]
    assert isinstance(_answers_within(10, posts, parallel=2).get("raised"), Escaped)


def _batch_tasks(shared) -> list[str]:
    """The tasks of calls side by side that the loop still holds."""

    async def listing() -> list[str]:
        return [task.get_coro().__qualname__ for task in asyncio.all_tasks()]

    names = asyncio.run_coroutine_threadsafe(listing(), shared.loop).result(5)
    return [name for name in names if "post_all" in name]


def test_closing_the_answers_early_cancels_the_calls_not_answered(fake_ollama):
    fake_ollama.script("/api/ps", Script({"models": []}, delay=3.0))
    posts = [
        Post(fake_ollama.url + "/api/tags", {}, 10.0),
        Post(fake_ollama.url + "/api/ps", {}, 10.0),  # takes 3 s: unanswered when closed
        Post(fake_ollama.url + "/api/version", {}, 10.0),  # waits for its turn behind it
    ]
    answers = post_json_each(posts, parallel=1, lane="test-cancel")
    position, first, _ = next(answers)
    assert position == 0 and isinstance(first, dict)
    answers.close()
    shared = transport._loop()
    deadline = time.monotonic() + 2.0  # well before the second call could have been answered
    while _batch_tasks(shared) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _batch_tasks(shared) == []  # cancelled, not run to their end
    assert "/api/version" not in [path for path, _ in fake_ollama.requests]


def test_side_by_side_calls_refuse_to_start_inside_a_transaction(fake_ollama):
    facts = [Fact(f"{name} shares notes", "fact", 0.9) for name in NAMES[:3]]
    candidates = [[decision.ScoredCandidate(CANDIDATES[0], 1, 0.5, 0.5, 0.5, False)]] * 3
    with transaction.atomic():
        with pytest.raises(ModelCallInTransaction):
            list(decision.decide_all(get_chat_client(), facts, candidates, parallel=3))
        with pytest.raises(ModelCallInTransaction):
            list(post_json_each([Post(fake_ollama.url + "/api/tags", {}, 1.0)], parallel=2))
    assert fake_ollama.requests == []


# The stopped loop's thread ends with SystemExit, and its unfinished post is dropped with it.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_caller_whose_model_call_loop_stopped_gets_an_error_and_the_old_loop_is_closed(
    settings, monkeypatch
):
    monkeypatch.setattr(transport, "LOOP_CHECK_SECONDS", 0.05, raising=False)
    # A server that keeps connections open (as Ollama does): the first call leaves one idle.
    fake_ollama = FakeOllama(settings.MEMORY_EMBEDDING_DIMENSIONS, keep_alive=30).start()
    try:
        _stop_a_loop_while_a_caller_waits(fake_ollama, monkeypatch)
    finally:
        fake_ollama.stop()


def _stop_a_loop_while_a_caller_waits(fake_ollama, monkeypatch) -> None:
    ((_, kept_alive_call, _),) = post_json_each(
        [Post(fake_ollama.url + "/api/tags", {}, 10)], parallel=1
    )
    assert isinstance(kept_alive_call, dict)
    fake_ollama.script("/api/tags", Script({"models": []}, delay=3.0))
    shared = transport._loop()
    kept_alive = [c for idle in shared.idle.values() for c in idle]
    assert kept_alive  # this call's connection at least (earlier tests' may be there too)

    def stop_the_loop():
        raise SystemExit  # as any callback raising it would: run_forever ends, and its thread

    outcome: list = []

    def call():
        try:
            outcome.append(
                list(post_json_each([Post(fake_ollama.url + "/api/tags", {}, 10)], parallel=1))
            )
        except ProviderError as exc:
            outcome.append(exc)

    caller = threading.Thread(target=call, daemon=True)
    caller.start()
    deadline = time.monotonic() + 5
    while len(fake_ollama.requests) < 2 and time.monotonic() < deadline:  # the post is out
        time.sleep(0.01)
    shared.loop.call_soon_threadsafe(stop_the_loop)
    caller.join(2.0)  # well before the server's answer (3 s), and the post's timeout (10 s)
    assert outcome, "the caller was still waiting on a loop that had stopped"
    assert isinstance(outcome[0], ProviderError) and "event loop stopped" in str(outcome[0])
    assert not shared.thread.is_alive()

    ((_, answer, _),) = post_json_each([Post(fake_ollama.url + "/api/tags", {}, 10)], parallel=1)
    assert isinstance(answer, dict) and "models" in answer  # a new loop serves the next call
    assert transport._loop() is not shared
    # The stopped loop was let go of: its dropped post cancelled, its kept-alive connection and
    # its selector closed (before, they stayed open until the process ended).
    deadline = time.monotonic() + 5
    while not shared.loop.is_closed() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert shared.loop.is_closed()
    assert shared.idle == {}
    sockets = [c.writer.transport.get_extra_info("socket") for c in kept_alive]
    while any(s.fileno() != -1 for s in sockets) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert all(c.writer.transport.is_closing() for c in kept_alive)
    assert [s.fileno() for s in sockets] == [-1] * len(sockets)
    # A caller that read the loop just before its thread stopped posts after it was closed: a
    # ProviderError (the job is retried), not asyncio's RuntimeError.
    monkeypatch.setattr(transport, "_loop", lambda: shared)
    with pytest.raises(ProviderError, match="event loop stopped before sending"):
        list(post_json_each([Post(fake_ollama.url + "/api/tags", {}, 10)], parallel=1))
