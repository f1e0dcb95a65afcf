"""Queries in and out: the JSONL contract, atomic writes, and loaders for the public data sets."""
