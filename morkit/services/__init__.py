"""The services the Python API, the CLI, the demo and the benchmarks share; options are typed dataclasses."""
