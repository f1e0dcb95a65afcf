"""Small trained heads that turn pooled features into P(correct); stored as safetensors in the package."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from morkit.core.errors import UnavailableError


@dataclass(frozen=True)
class LogisticHead:
    """p = sigmoid(weight . (x - mean) / scale + bias); `info` records how it was trained and how it scored."""

    mean: np.ndarray
    scale: np.ndarray
    weight: np.ndarray
    bias: float
    info: dict[str, Any] = field(default_factory=dict)

    def logits(self, features: np.ndarray) -> np.ndarray:
        x = (np.asarray(features, dtype=np.float64) - self.mean) / self.scale
        return x @ self.weight + self.bias

    def probabilities(self, features: np.ndarray) -> np.ndarray:
        return 1.0 / (1.0 + np.exp(-self.logits(features)))

    def save(self, path: str | Path) -> None:
        from safetensors.numpy import save_file

        tensors = {
            "mean": self.mean.astype(np.float64),
            "scale": self.scale.astype(np.float64),
            "weight": self.weight.astype(np.float64),
            "bias": np.array([self.bias], dtype=np.float64),
        }
        save_file(tensors, str(path), metadata={"info": json.dumps(self.info, sort_keys=True)})

    @classmethod
    def load(cls, path: str | Path) -> "LogisticHead":
        from safetensors import safe_open

        with safe_open(str(path), framework="np") as handle:
            tensors = {k: handle.get_tensor(k) for k in ("mean", "scale", "weight", "bias")}
            info = json.loads((handle.metadata() or {}).get("info", "{}"))
        dims = {k: v.shape for k, v in tensors.items()}
        if not (dims["mean"] == dims["scale"] == dims["weight"]) or dims["bias"] != (1,):
            raise UnavailableError(f"{path}: head tensors have inconsistent shapes {dims}")
        return cls(tensors["mean"], tensors["scale"], tensors["weight"], float(tensors["bias"][0]), info)


def packaged_head_path(name: str) -> Path:
    return Path(str(resources.files("morkit") / "resources" / "heads" / f"{name}.safetensors"))


def load_packaged_head(name: str, override: str | Path | None = None) -> LogisticHead:
    """The head shipped with morkit (or `override`); a missing head is an error, never a random init."""
    path = Path(override) if override else packaged_head_path(name)
    if not path.is_file():
        raise UnavailableError(f"trained head for {name!r} not found at {path}; run `morkit train-head {name}`")
    return LogisticHead.load(path)

