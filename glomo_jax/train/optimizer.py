"""The one optimiser factory of every run kind: pretraining (the authors' SGD,
Adam) and downstream tasks (Adam, Adadelta, SGD with Nesterov momentum).

Authors' pretraining: SGD lr 8.0, momentum 0.2 (PyTorch semantics: buf =
m·buf + g, p −= lr·buf), gradients clipped to global norm 0.25, lr halved
after 3 evaluations without improvement. The halving is the loop's plateau
rule (`LoopConfig.plateau_patience`): the train state's `lr_scale` multiplies
every update, so the optimiser itself stays a plain optax transformation.
"""
from __future__ import annotations

from typing import Callable

import optax

OPTIMIZERS = ("sgd", "adam", "adadelta")
WEIGHT_DECAY = ("decoupled", "l2")


def make_optimizer(name: str = "sgd", learning_rate: float | Callable = 8.0, *,
                   momentum: float = 0.2, nesterov: bool = False,
                   clip_norm: float | None = 0.25, weight_decay: float = 0.0,
                   decay: str = "decoupled", b1: float = 0.9, b2: float = 0.999,
                   eps: float = 1e-8, always_chain: bool = True
                   ) -> optax.GradientTransformation:
  """Global-norm clipping (clip_norm > 0), L2 weight decay (decay 'l2'),
  then the optimiser: 'sgd' (momentum, optionally Nesterov; 0: none), 'adam'
  (b1, b2, eps; AdamW with a 'decoupled' weight_decay) or 'adadelta'
  (optax's defaults).

  learning_rate: a number or an optax schedule (step -> rate).
  always_chain: False returns the bare optimiser when nothing comes before it
    (the layout of the pretraining state's checkpoints; downstream runs keep
    a chain of one).
  weight_decay: 0 for none; 'decoupled' (AdamW's: the parameters shrink
    apart from the gradient; 'adam' only) or 'l2' (weight_decay · p added to
    the gradients before the optimiser, any optimiser: the CIFAR recipe).
  """
  if name not in OPTIMIZERS:
    raise ValueError(f"optimizer {name!r} is not one of {list(OPTIMIZERS)}")
  if decay not in WEIGHT_DECAY:
    raise ValueError(f"weight decay {decay!r} is not one of {list(WEIGHT_DECAY)}")
  decoupled = bool(weight_decay) and decay == "decoupled"
  if decoupled and name != "adam":
    raise ValueError(f"decoupled weight decay is AdamW's: optimizer {name!r} takes "
                     "L2 weight decay, or none")
  if name == "sgd":
    opt = optax.sgd(learning_rate, momentum=momentum or None, nesterov=nesterov)
  elif name == "adam":
    opt = (optax.adamw(learning_rate, b1, b2, eps, weight_decay=weight_decay)
           if decoupled else optax.adam(learning_rate, b1, b2, eps))
  else:
    opt = optax.adadelta(learning_rate)
  clip = [optax.clip_by_global_norm(clip_norm)] if clip_norm and clip_norm > 0 else []
  l2 = [optax.add_decayed_weights(weight_decay)] if weight_decay and decay == "l2" else []
  if not (clip or l2 or always_chain):
    return opt
  return optax.chain(*clip, *l2, opt)
