"""reward_models layer of morkit (see architecture.md)."""
