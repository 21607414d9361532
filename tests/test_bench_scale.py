"""The growth run's parts that need no run (issue 24, item 4): its embedder gives the offline
embedder's vectors bit for bit, and sizes read as 10k or 1M."""

import argparse

import numpy as np
import pytest

from devtools.bench import Corpus
from devtools.bench_scale import FastEmbedder, vector_recall
from devtools.management.commands.bench import parse_sizes
from pipeline.llm.offline import OfflineEmbedder


def test_the_fast_embedder_gives_the_offline_embedders_vectors_bit_for_bit():
    corpus = Corpus()
    texts = [text for _, text in corpus.store(300)] + corpus.held_out(50)
    texts += ["", "!!!", "Ünïcödé café naïve", "word word word word", "a b", "x"]
    fast = FastEmbedder(768)
    got = fast.embed_many(texts)
    again = fast.embed_many(texts[::-1])[::-1]  # remembered features give the same sums
    reference = OfflineEmbedder(768)
    for text, vector, repeated in zip(texts, got, again, strict=True):
        expected = reference.embed_one(text)
        assert vector.dtype == np.float32 and np.array_equal(vector, expected), text
        assert np.array_equal(repeated, expected)


def test_sizes_read_as_counts_with_k_and_m():
    assert parse_sizes("10k,100k,1M") == [10_000, 100_000, 1_000_000]
    assert parse_sizes("2500, 1.5k,100_000,") == [2500, 1500, 100_000]
    for wrong in ("ten", "40", "1x", ""):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_sizes(wrong)


def test_recall_counts_a_found_neighbour_that_ties_the_kth_as_exact():
    kth = np.array([0.9, 0.5])
    found = [[(1, 0.05), (2, 0.1)], [(3, 0.5), (4, 0.6)]]  # similarities 0.95 0.9 | 0.5 0.4
    assert vector_recall(None, found, kth, 2) == 0.75
