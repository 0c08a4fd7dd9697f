"""Helpers of the data loader, laid out as ``torch.utils.data._utils`` (``collate``)."""

from . import collate

__all__ = ["collate"]
