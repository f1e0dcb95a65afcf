"""Reusable model families (morkit.reward_models.family): the code a card names to be built on every placement, and
what families share (`checkpoint`: reading a checkpoint's tokenizer and tensors, chat rendering). A model of a new
architecture is one family (a file of its own, or one of these reused) plus one card."""
