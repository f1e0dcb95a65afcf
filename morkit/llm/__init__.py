"""llm layer of morkit (see architecture.md)."""
