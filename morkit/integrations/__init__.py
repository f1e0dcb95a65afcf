"""Adapters that plug morkit into other projects' trainers (TRL); each imports only what it needs, on use."""
