"""LLM backends, in LLM_BACKENDS: name -> factory(agent spec) -> LLM, named by `backend` in agents.toml. A factory
reads the AgentSpec fields it needs; add one with `LLM_BACKENDS.register("mine", "mypkg.llm:from_agent_spec", ...)`.
"""

from __future__ import annotations

from morkit.core.registry import Entry, Registry

LLM_BACKENDS = Registry("LLM backend", [
    Entry("local", "morkit.llm.local:from_agent_spec",
          "transformers on this machine; model = a checkpoint path, or smollm2 (the embedded SmolLM2-135M-Instruct)"),
    Entry("openai", "morkit.llm.openai_compat:from_agent_spec",
          "any OpenAI-compatible chat-completions server (vLLM included): base_url, api_key_env"),
])
"""LLM backends by name (the local model, OpenAI-compatible servers); an agents file's `backend` picks one."""
