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


class TopicEmbedder(HashEmbedder):
    """Questions of one topic lie close together: a topic direction ("algebra ..." or not) plus hashed noise, so a
    repeated text gets the same vector."""

    def encode(self, texts, *, batch_size=64, progress=False):
        import numpy as np

        noise = super().encode(texts)
        topic = np.array([[1.0, 0.0] if t.startswith("algebra") else [0.0, 1.0] for t in texts], np.float32)
        v = np.concatenate([topic * 3, noise[:, 2:]], axis=1)
        return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)
