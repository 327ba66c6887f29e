r"""Draw one pixel's edges in every layer and head of a pixel graph predictor
over the image, as the paper's Figure 4.

  python -m experiments.plot_pixel_edges --export=runs/images_cpu/export \
      --images=../shared/data/cifar10/cifar10_train20k_from_jpeg.npz --index=7 \
      --pixel=9,8 --downsample=2 --out=pixel_edges.png

--downsample box-averages the image first (2: 32×32 → 16×16, the resolution
the CPU-scale predictor was trained at). Rows: forward then backward layers;
the first column is the image with the pixel marked, then one cell per head.
"""
from __future__ import annotations

from absl import flags

from experiments import cli

_EXPORT = flags.DEFINE_string("export", None, "Export directory of a pixel graph predictor.")
_IMAGES = flags.DEFINE_string("images", None, ".npz with uint8 'images' [N, H, W, 3].")
_INDEX = flags.DEFINE_integer("index", 0, "Which image of the file.")
_PIXEL = flags.DEFINE_list("pixel", None, "row,column of the pixel (after downsampling).")
_DOWNSAMPLE = flags.DEFINE_integer("downsample", 1, "Box-average factor applied first.")
_OUT = flags.DEFINE_string("out", "pixel_edges.png", "Output PNG.")
flags.mark_flags_as_required(["export", "images", "pixel"])


def main(argv):
  del argv
  from glomo_jax.images.pixel_edges import draw_pixel_edges  # noqa: PLC0415
  try:
    pixel = tuple(int(v) for v in _PIXEL.value)
  except ValueError:
    pixel = ()
  if len(pixel) != 2:
    raise ValueError(f"--pixel must be row,column (two integers), got {_PIXEL.value}")
  print(draw_pixel_edges(_EXPORT.value, _IMAGES.value, _INDEX.value, pixel, _OUT.value,
                         _DOWNSAMPLE.value))


if __name__ == "__main__":
  cli.run(main)
