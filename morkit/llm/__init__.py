"""Text generation for agents, aggregators and critics: the LLM protocol, its backends, agents.toml pools."""
