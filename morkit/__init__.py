"""morkit: reward-model ensembles and per-query routing for test-time scaling, e.g.
`morkit.rank(morkit.load_queries("queries.jsonl"), morkit.load_pool("pools/mine"))`. Every name is imported on
first use (PEP 562), so `import morkit` loads no model, torch or vLLM.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    # queries in and out
    "Query": "morkit.core.types", "Candidate": "morkit.core.types", "Score": "morkit.core.types",
    "Verdict": "morkit.core.types", "load_queries": "morkit.data.contract", "save_queries": "morkit.data.contract",
    # errors
    "MorkitError": "morkit.core.errors", "InputError": "morkit.core.errors", "UnavailableError": "morkit.core.errors",
    "ScoreError": "morkit.core.errors", "LLMError": "morkit.core.errors",
    # reward models and scoring
    "REWARD_MODELS": "morkit.reward_models.catalog", "list_rms": "morkit.reward_models.catalog",
    "load_rm": "morkit.reward_models.catalog", "RewardModel": "morkit.reward_models.base",
    "RMCard": "morkit.reward_models.card", "ScoringOptions": "morkit.reward_models.options",
    "resolve_rm": "morkit.reward_models.catalog", "ScoringSession": "morkit.reward_models.session",
    "ScoreCache": "morkit.reward_models.cache", "score": "morkit.services.scoring",
    # question pools
    "QuestionPool": "morkit.question_pool.pool", "PoolConfig": "morkit.question_pool.pool",
    "load_pool": "morkit.question_pool.pool", "build_pool": "morkit.services.pools",
    "add_to_pool": "morkit.services.pools", "add_to_saved_pool": "morkit.services.pools", "load_inputs": "morkit.services.pools", "DATASETS": "morkit.data.datasets",
    # per-query selection
    "Router": "morkit.selection.router", "SELECTION_METHODS": "morkit.selection.methods",
    "Cascade": "morkit.selection.cascade", "CascadeOptions": "morkit.selection.cascade_options",
    "CostBudget": ("morkit.selection.budget", "Budget"), "CostOptions": "morkit.selection.budget",
    "SelectOptions": "morkit.selection.methods", "select": "morkit.services.routing", "rank": "morkit.services.routing",
    # verifiers
    "Verifier": "morkit.verify.base", "MoRVerifier": "morkit.verify.mor", "mor_verifier": "morkit.verify.mor",
    "LLMVerifier": "morkit.verify.critic", "CombinedVerifier": "morkit.verify.combined",
    "VERIFIERS": "morkit.verify.kinds",
    # LLMs and agents
    "LLM": "morkit.llm.base", "SamplingParams": "morkit.llm.base", "LocalLLM": "morkit.llm.local",
    "OpenAIChatLLM": "morkit.llm.openai_compat", "load_agents": "morkit.llm.agents",
    "LLM_BACKENDS": "morkit.llm.backends", "generate": "morkit.services.generating",
    "GenerateOptions": "morkit.services.generating",
    # the CTTS-MM flow end to end
    "load_pipeline_config": "morkit.services.pipeline.config", "run_pipeline": "morkit.services.pipeline.stages",
    # search
    "run_search": "morkit.services.searching", "SearchOptions": "morkit.search.methods",
    "SEARCH_METHODS": "morkit.search.methods", "ACS": "morkit.search.acs", "AGGREGATORS": "morkit.search.aggregators",
    # loops
    "run_loop": "morkit.services.looping", "LOOPS": "morkit.loops.registry", "LoopOptions": "morkit.loops.registry",
    "Loop": "morkit.loops.base", "Budget": "morkit.loops.base", "TMAS": "morkit.loops.tmas",
    "StreamMA": "morkit.loops.streamma", "ATLAS": "morkit.loops.atlas",
    # serving rewards
    "RoutingEngine": "morkit.services.serving.engine", "ServeLimits": "morkit.services.serving.app",
    "create_app": "morkit.services.serving.app", "serve": "morkit.services.serving.server",
    "routed_reward": "morkit.integrations.trl",
    # resident models
    "release_models": "morkit.runtime.models",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'morkit' has no attribute {name!r}")
    module, attribute = module if isinstance(module, tuple) else (module, name)  # (module, its name there)
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return __all__
