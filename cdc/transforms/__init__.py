"""What leaves the database and how it is reshaped before it is encoded: ``source.tables``
entries (columns, masks, row filters, ops), the transform plugin interface, its chain, built-ins."""

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
