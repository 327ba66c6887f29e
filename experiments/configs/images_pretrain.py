r"""GLoMo over pixels: pretraining configs (paper §4: ImageNet resized to 32×32).

  python -m experiments.pretrain_images --config=experiments/configs/images_pretrain.py:cpu \
      --config.images.location=../shared/data/tiny_imagenet32/tiny_imagenet_train32_25k.npz \
      --workdir=runs/images_cpu

Presets:
* '' (paper scale): TFDS imagenet_resized/32x32 at 32×32 (1,024 pixels),
  the text paper model's shape applied to pixels (d 512, 8 heads of 256,
  3 graph layers, 4 + 4 pixel conv layers, 2 decoder layers); a GPU / TPU
  run. The paper gives no image hyper-parameters beyond the window.
* 'cpu': an .npz of 32×32 images (location by flag) box-downsampled to
  16×16 (256 pixels), d 64, 4 heads of 32, 3 graph layers, 2,500 steps of
  32 images; for 2 CPU cores.
* 'tiny': seconds-long smoke run of the same pipeline.
"""
from experiments.configs.common import config_dict
from glomo_jax import ModelConfig
from glomo_jax.images.data import ImageSource
from glomo_jax.pretraining.pixels import ImagePretrainConfig
from glomo_jax.train.config import LoopOptions

RUN_KIND = "pretrain_images"   # experiments/kinds.py


def get_config(arg: str = ""):
  if arg == "":
    model = ModelConfig(vocab_size=256, dim=512, num_heads=8, head_dim=256,
                        num_graph_layers=3, key_layers=4, query_layers=4, kernel_size=3,
                        decoder_layers=2, sample_positions=64, loss_chunk_size=4096)
    config = ImagePretrainConfig(
        model=model, images=ImageSource("tfds", "imagenet_resized/32x32", "train"),
        heldout_images=10_000, batch_size=64, optimizer="adam", learning_rate=1e-3,
        clip_norm=1.0, eval_batches=50,
        loop=LoopOptions(num_steps=100_000, log_every=100, eval_every=2000,
                         checkpoint_every=2000))
  elif arg in ("cpu", "tiny"):
    model = ModelConfig(vocab_size=256, dim=64, num_heads=4, head_dim=32,
                        num_graph_layers=3, key_layers=2, query_layers=2, kernel_size=3,
                        decoder_layers=1, sample_positions=32, loss_chunk_size=2048)
    config = ImagePretrainConfig(
        model=model, images=ImageSource("npz", ""), downsample=2, heldout_images=1000,
        batch_size=32, optimizer="adam", learning_rate=1e-3, clip_norm=1.0, eval_batches=0,
        loop=LoopOptions(num_steps=2500, log_every=50, eval_every=500, checkpoint_every=500))
    if arg == "tiny":
      config = config.replace(
          model=model.replace(dim=16, head_dim=8, num_graph_layers=2, sample_positions=8),
          downsample=4, max_images=96, heldout_images=32, batch_size=16,
          loop=LoopOptions(num_steps=6, log_every=2, eval_every=3, checkpoint_every=3,
                           compile_fast=True))
  else:
    raise ValueError(f"unknown images_pretrain preset {arg!r}; use '', 'cpu' or 'tiny'")
  return config_dict(config)
