"""The keyword leg's speed invariants (issue 12, reworked in issue 20): every memory holding a
query term is weighed from the terms' posting lists, and only a window of the best-weighed is read
and scored. What a query is about is still found, the window is still filled past forgotten and
other agents' memories, a batch ranks every text as one search each, a batch costs a fixed number
of statements whatever the store's size (on PostgreSQL one candidate statement for every text), and the window the benchmark raises turns the leg into
the exhaustive one. Each test sets a tiny window, so a store of a few dozen memories takes the
paths a store of 100k takes."""

import pytest
from django.db import connection, transaction

from memory import expiry, keyword, writes
from memory.writes import Actor
from tests.conftest import TEST_ENGINE

pytestmark = pytest.mark.django_db

AGENT = Actor("claude-code", "agent")


def remember(text, agent_id="default"):
    return writes.remember(text, actor=AGENT, agent_id=agent_id, create_job=False).memory


@pytest.fixture
def small_budget(monkeypatch):
    monkeypatch.setattr(keyword, "CANDIDATE_WINDOW", 3)


def ids(hits):
    return [memory_id for memory_id, _ in hits]


def test_a_memory_sharing_two_common_words_is_found_among_many_sharing_one(small_budget):
    for i in range(45):
        remember(f"Vera note {i}")
        remember(f"Celery note {i}")
    # Longer than the others, but it holds both words: it is weighed first.
    target = remember("Vera celery workers note")
    assert ids(keyword.search("Vera celery", agent_id="default", limit=3))[0] == target.id


def test_a_rare_word_finds_its_memory_whatever_the_other_words(small_budget):
    for i in range(30):
        remember(f"The billing deploy failed on staging again, attempt {i}")
    target = remember("Somebody mentioned 4821 once, in a long note about lunch and parking")
    hits = keyword.search(
        "billing deploy failed on staging, ticket 4821", agent_id="default", limit=5
    )
    assert target.id in ids(hits)


def test_a_query_whose_two_rarest_words_never_meet_still_fills_its_limit(small_budget):
    alpha = {remember(f"alpha note {i}").id for i in range(15)}
    beta = {remember(f"beta note {i}").id for i in range(15)}
    hits = keyword.search("alpha beta", agent_id="default", limit=5)
    assert len(hits) == 5 and set(ids(hits)) <= alpha | beta
    assert all(0 < score < 1 for _, score in hits)


def test_forgotten_and_other_agents_rows_never_come_back_and_the_limit_is_still_filled(
    small_budget,
):
    for i in range(45):  # oldest first: they fill the first windows in index order
        memory = remember(f"gamma delta note {i}")
        writes.forget(memory.id, actor=Actor("dana"), reason="test")
    for i in range(5):
        remember(f"gamma delta note for ops {i}", agent_id="ops")
    live = {remember(f"gamma delta live note {i}").id for i in range(3)}
    excluded = remember("gamma delta live note excluded")
    hits = keyword.search("gamma delta", agent_id="default", limit=3, exclude_id=excluded.id)
    assert set(ids(hits)) == live


def test_a_batch_ranks_every_text_exactly_as_one_search_each(small_budget):
    for i in range(45):
        remember(f"Vera reviewed note {i}")
        remember(f"Celery queue note {i}")
        memory = remember(f"gamma delta note {i}")
        writes.forget(memory.id, actor=Actor("dana"), reason="test")
    for i in range(4):
        remember(f"gamma delta live note {i}")
    remember("Vera says the celery workers need a careful review")
    remember("Somebody mentioned 4821 once")
    excluded = remember("Vera reviewed the celery note 4821")
    texts = [
        "Vera celery",  # two common words meet once
        "Vera reviewed note 4821",  # a rare word and common ones
        "Celery gamma",  # the two words never meet
        "gamma delta",  # forgotten rows come first by weight: the window widens
        "queue",  # one word
        "zzzq",  # no memory has it
        "",
        'NEAR(vera "celery*',
    ]
    for exclude_id in (None, excluded.id):
        batched = keyword.search_many(texts, agent_id="default", limit=4, exclude_id=exclude_id)
        single = [
            keyword.search(text, agent_id="default", limit=4, exclude_id=exclude_id)
            for text in texts
        ]
        assert batched == single
        assert [len(hits) for hits in batched][:5] == [4, 4, 4, 4, 4]


