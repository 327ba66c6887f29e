"""Images: GLoMo over pixels (`PixelGLoMo`) and its 3×3 context window."""
from glomo_jax.images.pixel_glomo import PixelGLoMo, quantise
from glomo_jax.images.window import WINDOW_OFFSETS, window_targets

__all__ = ["PixelGLoMo", "WINDOW_OFFSETS", "quantise", "window_targets"]
