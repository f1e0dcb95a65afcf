"""RMs without a model: the math-consensus rule, code tests in the sandbox, tables of cached scores."""
