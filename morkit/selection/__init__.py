"""Per-query selection of an RM ensemble from a pool (methods registered in selection.methods), and MoR ranking."""
