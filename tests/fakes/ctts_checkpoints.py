"""Tiny random checkpoints of the eight CTTS-MM architectures, laid out as the real ones are (backbone `model.*`
or bare, head tensors under their real names, LDL heads as .pt files), with a character-level tokenizer carrying the
family's special tokens and a compact chat template of that family. The adapter, truncation, lifecycle and vLLM
conformance tests all score these; each builder returns the reference modules the tests compute expected scores from."""

from __future__ import annotations

import zlib
from pathlib import Path

import torch
import transformers


H = 32
CHARS = [chr(i) for i in range(32, 127)] + ["\n"]
QWEN_DEFAULT_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
FAMILY_SPECIALS = {
    "qwen": ["<|im_start|>", "<|im_end|>", "<extra_0>", "<|endoftext|>"],
    "llama": ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"],
    "gemma": ["<bos>", "<start_of_turn>", "<end_of_turn>", "<eos>"],
}
TEMPLATES = {
    "qwen": ("{%- if messages[0]['role'] != 'system' %}{{- '<|im_start|>system\\n" + QWEN_DEFAULT_SYSTEM
             + "<|im_end|>\\n' }}{%- endif %}{%- for m in messages %}{{- '<|im_start|>' + m['role'] + '\\n' + "
             "m['content'] + '<|im_end|>\\n' }}{%- endfor %}{%- if add_generation_prompt %}"
             "{{- '<|im_start|>assistant\\n' }}{%- endif %}"),
    "llama": ("{{- bos_token }}{%- for m in messages %}{{- '<|start_header_id|>' + m['role'] + "
              "'<|end_header_id|>\\n\\n' + m['content'] | trim + '<|eot_id|>' }}{%- endfor %}"
              "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"),
    "gemma": ("{{- bos_token }}{%- for m in messages %}{%- if m['role'] == 'system' %}"
              "{{- raise_exception('System role not supported') }}{%- endif %}"
              "{%- set role = 'model' if m['role'] == 'assistant' else m['role'] %}"
              "{{- '<start_of_turn>' + role + '\\n' + m['content'] | trim + '<end_of_turn>\\n' }}{%- endfor %}"
              "{%- if add_generation_prompt %}{{- '<start_of_turn>model\\n' }}{%- endif %}"),
}
BOS = {"qwen": None, "llama": "<|begin_of_text|>", "gemma": "<bos>"}
MODELS = {  # short name -> tokenizer family
    "qwen2.5-math-rm-72b": "qwen",
    "qwen2.5-math-prm-7b": "qwen",
    "skywork-reward-gemma-2-27b": "gemma",
    "inf-orm-llama3.1-70b": "llama",
    "ldl-reward-gemma-2-27b": "gemma",
    "acecoderm-32b": "qwen",
    "qrm-gemma-2-27b": "gemma",
    "skywork-reward-v2-llama-3.1-8b": "llama",
}
PAIRS = [
    ("What is 2+3?", "2+3 = 5.\n\nSo the answer is \\boxed{5}."),
    ("Add 1 and 1.", "It is 2."),
    ("Compute 7*6, showing the work carefully.", "7*6 = 42.\n\nCheck: 42/6 = 7.\n\nAnswer: 42"),
    ("Hi", ""),
    ("Reverse 'abc' in Python.", "def f(s):\n    return s[::-1]"),
    ("x?", "First.\n\nSecond.\n\nThird.\n\nFourth."),
    ("Long question " * 6, "short"),
    ("Is 9 prime?", "No: 9 = 3*3."),
]


def make_tokenizer(family: str):
    from tokenizers import (
        Regex,
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
        processors,
    )
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<unk>"] + FAMILY_SPECIALS[family]
    vocab = {tok: i for i, tok in enumerate(specials + CHARS)}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    bos = BOS[family]
    if bos:
        core.post_processor = processors.TemplateProcessing(single=f"{bos} $A", special_tokens=[(bos, vocab[bos])])
    tok = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", unk_token="<unk>", bos_token=bos,
                                  eos_token=FAMILY_SPECIALS[family][-1] if family != "llama" else "<|eot_id|>",
                                  additional_special_tokens=[t for t in FAMILY_SPECIALS[family] if t != bos])
    tok.chat_template = TEMPLATES[family]
    return tok, vocab


