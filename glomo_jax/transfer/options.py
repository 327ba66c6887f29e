"""What a downstream model transfers (its variant) and how (`TransferOptions`).

Variants, one word for all task models:
* 'baseline': no graph;
* 'uniform': the uniform-graph ablation (every unit averages all real
  units; the predictor's graphs are not read);
* text models (the one-text classifier, ESIM, the SQuAD reader): the
  predictor's graphs fused into the word embeddings ('embeddings') or into
  the first RNN layer's states ('rnn');
* the CIFAR ResNet: the pixel predictor's graphs fused into its input
  pixels ('glomo').

`VARIANTS` is the one registry every model, task and config consults:
whether a variant reads the predictor's graphs, and where its transfer sits.
"""
from __future__ import annotations

import dataclasses

import flax.linen as nn

from glomo_jax.transfer.layer import APPLY_AS, GraphTransfer



@dataclasses.dataclass(frozen=True)
class Variant:
  """What a variant does.

  Attributes:
    reads_graphs: the predictor's graphs are a model input (and the run
      needs a predictor export).
    at: where the model applies its `GraphTransfer`: None (no transfer),
      'inputs' (the word vectors, or the pixels) or 'rnn' (the first RNN
      layer's states).
  """
  reads_graphs: bool
  at: str | None

  @property
  def mode(self) -> str | None:
    """The `GraphTransfer` mode: 'glomo', 'uniform' or None (no layer)."""
    return None if self.at is None else ("glomo" if self.reads_graphs else "uniform")


VARIANTS = {"baseline": Variant(reads_graphs=False, at=None),
            "embeddings": Variant(reads_graphs=True, at="inputs"),
            "rnn": Variant(reads_graphs=True, at="rnn"),
            "uniform": Variant(reads_graphs=False, at="inputs"),
            "glomo": Variant(reads_graphs=True, at="inputs")}
TEXT_VARIANTS = ("baseline", "embeddings", "rnn", "uniform")
PIXEL_VARIANTS = ("baseline", "uniform", "glomo")
# the variants that read a predictor's graphs: embeddings, rnn, glomo
GRAPH_VARIANTS = tuple(name for name, v in VARIANTS.items() if v.reads_graphs)
DEFAULT_LAYERS = 3                                  # L without a predictor ('uniform', tests)


def check_variant(variant: str, variants=TEXT_VARIANTS) -> str:
  """`variant`, or ValueError naming the known ones."""
  if variant not in variants:
    raise ValueError(f"unknown variant {variant!r}: one of {list(variants)}")
  return variant


def variant_of(variant: str, variants=TEXT_VARIANTS) -> Variant:
  """The registry's `Variant` of `variant` (checked against `variants`)."""
  return VARIANTS[check_variant(variant, variants)]


@dataclasses.dataclass(frozen=True)
class TransferOptions:
  """The `GraphTransfer` a task model builds (`glomo_jax.transfer.layer`).

  Attributes:
    num_layers: L, the predictor's graph layers (its graphs have 2L); None:
      the predictor's, or 3 without one (`layers_for`).
    num_mixtures: mixtures per direction (authors: 2).
    conditioned: mixture weights from the features at each target position
      (authors' default) or free parameters.
    features: width of the gated part (None: the transferred features' width).
    apply_as: how the candidates reach the features: 'auto', 'candidates'
      or 'mixtures' (the same numbers to float rounding).
  """
  num_layers: int | None = None
  num_mixtures: int = 2
  conditioned: bool = True
  features: int | None = None
  apply_as: str = "auto"

  def check(self, where: str = "transfer") -> None:
    """Raises ValueError for a setting that cannot run."""
    if self.apply_as not in APPLY_AS:
      raise ValueError(f"unknown {where}.apply_as {self.apply_as!r}: one of "
                       f"{list(APPLY_AS)} ('auto' picks the cheaper for the shapes)")

  def layers_for(self, predictor_layers: int | None = None) -> int:
    """L: the predictor's when there is one (a configured num_layers must
    agree with it), else num_layers, else 3."""
    if predictor_layers is not None:
      if self.num_layers is not None and self.num_layers != predictor_layers:
        raise ValueError(f"transfer.num_layers={self.num_layers} but the predictor has "
                         f"L={predictor_layers} graph layers")
      return predictor_layers
    return self.num_layers or DEFAULT_LAYERS

  def for_predictor(self, predictor_layers: int | None) -> "TransferOptions":
    """These options with num_layers set (`layers_for`)."""
    return dataclasses.replace(self, num_layers=self.layers_for(predictor_layers))

  def layer(self, variant: str, dropout_rate: float = 0.0, name: str = "transfer"
            ) -> nn.Module | None:
    """The variant's `GraphTransfer` (mode 'uniform' or 'glomo', `Variant.mode`),
    or None for 'baseline'; `dropout_rate`: its locked dropout (the model's rate)."""
    mode = VARIANTS[variant].mode
    if mode is None:
      return None
    return GraphTransfer(mode=mode,
                         num_layers=self.layers_for(), num_mixtures=self.num_mixtures,
                         conditioned=self.conditioned, features=self.features,
                         dropout_rate=dropout_rate, apply_as=self.apply_as, name=name)


# A task config.json written before the graph-transfer fields became one
# `transfer` group reads into the current layout (`glomo_jax.config.moved_fields`).
TRANSFER_MOVED_FIELDS = {"transfer_layers": "transfer.num_layers",
                         "num_mixtures": "transfer.num_mixtures",
                         "conditioned": "transfer.conditioned",
                         "transfer_features": "transfer.features",
                         "graph_apply": "transfer.apply_as"}
