"""Test-time-scaling loops over morkit's Verifier: TMAS, StreamMA and ATLAS (registered in loops.registry)."""
