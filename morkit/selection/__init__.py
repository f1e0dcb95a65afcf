"""selection layer of morkit (see architecture.md)."""
