"""Answer search over agents' answers: ACS and its baselines (registered in search.methods)."""
