"""Images: pixel datasets, pixel pretraining on the loop, CIFAR ResNets.

The pixel model itself (`PixelGLoMo`, its 3×3 window) is in glomo_jax/models.
"""
from glomo_jax.models.pixel_glomo import PixelGLoMo, quantise
from glomo_jax.models.pixel_window import WINDOW_OFFSETS, window_targets

__all__ = ["PixelGLoMo", "WINDOW_OFFSETS", "quantise", "window_targets"]
