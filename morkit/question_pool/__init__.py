"""Question pools: PRR and best-of-n of every RM and RM ensemble per labelled question, with a FAISS index."""
