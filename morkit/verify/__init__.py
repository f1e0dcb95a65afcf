"""Verifiers: what search and test-time-scaling loops ask to score answers, with feedback."""