def test_the_window_the_benchmark_raises_scores_every_matching_memory(monkeypatch):
    for word in ("amber", "birch", "cedar"):
        for i in range(12):
            remember(f"{word} note {i}")
    target = remember("Cedar")  # the best match, holding only the commonest of the three words
    monkeypatch.setattr(keyword, "CANDIDATE_WINDOW", 1)
    shortcut = ids(keyword.search("amber birch cedar", agent_id="default", limit=1))
    monkeypatch.setattr(keyword, "CANDIDATE_WINDOW", 1 << 62)
    exhaustive = ids(keyword.search("amber birch cedar", agent_id="default", limit=5))
    # Weighed by IDF alone the three words tie; the exact score (its length) puts it first.
    assert exhaustive[0] == target.id and len(shortcut) == 1


def test_a_batch_costs_the_same_statements_at_any_store_size(small_budget):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    texts = ["Vera celery", "gamma delta note", "queue 4821"]

    def statements() -> int:
        with CaptureQueriesContext(connection) as captured:
            keyword.search_many(texts, agent_id="default", limit=3)
        return len(captured)

    for i in range(10):
        remember(f"Vera celery gamma delta queue note {i}")
    small = statements()
    for i in range(300):
        remember(f"Vera celery gamma delta queue note {i} again")
    if TEST_ENGINE == "postgres":
        # stats (the planner's row estimate, then a count on a small store), frequencies, then
        # every text's candidates (both MaxScore stages) in one statement
        assert statements() == small == 4
    else:
        # stats, frequencies, the posting lists, then one read of every text's window
        assert statements() == small == 4


def test_a_first_stage_whose_rare_terms_cannot_fill_the_limit_takes_the_next_rarest_too():
    from memory.keyword import postgres

    budget = postgres.RARE_DOCUMENT_BUDGET
    frequencies = {"8685": 1, "fraud": budget, "requests": 20 * budget, "peak": 20 * budget}
    terms = ["8685", "fraud", "requests", "peak"]
    # One match cannot give a floor for ten: without the next term the second stage would weigh
    # every term's matches.
    assert postgres._rarest(terms, frequencies, limit=10) == (2, True)
    # Within the budget and able to fill the limit: the budget alone decides, as before.
    assert postgres._rarest(terms, {**frequencies, "8685": 40}, limit=10) == (1, False)
    assert postgres._rarest(terms, {**frequencies, "fraud": 100}, limit=10) == (2, False)


@pytest.mark.skipif(TEST_ENGINE != "postgres", reason="PostgreSQL's two MaxScore stages")
def test_on_postgresql_the_second_stage_weighs_no_memory_the_first_one_did(monkeypatch):
    from memory.keyword import postgres

    # A tiny budget and window, so a store of a few dozen memories takes both stages.
    monkeypatch.setattr(postgres, "RARE_DOCUMENT_BUDGET", 4)
    monkeypatch.setattr(keyword, "CANDIDATE_WINDOW", 6)
    rare = [remember(f"Quartz ticket {i}") for i in range(6)]
    for i in range(10):
        remember(f"The billing ledger note {i}")
        remember(f"The queue ledger note {i}")
    text = "quartz billing queue ledger"
    with connection.cursor() as cursor:
        stats = postgres._STATS.get(cursor)
        frequencies = postgres.document_frequencies(cursor, keyword.query_terms(text), stats)
        query = postgres._Query.of(keyword.query_terms(text), frequencies, stats)
        plan = postgres._Plan(keyword.query_terms(text), query, frequencies, limit=6, window=6)
        assert plan.terms[: plan.count] == ["quartz"]  # past the budget, but it fills the limit
        ctes, _, params = postgres._plan_sql(
            0,
            plan,
            agent_id="default",
            exclude_id=None,
            where=None,
            window=6,
            unexpired=expiry.unexpired_sql("m.expires_at"),
        )
        cursor.execute(f"WITH {', '.join(ctes)} SELECT b0.id FROM b0", params)
        second = {memory_id for (memory_id,) in cursor.fetchall()}
    # The memories holding billing could outweigh the quartz memories' floor: the second stage
    # runs, on the memories holding no quartz only.
    assert second and not second & {memory.id for memory in rare}
    windowed = keyword.search(text, agent_id="default", limit=6)
    monkeypatch.setattr(keyword, "CANDIDATE_WINDOW", 1 << 62)
    assert windowed == keyword.search(text, agent_id="default", limit=6)
    assert {memory.id for memory in rare} <= set(ids(windowed))


