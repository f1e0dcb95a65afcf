"""An `LLM` run here with transformers: SmolLM2-135M-Instruct from morkit's cached checkpoint by default, loaded
once per process as a resident model the SmolLM2 RMs share. `chat` batches every sample (left padding); one lock
per model; temperature 0 is greedy and deterministic.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, Iterator, Sequence

from morkit.core import checks
from morkit.core.errors import LLMError
from morkit.llm.base import (
    Completion,
    Conversation,
    SamplingParams,
    cut_at_stop,
    cut_stream,
)
from morkit.runtime import models
from morkit.runtime.models import LoadedLM


def _stop_strings_supported() -> bool:
    from transformers import GenerationConfig

    return hasattr(GenerationConfig(), "stop_strings")


def _eos_ids(tokenizer: Any) -> set[int]:
    eos = tokenizer.eos_token_id
    return set(eos if isinstance(eos, list) else [eos])


class _Cancel:
    """A stopping criterion that ends generation once `event` is set (the stream's reader stopped)."""

    def __init__(self, event: threading.Event):
        self.event = event

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        import torch

        return torch.full((input_ids.shape[0],), self.event.is_set(), dtype=torch.bool, device=input_ids.device)


class PresencePenalty:
    """OpenAI's and vLLM's presence penalty as a transformers logits processor: `penalty` is subtracted from the
    logit of every token a row has generated so far, once per token however often it occurs. The prompt (the
    first `prompt_width` positions of the left-padded input) does not count. It runs before temperature and
    top-p, as in vLLM.

    Args:
        penalty: Subtracted from each generated token's logit (negative: added).
        prompt_width: Positions of `input_ids` that are the prompt, padding included.
    """

    def __init__(self, penalty: float, prompt_width: int):
        self.penalty = penalty
        self.prompt_width = prompt_width

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        generated = input_ids[:, self.prompt_width:]
        if generated.shape[1] == 0:
            return scores
        seen = scores.new_zeros(scores.shape).scatter_(1, generated, 1.0)
        return scores - self.penalty * seen


class LocalLLM:
    """Chat generation with a local transformers causal LM (default: the embedded SmolLM2-135M-Instruct);
    `presence_penalty` is applied by a logits processor (PresencePenalty).

    Args:
        model_path: A transformers checkpoint folder; None is the embedded SmolLM2-135M-Instruct. It loads on
            first use, one copy per process.
        device: The torch device; None picks cuda, else mps, else cpu.
        dtype: The torch dtype name; None picks by device.
        max_batch: Samples generated in one batch (positive).
        name: The name completions and errors report.
    """

    takes_presence_penalty = True  # SamplingParams.presence_penalty: PresencePenalty, before temperature

    def __init__(self, model_path: str | Path | None = None, *, device: str | None = None, dtype: str | None = None,
                 max_batch: int = 8, name: str = "smollm2-135m-instruct"):
        checks.positive_int(max_batch, "max_batch")
        self.model_path = model_path
        self.device = device
        self.dtype = dtype
        self.max_batch = max_batch
        self.name = name

    @property
    def loaded(self) -> LoadedLM:
        """The model and tokenizer: the process's resident copy, loaded on first use."""
        return models.causal_lm(self.model_path, self.device, self.dtype)

    # -- helpers -------------------------------------------------------------------------------

    @staticmethod
    def _prompt_ids(tokenizer: Any, conversation: Conversation) -> list[int]:
        text = tokenizer.apply_chat_template([dict(m) for m in conversation], tokenize=False,
                                             add_generation_prompt=True)
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    @staticmethod
    def _generate_options(lm: LoadedLM, params: SamplingParams, deadline: float | None = None,
                          prompt_tokens: int = 0) -> dict[str, Any]:
        """`generate` keyword arguments for these sampling parameters (a GenerationConfig, maybe the tokenizer). New
        tokens stop at the model's context window; at `deadline` (time.monotonic()) generation stops (`max_time`)
        and the text so far comes back with finish reason "length". A presence penalty counts only the tokens
        after the first `prompt_tokens` positions (the prompt's)."""
        from transformers import GenerationConfig

        tok = lm.tokenizer
        window = getattr(lm.model.config, "max_position_embeddings", None)
        limit = params.max_tokens if not isinstance(window, int) else max(1, min(params.max_tokens,
                                                                                 window - prompt_tokens))
        options: dict[str, Any] = {"max_new_tokens": limit, "pad_token_id": tok.pad_token_id,
                                   "eos_token_id": tok.eos_token_id}
        if deadline is not None:
            options["max_time"] = max(deadline - time.monotonic(), 0.01)
        if params.temperature > 0:
            options.update(do_sample=True, temperature=params.temperature, top_p=params.top_p, top_k=0)
        else:
            options.update(do_sample=False)
        extra: dict[str, Any] = {}
        if params.presence_penalty:
            from transformers import LogitsProcessorList

            extra["logits_processor"] = LogitsProcessorList([PresencePenalty(params.presence_penalty,
                                                                             prompt_tokens)])
        if params.stop and _stop_strings_supported():  # stop strings need the tokenizer at generate time
            options["stop_strings"] = list(params.stop)
            extra["tokenizer"] = tok
        return {"generation_config": GenerationConfig(**options), **extra}

    def _generate(self, lm: LoadedLM, rows: list[list[int]], params: SamplingParams,
                  deadline: float | None = None) -> list[list[int]]:
        """New token ids per row (padding after the end removed), for one left-padded batch."""
        import torch

        width = max(len(r) for r in rows)
        pad = lm.tokenizer.pad_token_id
        ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows], device=lm.device)
        mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], device=lm.device)
        with torch.inference_mode():
            out = lm.model.generate(input_ids=ids, attention_mask=mask,
                                    **self._generate_options(lm, params, deadline, width))
        return [self._trim(lm, row.tolist()) for row in out[:, width:]]

    @staticmethod
    def _trim(lm: LoadedLM, new: list[int]) -> list[int]:
        """Tokens up to and including the first end-of-sequence (what follows is padding)."""
        eos_ids = _eos_ids(lm.tokenizer)
        for i, token in enumerate(new):
            if token in eos_ids:
                return new[: i + 1]
        while new and new[-1] == lm.tokenizer.pad_token_id:  # a row stopped early by a stop string
            new = new[:-1]
        return new

    # -- LLM protocol --------------------------------------------------------------------------

    def chat(self, conversations: Sequence[Conversation], params: SamplingParams = SamplingParams()
             ) -> list[Completion]:
        """One Completion per conversation, in order, generated in batches by the local model.

        Args:
            conversations: Each a list of `{"role", "content"}` messages (the model's chat template renders them).
            params: What to generate; a `timeout_s` deadline cuts samples short (finish reason `length`).

        Returns:
            One Completion per conversation with `params.n` texts and token counts.

        Raises:
            LLMError: Generation failed.
        """
        if not conversations:
            return []
        lm = self.loaded
        tok = lm.tokenizer
        prompts = [self._prompt_ids(tok, c) for c in conversations]
        jobs = [(c, s) for c in range(len(prompts)) for s in range(params.n)]
        jobs.sort(key=lambda job: len(prompts[job[0]]))  # similar lengths together: less padding
        generated: dict[tuple[int, int], list[int]] = {}
        deadline = None if params.timeout_s is None else time.monotonic() + params.timeout_s
        timed_out: set[tuple[int, int]] = set()
        with lm.lock:
            if params.seed is not None:
                from transformers import set_seed

                set_seed(params.seed)
            for start in range(0, len(jobs), self.max_batch):
                chunk = jobs[start: start + self.max_batch]
                try:
                    outs = self._generate(lm, [prompts[c] for c, _ in chunk], params, deadline)
                except Exception as err:  # noqa: BLE001 - surfaced as the protocol's error type
                    raise LLMError(f"LLM {self.name!r}: generate failed: {type(err).__name__}: {err}") from err
                generated.update(zip(chunk, outs))
                if deadline is not None and time.monotonic() >= deadline:  # these may have been cut short
                    timed_out.update(chunk)
        eos_ids = _eos_ids(tok)
        results = []
        for c, prompt in enumerate(prompts):
            texts, reasons, used = [], [], 0
            for s in range(params.n):
                new = generated[(c, s)]
                used += len(new)
                text, cut = cut_at_stop(tok.decode(new, skip_special_tokens=True), params.stop)
                texts.append(text)
                short = len(new) < params.max_tokens and (c, s) not in timed_out
                ended = cut or short or (bool(new) and new[-1] in eos_ids)
                reasons.append("stop" if ended else "length")
            results.append(Completion(tuple(texts), tuple(reasons), len(prompt), used))
        return results

    def stream(self, conversation: Conversation, params: SamplingParams = SamplingParams()) -> Iterator[str]:
        """Pieces of one sample via TextIteratorStreamer, `generate` running in a background thread.

        Args:
            conversation: A list of `{"role", "content"}` messages.
            params: What to generate; `n` is ignored.

        Yields:
            The sample's text, piece by piece, up to the first stop string.

        Raises:
            LLMError: Generation failed.
        """
        import torch
        from transformers import StoppingCriteriaList, TextIteratorStreamer

        lm = self.loaded
        prompt = self._prompt_ids(lm.tokenizer, conversation)
        streamer = TextIteratorStreamer(lm.tokenizer, skip_prompt=True, skip_special_tokens=True)
        cancel = threading.Event()
        failure: list[BaseException] = []
        deadline = None if params.timeout_s is None else time.monotonic() + params.timeout_s

        def run() -> None:
            try:
                with lm.lock, torch.inference_mode():
                    if params.seed is not None:
                        from transformers import set_seed

                        set_seed(params.seed)
                    ids = torch.tensor([prompt], device=lm.device)
                    lm.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), streamer=streamer,
                                      stopping_criteria=StoppingCriteriaList([_Cancel(cancel)]),
                                      **self._generate_options(lm, params, deadline, len(prompt)))
            except BaseException as err:  # noqa: BLE001 - re-raised in the reader's thread
                failure.append(err)
                streamer.end()

        worker = threading.Thread(target=run, name=f"{self.name}-stream", daemon=True)
        worker.start()
        try:
            yield from cut_stream(streamer, params.stop)
        finally:
            cancel.set()
            worker.join()
        if failure:
            raise LLMError(f"LLM {self.name!r}: generate failed: {failure[0]}") from failure[0]


def from_agent_spec(spec: Any) -> LocalLLM:
    """The `local` backend of agents.toml: `model` is a checkpoint path, or smollm2 (the default)."""
    return LocalLLM(None if spec.model in ("", "smollm2") else spec.model)
