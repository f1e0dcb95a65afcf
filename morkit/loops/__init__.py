"""loops layer of morkit (see architecture.md)."""
