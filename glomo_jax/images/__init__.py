"""Images: pixel datasets, CIFAR ResNets and their GLoMo variant, Fig. 4's
pixel edges.

The pixel model itself (`PixelGLoMo`, its 3×3 window) is in glomo_jax/models;
pixel pretraining beside text pretraining (`glomo_jax.pretraining.pixels`).
"""
from glomo_jax.models.pixel_glomo import PixelGLoMo, quantise
from glomo_jax.models.pixel_window import WINDOW_OFFSETS, window_targets

__all__ = ["PixelGLoMo", "WINDOW_OFFSETS", "quantise", "window_targets"]