@pytest.mark.skipif(TEST_ENGINE != "postgres", reason="PostgreSQL's two MaxScore stages")
def test_on_postgresql_a_first_stage_taken_past_its_budget_keeps_the_window_of_every_match(
    monkeypatch,
):
    from memory.keyword import postgres

    # The rarest word is in one memory, fewer than the limit: the first stage takes the next
    # word too. The memories holding only the two lightest words are not among the two heaviest,
    # but they are in the window of six, where BM25 ranks one of them among the best two.
    monkeypatch.setattr(postgres, "RARE_DOCUMENT_BUDGET", 4)
    monkeypatch.setattr(keyword, "CANDIDATE_WINDOW", 6)
    remember("Quartz ticket 8685")
    for i in range(2):
        remember(f"fraud alert spike seen in a long report about many other things, number {i}")
    for i in range(3):
        remember(f"fraud case {i}")
    doubled = {remember(f"alert spike alert spike {i}").id for i in range(4)}
    for i in range(2):
        remember(f"alert note {i}")
        remember(f"spike note {i}")
    for i in range(16):
        remember(f"unrelated filler memory {i}")
    text = "8685 fraud alert spike"
    pruned = keyword.search(text, agent_id="default", limit=2)
    monkeypatch.setattr(postgres, "RARE_DOCUMENT_BUDGET", 10**9)  # one stage: every match
    assert pruned == keyword.search(text, agent_id="default", limit=2)
    assert set(ids(pruned)) & doubled  # what a floor at the second row would never read


def _statements_on_this_connection(seen: list[str]):
    def watch(execute, sql, params, many, context):
        seen.append(sql)
        return execute(sql, params, many, context)

    return connection.execute_wrapper(watch)


@pytest.mark.skipif(TEST_ENGINE != "postgres", reason="other connections: PostgreSQL only")
@pytest.mark.django_db(transaction=True)
def test_on_postgresql_a_jobs_keyword_leg_runs_in_halves_on_two_connections_beside_the_callers(
    monkeypatch,
):
    from memory.keyword import postgres
    from memory.search import keyword_leg

    for n in range(6):
        remember(f"The billing service note {n} mentions Postgres.")
    texts = ["billing Postgres", "service note", "Postgres note", "billing"]
    seen, backends = [], []
    candidates = postgres._candidates_many

    def on_backend(cursor, plans, **options):
        backends.append((connection.connection.info.backend_pid, len(plans)))
        return candidates(cursor, plans, **options)

    monkeypatch.setattr(postgres, "_candidates_many", on_backend)
    with _statements_on_this_connection(seen):
        soon = keyword_leg(texts, k=5, soon=True)
        hits = [list(found) for found in soon]
        caller = connection.connection.info.backend_pid
    assert not any("search_vector" in sql for sql in seen)  # not on the caller's connection
    # two texts on each of two other server backends, side by side
    assert sorted(count for _, count in backends) == [2, 2]
    assert len({pid for pid, _ in backends} | {caller}) == 3
    assert hits == keyword_leg(texts, k=5) and all(hits)
    with transaction.atomic(), _statements_on_this_connection(seen):
        # inside a transaction another connection would not see its writes: run here
        assert [list(found) for found in keyword_leg(texts, k=5, soon=True)] == hits
    assert any("search_vector" in sql for sql in seen)


