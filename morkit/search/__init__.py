"""search layer of morkit (see architecture.md)."""
