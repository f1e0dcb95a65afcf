"""question_pool layer of morkit (see architecture.md)."""
