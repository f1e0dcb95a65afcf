"""The `morkit` command line (entry point `morkit.cli:main`)."""

from morkit.cli.main import main

__all__ = ["main"]
