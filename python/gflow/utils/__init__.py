"""Utilities of training scripts, as ``torch.utils``: ``flow.utils.data``."""

from . import data

__all__ = ["data"]
