"""Custom head modules of the CTTS-MM reward models, with the parameter names their checkpoints use. None is ever
randomly initialised in use: `common.load_strict` refuses missing or unexpected tensors.
"""

from __future__ import annotations

from typing import Any, Mapping

import torch
from torch import nn

from morkit.core.errors import UnavailableError


def mlp_score(hidden: int, out: int) -> nn.Sequential:
    """Qwen RM/PRM and INF-ORM `score`: Linear(h,h) -> ReLU -> Linear(h,out); keys score.0.*, score.2.*."""
    return nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, out))


def linear_score(hidden: int) -> nn.Linear:
    """Sequence-classification `score`: Linear(h,1) without bias (Skywork Gemma / Llama)."""
    return nn.Linear(hidden, 1, bias=False)


class ValueHead(nn.Module):
    """AceCodeRM `v_head`: dropout (identity at inference) + `summary` Linear(h,1) with bias."""

    def __init__(self, hidden: int):
        super().__init__()
        self.dropout = nn.Dropout(0.1)
        self.summary = nn.Linear(hidden, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.summary(self.dropout(x))


def leaky_mlp_from_state(state: Mapping[str, Any]) -> nn.Sequential:
    """An nn.Sequential shaped after a `network.{i}.weight` state dict (LDL heads).

    Linear layers sit at the indices found; the slot right after a Linear is a LeakyReLU and any
    other gap is a Dropout (identity at inference), as in the reference MultiOutputNN / GatingNN.
    """
    linear = sorted(int(k.split(".")[1]) for k in state if k.startswith("network.") and k.endswith(".weight"))
    if not linear:
        raise UnavailableError("no network.{i}.weight tensors in the head state")
    layers: list[nn.Module] = []
    for index in range(linear[-1] + 1):
        if index in linear:
            out_dim, in_dim = state[f"network.{index}.weight"].shape
            layers.append(nn.Linear(in_dim, out_dim))  # the reference layers all have a bias
        elif index - 1 in linear:
            layers.append(nn.LeakyReLU())
        else:
            layers.append(nn.Dropout(0.0))
    return nn.Sequential(*layers)


class LDLHead(nn.Module):
    """LDL-Reward: 22 distributions of 10 bins (regression) mixed by gating weights; score = E[bin value]."""

    bins = 10

    def __init__(self, regression: nn.Sequential, gating: nn.Sequential, temperature: float = 1.0,
                 softmax: bool = False):
        super().__init__()
        self.regression = regression
        self.gating = gating
        self.temperature = temperature
        self.softmax = softmax

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rewards = torch.softmax(self.regression(x).view(x.shape[0], -1, self.bins), dim=-1)
        weights = self.gating(x)
        if self.softmax:
            weights = torch.softmax(weights / self.temperature, dim=1)
        mixture = torch.bmm(weights.unsqueeze(1), rewards).squeeze(1)
        support = torch.linspace(0, 1, mixture.shape[-1], device=x.device, dtype=mixture.dtype)
        return (mixture * support).sum(-1, keepdim=True)


class GatingNetwork(nn.Module):
    """QRM `gating`: n x (Linear no bias -> ReLU -> BatchNorm1d) -> Linear; softmax(x / T) * logit_scale."""

    def __init__(self, in_features: int, out_features: int, temperature: float = 10.0,
                 hidden_dim: int = 1024, n_hidden: int = 3):
        super().__init__()
        self.temperature = temperature
        self.logit_scale = nn.Parameter(torch.ones(1))
        layers: list[nn.Module] = []
        for _ in range(n_hidden):
            layers += [nn.Linear(in_features, hidden_dim, bias=False), nn.ReLU(), nn.BatchNorm1d(hidden_dim)]
            in_features = hidden_dim
        layers.append(nn.Linear(in_features, out_features, bias=True))
        self.layers = nn.ModuleList(layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return torch.softmax(x / self.temperature, dim=1) * self.logit_scale[0]


class QRMHead(nn.Module):
    """QRM: per-objective quantiles from the reward token, gated by the assistant-header token.

    Input rows are (2, h): [reward token state, gating token state]. Output per row:
    [score, quantile_1..quantile_Q, reward_1..reward_O] where score = sum_o gate_o * mean_q(adjusted).
    """

    def __init__(self, hidden: int, num_objectives: int, num_quantiles: int, *, temperature: float = 10.0,
                 gating_hidden_dim: int = 1024, gating_n_hidden: int = 3):
        super().__init__()
        self.num_objectives = num_objectives
        self.num_quantiles = num_quantiles
        self.regression_layer = nn.Linear(hidden, num_objectives * num_quantiles, bias=False)
        self.gating = GatingNetwork(hidden, num_objectives, temperature, gating_hidden_dim, gating_n_hidden)
        self.reward_transform_matrix = nn.Parameter(torch.eye(num_objectives), requires_grad=False)

    def levels(self) -> list[float]:
        return torch.linspace(0.0, 1.0, self.num_quantiles + 2)[1:-1].tolist()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rewards = self.regression_layer(x[:, 0]).reshape(-1, self.num_objectives, self.num_quantiles)
        gate = self.gating(x[:, 1])
        transform = self.reward_transform_matrix
        adjusted = torch.matmul(rewards.transpose(1, 2), transform)  # [B, Q, O]
        quantiles = torch.einsum("bo,bqo->bq", gate, adjusted)
        expectation = rewards.mean(dim=2) @ transform  # [B, O]
        score = (gate * expectation).sum(dim=1, keepdim=True)
        return torch.cat([score, quantiles, expectation], dim=1)
