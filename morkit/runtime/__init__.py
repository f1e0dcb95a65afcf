"""Runtime pieces: device choice, packaged model files, resident models, HTTP, the code sandbox."""
