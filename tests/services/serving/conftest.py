"""The serving tests' shared data: the packaged math questions and a small pool over them (hash embedder)."""

from __future__ import annotations

import pytest
from fakes.embedder import HashEmbedder

from morkit.question_pool.pool import PoolConfig, build_pool
from morkit.reward_models.options import ScoringOptions


@pytest.fixture(scope="module")
def math_queries(data_dir):
    from morkit.data.datasets import qwen25_math_rm8

    return qwen25_math_rm8(data_dir)


@pytest.fixture(scope="module")
def hash_pool(math_queries):
    """A pool of 24 questions over a table RM and math-consensus (a rule), embedded by the hash stand-in."""
    from morkit.services.scoring import score

    train = score(math_queries[:24], ["math-consensus"], options=ScoringOptions(cache=None))
    return build_pool(train, HashEmbedder(), config=PoolConfig(max_members=2))
