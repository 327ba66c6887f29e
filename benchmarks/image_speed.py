r"""Image speed: pixels/s of the pixel pretraining step and images/s of the
CIFAR step (baseline, uniform graph, GLoMo), with XLA's step memory.

  python benchmarks/image_speed.py --rounds=3

Pretraining: `PixelGLoMo` of the `images_pretrain.py:cpu` model (or
`--paper`) at 16×16 and 32×32, batch 32, one jitted step (forward, backward,
Adam) on fixed random images. CIFAR: `GLoMoResNet` of the `cifar.py:cpu`
preset (ResNet-18 of width 16, batch 128, SGD) on 32×32 images, for the
variants at graph_downsample 2 (16×16 graphs, the CPU runs) and GLoMo at 1
(32×32 graphs, the paper's setting); the graphs come from a randomly
initialised predictor of the cpu model run inside the step, `graph_chunk`
(16) images at a time, as in training.
Every configuration is compiled before timing; within a round they
alternate; a figure is the median over rounds. Memory: the compiled step's
temporaries plus arguments (`memory_analysis()`). Records go to
benchmarks/results/image_speed.jsonl.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

from experiments.configs import cifar as cifar_configs  # noqa: E402
from experiments.configs import images_pretrain  # noqa: E402
from glomo_jax.images.cifar import CifarConfig  # noqa: E402
from glomo_jax.images.pixel_transfer import GLoMoResNet  # noqa: E402
from glomo_jax.pretraining.pixels import ImagePretrainConfig  # noqa: E402
from glomo_jax.models.pixel_glomo import PixelGLoMo  # noqa: E402

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                       "image_speed.jsonl")


class Case:
  """One compiled training step and its inputs."""

  def __init__(self, name, units_per_step, init, loss, tx, batch):
    self.name, self.units = name, units_per_step
    variables = init()
    self.params, self.stats = variables["params"], variables.get("batch_stats", {})
    self.opt, self.batch = tx.init(self.params), batch

    def step(params, stats, opt, batch, key):
      (value, stats), grads = jax.value_and_grad(loss, has_aux=True)(params, stats, batch,
                                                                      key)
      updates, opt = tx.update(grads, opt, params)
      return optax.apply_updates(params, updates), stats, opt, value

    self.step = jax.jit(step, donate_argnums=(0, 1, 2))
    args = (self.params, self.stats, self.opt, batch, jax.random.key(0))
    analysis = self.step.lower(*args).compile().memory_analysis()
    self.memory_gb = (analysis.temp_size_in_bytes + analysis.argument_size_in_bytes) / 1e9

  def run(self, steps: int) -> float:
    began = time.perf_counter()
    for i in range(steps):
      self.params, self.stats, self.opt, value = self.step(
          self.params, self.stats, self.opt, self.batch, jax.random.key(i))
    float(value)
    return time.perf_counter() - began


def pretraining_case(config: ImagePretrainConfig, size: int) -> Case:
  model = PixelGLoMo(config.model, (size, size))
  images = np.random.default_rng(0).integers(0, 256, (config.batch_size, size, size, 3))
  images = jnp.asarray(images, jnp.uint8)
  n = size * size - 1

  def loss(params, stats, batch, key):
    (value, _), updates = model.apply({"params": params, "batch_stats": stats}, batch,
                                      train=True, rngs={"sample": key},
                                      mutable=["batch_stats"])
    return value, updates["batch_stats"]

  init = lambda: model.init(jax.random.key(0), images[:1], train=False,  # noqa: E731
                            positions=(jnp.arange(n), jnp.arange(n)))
  return Case(f"pretrain {size}×{size}", config.batch_size * size * size, init, loss,
              optax.adam(1e-3), images)


def cifar_case(config: CifarConfig, variant: str, factor: int, predictor) -> Case:
  pmodel, pvars = predictor
  layers = pmodel.config.num_graph_layers
  model = GLoMoResNet(variant, config.depth, config.width, 10,
                      config.transfer.for_predictor(layers), graph_downsample=factor,
                      graph_chunk=config.graph_chunk)
  b = config.optim.batch_size
  rng = np.random.default_rng(1)
  batch = {"images": jnp.asarray(rng.integers(0, 256, (b, 32, 32, 3)), jnp.uint8),
           "label": jnp.asarray(rng.integers(0, 10, b), jnp.int32)}

  def graph_fn(small):                        # the predictor, as CifarTask runs it
    model_at = PixelGLoMo(pmodel.config, small.shape[1:3])
    return model_at.apply(pvars, small, method=PixelGLoMo.graphs)
  graph_fn = graph_fn if variant == "glomo" else None

  def loss(params, stats, batch, key):
    del key
    logits, updates = model.apply({"params": params, "batch_stats": stats}, batch["images"],
                                  train=True, graph_fn=graph_fn, mutable=["batch_stats"])
    value = optax.softmax_cross_entropy_with_integer_labels(logits, batch["label"]).mean()
    return value, updates["batch_stats"]

  init = lambda: model.init(jax.random.key(0), batch["images"][:1], train=False,  # noqa: E731
                            graph_fn=graph_fn)
  return Case(f"cifar {variant} (graphs at {32 // factor}×{32 // factor})", b, init, loss,
              config.optim.optimizer_for(1000), batch)


def main():
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--rounds", type=int, default=3)
  p.add_argument("--steps", type=int, default=5, help="steps timed per case and round")
  p.add_argument("--skip", default="", help="cases to leave out, comma-separated: pretrain16, "
                 "pretrain32, cifar_baseline, cifar_uniform, cifar_glomo, cifar_glomo32")
  args = p.parse_args()
  pre = ImagePretrainConfig.from_dict(images_pretrain.get_config("cpu").to_dict())
  cifar = CifarConfig.from_dict(cifar_configs.get_config("cpu").to_dict())
  pmodel = PixelGLoMo(pre.model, (16, 16))
  pvars = pmodel.init(jax.random.key(0), jnp.zeros((1, 16, 16, 3), jnp.uint8),
                      method=PixelGLoMo.graphs)
  builders = {"pretrain16": lambda: pretraining_case(pre, 16),
              "pretrain32": lambda: pretraining_case(pre, 32)}
  for v in ("baseline", "uniform", "glomo"):
    builders[f"cifar_{v}"] = lambda v=v: cifar_case(cifar, v, 2, (pmodel, pvars))
  builders["cifar_glomo32"] = lambda: cifar_case(cifar, "glomo", 1, (pmodel, pvars))
  skip = set(filter(None, args.skip.split(",")))
  if skip - set(builders):
    raise SystemExit(f"unknown --skip {sorted(skip - set(builders))}: {sorted(builders)}")
  cases = [build() for name, build in builders.items() if name not in skip]
  for c in cases:                                 # warm up (compiled already)
    c.run(1)
  times = {c.name: [] for c in cases}
  for r in range(args.rounds):
    for c in cases if r % 2 == 0 else cases[::-1]:
      times[c.name].append(c.run(args.steps))
  rows = {}
  print("| case | units/s | steps/s | step memory (GB) |")
  print("|---|---|---|---|")
  for c in cases:
    seconds = statistics.median(times[c.name]) / args.steps
    rows[c.name] = {"units_per_s": c.units / seconds, "steps_per_s": 1 / seconds,
                    "memory_gb": c.memory_gb, "seconds": times[c.name]}
    unit = "pixels" if c.name.startswith("pretrain") else "images"
    print(f"| {c.name} | {c.units / seconds:,.0f} {unit}/s | {1 / seconds:.2f} | "
          f"{c.memory_gb:.2f} |")
  record = {"date": time.strftime("%Y-%m-%d %H:%M"), "devices": str(jax.devices()),
            "rounds": args.rounds, "steps": args.steps, "cases": rows}
  os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
  with open(RESULTS, "a", encoding="utf-8") as f:
    f.write(json.dumps(record) + "\n")


if __name__ == "__main__":
  main()