@pytest.mark.skipif(TEST_ENGINE == "postgres", reason="SQLite's window of rows")
def test_an_excluded_memory_among_the_best_costs_the_window_only_the_rows_it_lacks(monkeypatch):
    """A job's own raw memory is among each fact's best-weighed memories and is excluded: the
    window reads one row more at once, not a second slice for the place it takes, nor eight
    windows more (issue 24)."""
    from memory.keyword import sqlite

    monkeypatch.setattr(keyword, "CANDIDATE_WINDOW", 10)
    source = remember("Vera celery gamma delta queue note, the whole raw memory")
    for i in range(120):
        remember(f"Vera celery note {i}")
    read = []
    original = sqlite._Rows.read

    def counted(self, rowids):
        read.append(len(rowids))
        return original(self, rowids)

    monkeypatch.setattr(sqlite._Rows, "read", counted)
    hits = keyword.search_many(
        ["Vera celery gamma"], agent_id="default", limit=10, exclude_id=source.id
    )
    assert len(hits[0]) == 10 and source.id not in ids(hits[0])
    assert read == [11]  # one read: the window and the one place the excluded memory takes


@pytest.mark.skipif(TEST_ENGINE == "postgres", reason="SQLite's window of rows")
def test_a_window_few_of_whose_rows_are_visible_widens_geometrically_and_misses_none():
    """An agent holding 5 of 40,000 matching memories: the window reads the order in slices that
    grow by four times or more, not 80 rows per missing place (25 rounds, each sorting the order
    again), and still finds every visible memory in order."""
    import numpy as np

    from memory.keyword.bm25 import _Query, _Stats
    from memory.keyword.sqlite import _ByWeight, _visible

    rowids = np.arange(1, 40_001, dtype=np.int32)
    order = _ByWeight(_Query({"cat": 1.0}, _Stats(40_000, 5.0)), ["cat"], {"cat": rowids})
    mine = {7, 9_000, 21_000, 33_333, 39_999}

    class Rows:
        rounds = 0

        def read(self, wanted):
            self.rounds += 1

        def visible(self, rowid):
            return rowid in mine

    rows = Rows()
    found = _visible(rows, [order], window=10)
    assert found == [sorted(mine)]
    assert rows.rounds <= 8, rows.rounds


def _order_by_walking_every_posting(weights: dict[str, float], lists: dict[str, list[int]]):
    """The order _ByWeight must give, the slow way: each memory's weight summed posting by
    posting in the terms' order, then sorted by weight (best first) and rowid."""
    sums: dict[int, float] = {}
    for term, rowids in lists.items():
        for rowid in rowids:
            sums[rowid] = sums.get(rowid, 0.0) + weights[term]
    return sorted(sums, key=lambda rowid: (-sums[rowid], rowid))


