"""Reward models behind one batched scoring API (registered in reward_models.catalog), and the score cache."""
