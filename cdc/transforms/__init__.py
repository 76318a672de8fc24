"""Transforms, filters and masks: what leaves the database and how events are reshaped before
they are encoded (see :mod:`.base`, :mod:`.filters`, :mod:`.masks`)."""

from cdc.transforms.base import (
    Applied,
    BaseTransform,
    MatchingConfig,
    Transform,
    TransformConfig,
    TransformContext,
    TransformError,
    TransformPlugin,
    TransformShapeError,
)
from cdc.transforms.chain import TransformChain, build_chain

__all__ = [
    "Applied",
    "BaseTransform",
    "MatchingConfig",
    "Transform",
    "TransformChain",
    "TransformConfig",
    "TransformContext",
    "TransformError",
    "TransformPlugin",
    "TransformShapeError",
    "build_chain",
]
