"""Where model RMs run: transformers in this process, an offline vLLM engine, vLLM servers, Ray actors (one handle
class each, sharing morkit.reward_models.handles.RMHandle), and the engine code beneath them."""
