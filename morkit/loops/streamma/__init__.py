"""StreamMA: a pipelined chain (or tree or DAG) of agents that review each other's steps as they stream."""

from morkit.loops.streamma.loop import StreamMA, StreamMAConfig, compare_protocols

__all__ = ["StreamMA", "StreamMAConfig", "compare_protocols"]
