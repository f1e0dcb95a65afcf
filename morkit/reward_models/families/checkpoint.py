"""Reading a model's checkpoint folder the way every family does: its own tokenizer (tokenizer.json verbatim), a
chat rendered by that tokenizer with exactly one BOS, and tensors by name over its safetensors files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from morkit.core.errors import ScoreError


def render_chat(tokenizer: Any, messages: Sequence[Mapping[str, str]]) -> list[int]:
    """Template text (no generation prompt) -> ids with exactly one leading BOS when the model uses one: a BOS string is
    stripped, the text tokenised, and the BOS put back if tokenising added none. A second leading BOS is an error.

    Args:
        tokenizer: A transformers tokenizer with a chat template.
        messages: The chat turns (`role`, `content`).

    Returns:
        The token ids, not truncated (morkit truncates explicitly).
    """
    text = tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=False)
    bos = tokenizer.bos_token
    had_bos = bool(bos) and text.startswith(bos)
    if had_bos:
        text = text[len(bos):]
    ids = list(tokenizer(text, verbose=False)["input_ids"])  # morkit truncates explicitly
    bos_id = tokenizer.bos_token_id
    if bos_id is not None and had_bos and (not ids or ids[0] != bos_id):
        ids = [bos_id] + ids
    if bos_id is not None and len(ids) > 1 and ids[0] == bos_id and ids[1] == bos_id:
        raise ScoreError("chat rendering produced two leading BOS tokens; check the tokenizer and template")
    return ids


def load_tokenizer(root: Path) -> Any:
    """The checkpoint's tokenizer.json used verbatim (as transformers 4 fast tokenizers did), since transformers 5's
    AutoTokenizer may rebuild its pre-tokenizer and BOS handling; without one, AutoTokenizer decides.

    Args:
        root: The checkpoint folder.

    Returns:
        The tokenizer.
    """
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    if (root / "tokenizer.json").is_file():
        return PreTrainedTokenizerFast.from_pretrained(str(root))
    return AutoTokenizer.from_pretrained(str(root))


def checkpoint_index(root: Path) -> dict[str, Path]:
    """Tensor name -> safetensors file, over every *.safetensors file in `root` (headers only)."""
    from safetensors import safe_open

    index: dict[str, Path] = {}
    for file in sorted(root.glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as handle:
            for name in handle.keys():
                index.setdefault(name, file)
    return index


def read_tensors(root: Path, names: Iterable[str]) -> dict[str, Any]:
    """The tensors `names` of the checkpoint in `root`, wherever among its safetensors files each one is.

    Args:
        root: The checkpoint folder.
        names: Tensor names, as the checkpoint spells them.

    Returns:
        Name -> torch tensor.
    """
    from safetensors import safe_open

    index = checkpoint_index(root)
    out: dict[str, Any] = {}
    for name in names:
        with safe_open(str(index[name]), framework="pt") as handle:
            out[name] = handle.get_tensor(name)
    return out
