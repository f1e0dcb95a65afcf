"""A deterministic stand-in question embedder, so pool arithmetic runs without loading MiniLM."""

from __future__ import annotations


class HashEmbedder:
    """A deterministic stand-in embedder for pool arithmetic tests: unit vectors seeded by the text."""

    name = "hash-embedder"
    dim = 16

    def encode(self, texts, *, batch_size=64, progress=False):
        import hashlib

        import numpy as np

        rows = []
        for text in texts:
            seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
            v = np.random.default_rng(seed).standard_normal(self.dim)
            rows.append(v / np.linalg.norm(v))
        return np.asarray(rows, dtype=np.float32).reshape(len(texts), self.dim)