@pytest.mark.skipif(TEST_ENGINE == "postgres", reason="SQLite's weighing of posting lists")
@pytest.mark.parametrize("terms", [1, 3, 8, 9, 16, 17, 24])
def test_the_order_by_weight_equals_a_walk_of_every_posting_ties_included(terms):
    import numpy as np

    from memory.keyword.bm25 import _Query, _Stats
    from memory.keyword.sqlite import _ByWeight

    rng = np.random.default_rng(terms)
    for _ in range(5):
        # Close weights, some equal (terms of one document frequency), lists of very unequal
        # length over a store with gaps: many memories tie on every weight.
        names = [f"term{i}" for i in range(terms)]
        weights = {name: float(rng.choice([2.2, 2.7, 3.1, 3.1, 4.9])) for name in names}
        lists = {
            name: np.sort(rng.choice(5000, int(rng.integers(0, 1500)), replace=False)).astype(
                np.int32
            )
            for name in names
        }
        expected = _order_by_walking_every_posting(weights, {n: list(v) for n, v in lists.items()})
        order = _ByWeight(_Query(weights, _Stats(5000, 5.0)), names, lists)
        assert len(order) == len(expected)
        # Read in growing slices, as the window reads it, then whole.
        for n in (1, 7, 100, 101, 1000, len(expected) // 2, len(expected), len(expected) + 5):
            assert list(order.first(n)) == expected[:n]


@pytest.mark.skipif(TEST_ENGINE == "postgres", reason="SQLite's weighing of posting lists")
@pytest.mark.parametrize("terms", [2, 3, 8, 9, 16, 17, 24])
def test_weighing_only_the_heaviest_terms_memories_gives_the_same_first_rowids(terms):
    """On a big store the weighing starts from the heaviest (rarest) terms' memories and proves
    that no other memory can be among the first n: those n equal a walk of every posting, ties
    included, whether the other terms are looked up in bitsets or in their lists; reading past n
    proves more the same way (or weighs every posting), and so does asking whether more match."""
    import numpy as np

    from memory.keyword.bm25 import _Query, _Stats
    from memory.keyword.sqlite import _ByWeight
    from memory.keyword.sqlite_postings import Postings, _bitset

    rng = np.random.default_rng(100 + terms)
    pruned = 0
    for case in range(12):
        names = [f"term{i}" for i in range(terms)]
        # A few rare, heavy terms among common ones of close weights, some weights equal.
        weights = {
            name: float(rng.choice([2.2, 2.7, 3.1, 3.1, 4.9] if i else [4.9, 7.5, 9.0]))
            for i, name in enumerate(names)
        }
        lists = {
            name: np.sort(
                rng.choice(5000, int(rng.integers(1, 60 if weights[name] > 4 else 2500)), False)
            ).astype(np.int32)
            for name in names
        }
        expected = _order_by_walking_every_posting(weights, {n: list(v) for n, v in lists.items()})
        bits = {
            name: _bitset(ids, 700)
            for name, ids in lists.items()
            if case % 3 and rng.random() < 0.7
        }
        postings = Postings(lists, bits)
        query = _Query(weights, _Stats(5000, 5.0))
        for n in (1, 7, 40, 101):
            order = _ByWeight(query, names, postings, enough=n)
            pruned += order.enough is not None
            assert list(order.first(n)) == expected[:n], (case, n)
            assert list(order.first(n + 50)) == expected[: n + 50]
            assert len(order) == len(expected)
            for read in (n, len(expected) - 1, len(expected)):
                order = _ByWeight(query, names, postings, enough=n)
                assert order.has_more_than(read) == (read < len(expected))
    assert pruned, "the weighing took the heaviest terms' path"


@pytest.mark.skipif(TEST_ENGINE == "postgres", reason="SQLite's weighing of posting lists")
def test_reading_past_the_proven_rowids_proves_more_without_weighing_every_posting():
    """A window widened past memories the agent does not see reads further: the rare term's
    memories still prove the longer slice, and the common terms' postings are still not read."""
    import numpy as np

    from memory.keyword import sqlite
    from memory.keyword.bm25 import _Query, _Stats
    from memory.keyword.sqlite_postings import Postings

    rng = np.random.default_rng(5)
    lists = {"rare": np.sort(rng.choice(20000, 300, replace=False)).astype(np.int32)}
    for name in ("alpha", "beta", "gamma"):
        lists[name] = np.sort(rng.choice(20000, 6000, replace=False)).astype(np.int32)
    weights = {"rare": 9.0, "alpha": 2.2, "beta": 2.2, "gamma": 2.2}
    expected = _order_by_walking_every_posting(weights, {n: list(v) for n, v in lists.items()})
    order = sqlite._ByWeight(_Query(weights, _Stats(20000, 5.0)), list(lists), Postings(lists), 7)
    assert order.enough == 7 and len(order.held) == 300
    assert list(order.first(57)) == expected[:57] and order.enough == 57
    assert order.has_more_than(299) and order.enough == 57
    assert list(order.first(301)) == expected[:301]  # the rare term's 300 and one more
    assert len(order) == len(expected) and order.enough is None


@pytest.mark.skipif(TEST_ENGINE == "postgres", reason="SQLite's weighing of posting lists")
def test_a_batch_weighed_on_two_threads_ranks_as_one_thread_does(small_budget, monkeypatch):
    from memory.keyword import sqlite

    for i in range(40):
        remember(f"Vera moved the billing deploy to staging, note {i}")
        remember(f"Celery workers on staging restart at {i} past, says Omar")
    texts = ["billing deploy staging", "celery workers restart", "Vera Omar note", "nothing here"]
    monkeypatch.setattr(sqlite, "PARALLEL_POSTINGS", 10**12)
    alone = keyword.search_many(texts, agent_id="default", limit=5)
    used = []
    pool = sqlite.process_pool
    monkeypatch.setattr(sqlite, "process_pool", lambda *a: used.append(a) or pool(*a))
    monkeypatch.setattr(sqlite, "PARALLEL_POSTINGS", 0)
    assert keyword.search_many(texts, agent_id="default", limit=5) == alone
    assert used and all(len(hits) for hits in alone[:3])
