"""Optimisers: the authors' SGD and Adam.

Authors: SGD lr 8.0, momentum 0.2 (PyTorch semantics: buf = m·buf + g,
p −= lr·buf), gradients clipped to global norm 0.25, lr halved after 3
evaluations without improvement. The halving is the loop's plateau rule
(`LoopConfig.plateau_patience`): the train state's `lr_scale` multiplies
every update, so the optimiser itself stays a plain optax transformation.
"""
from __future__ import annotations

import optax


def make_optimizer(name: str = "sgd", learning_rate: float = 8.0,
                   momentum: float = 0.2, clip_norm: float = 0.25,
                   b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8,
                   weight_decay: float = 0.0) -> optax.GradientTransformation:
  """Gradient clipping (if clip_norm > 0) followed by SGD-momentum or Adam(W)."""
  if name == "sgd":
    opt = optax.sgd(learning_rate, momentum=momentum or None)
  elif name == "adam":
    opt = (optax.adamw(learning_rate, b1, b2, eps, weight_decay=weight_decay)
           if weight_decay else optax.adam(learning_rate, b1, b2, eps))
  else:
    raise ValueError(f"optimizer {name!r} is not one of ['sgd', 'adam']")
  if clip_norm and clip_norm > 0:
    return optax.chain(optax.clip_by_global_norm(clip_norm), opt)
  return opt
