"""`morkit serve`: per-query routed reward scoring over HTTP (engine, micro-batcher, app, uvicorn server).

Nothing here imports FastAPI or uvicorn until an app or server is made.
"""