def small_config(family: str, vocab_size: int, hidden: int = H, **extra):
    """Two layers of the family's architecture; head size hidden/heads (hidden >= 128 gives the head size
    64 that vLLM's CPU attention needs)."""
    heads = 4 if hidden < 128 else 2
    common = dict(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=2,
                  num_attention_heads=heads, num_key_value_heads=2, max_position_embeddings=512, pad_token_id=0,
                  **extra)
    if family == "qwen":
        return transformers.Qwen2Config(**common)
    if family == "llama":
        return transformers.LlamaConfig(**common)
    return transformers.Gemma2Config(head_dim=hidden // heads, sliding_window=256, attn_implementation="eager", **common)


def save_tensors(path: Path, tensors: dict) -> None:
    from safetensors.torch import save_file

    save_file({k: v.detach().contiguous() for k, v in tensors.items()}, str(path), metadata={"format": "pt"})


def build_checkpoint(name: str, root: Path, hidden: int = H) -> dict:
    """Write a tiny checkpoint for `name` under `root`; return the reference modules/tensors."""
    H = hidden  # noqa: N806 - the head shapes below follow the backbone's width
    family = MODELS[name]
    torch.manual_seed(zlib.crc32(name.encode()))
    tok, vocab = make_tokenizer(family)
    root.mkdir(parents=True)
    tok.save_pretrained(root)
    ref: dict = {"family": family, "vocab": vocab, "root": root}
    mlp = lambda out: torch.nn.Sequential(torch.nn.Linear(H, H), torch.nn.ReLU(), torch.nn.Linear(H, out))  # noqa: E731
    if name in ("qwen2.5-math-rm-72b", "qwen2.5-math-prm-7b", "inf-orm-llama3.1-70b"):
        arch = {"qwen2.5-math-rm-72b": "Qwen2ForRewardModel", "qwen2.5-math-prm-7b": "Qwen2ForProcessRewardModel",
                "inf-orm-llama3.1-70b": "INFORMForSequenceClassification"}[name]
        config = small_config(family, len(vocab), H, architectures=[arch])
        if family == "qwen":
            config.auto_map = {"AutoModel": f"modeling_qwen2_rm.{arch}"}
        backbone = (transformers.Qwen2Model if family == "qwen" else transformers.LlamaModel)(config)
        head = mlp(2 if "prm" in name else 1)
        with torch.no_grad():
            for p in head.parameters():
                p.normal_(0, 0.3)
        tensors = {f"model.{k}": v for k, v in backbone.state_dict().items()}
        tensors.update({f"score.{k}": v for k, v in head.state_dict().items()})
        save_tensors(root / "model.safetensors", tensors)
        config.save_pretrained(root)
        ref.update(backbone=backbone.eval(), head=head.eval())
    elif name in ("skywork-reward-gemma-2-27b", "skywork-reward-v2-llama-3.1-8b"):
        cls = transformers.Gemma2ForSequenceClassification if family == "gemma" else transformers.LlamaForSequenceClassification
        model = cls(small_config(family, len(vocab), H, num_labels=1)).eval()
        with torch.no_grad():
            model.score.weight.normal_(0, 0.3)
        model.save_pretrained(root)
        ref.update(backbone=model.model, head=model.score, full=model)
    elif name == "acecoderm-32b":
        model = transformers.Qwen2ForCausalLM(small_config(family, len(vocab), H, tie_word_embeddings=False)).eval()
        model.config.architectures = ["Qwen2ForCausalRM"]
        model.save_pretrained(root)
        summary = torch.nn.Linear(H, 1)
        save_tensors(root / "value_head.safetensors", {f"v_head.summary.{k}": v for k, v in summary.state_dict().items()})
        ref.update(backbone=model.model, head=summary.eval())
    elif name == "ldl-reward-gemma-2-27b":
        config = small_config(family, len(vocab), H, num_objectives=220)
        backbone = transformers.Gemma2Model(config).eval()
        backbone.save_pretrained(root)
        reg = torch.nn.Sequential(torch.nn.Linear(H, 48), torch.nn.LeakyReLU(), torch.nn.Linear(48, 48),
                                  torch.nn.LeakyReLU(), torch.nn.Linear(48, 220))
        gate = torch.nn.Sequential(torch.nn.Linear(H, 40), torch.nn.LeakyReLU(), torch.nn.Dropout(0.0),
                                   torch.nn.Linear(40, 40), torch.nn.LeakyReLU(), torch.nn.Dropout(0.0),
                                   torch.nn.Linear(40, 22))
        torch.save({f"network.{k}": v for k, v in reg.state_dict().items()}, root / "regression_layer.pt")
        torch.save({f"network.{k}": v for k, v in gate.state_dict().items()}, root / "gating_layer.pt")
        ref.update(backbone=backbone, reg=reg.eval(), gate=gate.eval())
    elif name == "qrm-gemma-2-27b":
        n_obj, n_q, hid = 5, 19, 16
        config = small_config(family, len(vocab), H, num_objectives=n_obj, num_quantiles=n_q, gating_temperature=10,
                              gating_hidden_dim=hid, gating_n_hidden=3, architectures=["Gemma2ForRewardModelWithGating"])
        backbone = transformers.Gemma2Model(config).eval()
        t = {"regression_layer.weight": torch.randn(n_obj * n_q, H) * 0.3, "gating.logit_scale": torch.tensor([1.5]),
             "reward_transform_matrix": torch.eye(n_obj) + 0.1 * torch.randn(n_obj, n_obj)}
        dims = [H, hid, hid, hid]
        for i in range(3):
            t[f"gating.layers.{3 * i}.weight"] = torch.randn(hid, dims[i]) * 0.5
            bn = f"gating.layers.{3 * i + 2}"
            t.update({f"{bn}.weight": 1 + 0.1 * torch.randn(hid), f"{bn}.bias": 0.1 * torch.randn(hid),
                      f"{bn}.running_mean": 0.2 * torch.randn(hid), f"{bn}.running_var": 0.5 + torch.rand(hid),
                      f"{bn}.num_batches_tracked": torch.tensor(7)})
        t["gating.layers.9.weight"] = torch.randn(n_obj, hid) * 0.5
        t["gating.layers.9.bias"] = torch.randn(n_obj) * 0.1
        tensors = {f"model.{k}": v for k, v in backbone.state_dict().items()}
        tensors.update(t)
        save_tensors(root / "model.safetensors", tensors)
        config.save_pretrained(root)
        ref.update(backbone=backbone, qrm=t, n_q=n_q)
    return ref


def build_checkpoints(base: Path, names) -> dict:
    """Tiny checkpoints of `names` under `base`, each with its reference modules."""
    return {name: build_checkpoint(name, base / name.replace(".", "_")) for name in names}
