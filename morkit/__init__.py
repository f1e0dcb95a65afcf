"""morkit: reward-model ensembles and per-query routing for test-time scaling."""

__version__ = "0.1.0"
