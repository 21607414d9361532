"""The pipeline's transactions, one module per concern: the only pipeline modules that open one.

jobs (claim, fail, retry, sweep marks, purge), record (the job's one write and its gates), review
(reviewer decisions, suppression, revert, triples), config (a config change and its log), replay
(a second opinion's run row). Store rows (memories, history, cold, embeddings, entities) are
written through memory.writes.
"""
