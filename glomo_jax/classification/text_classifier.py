"""The one-text classifier: the paper's IMDB sentiment classifier ("RNNs,
linear layers and self-attention" on GloVe, §3.2), with the GLoMo transfer
variants; every one-text task uses it (IMDB, SST-2, agreement).

Baseline (variant 'baseline'), for one text of W words:

  e  = Embedding(ids)                 [B, W, E]   GloVe init; frozen or trained
  h  = BiGRU(e)                       [B, W, 2H]  (rnn_layers stacked BiGRUs)
  h  = ReLU(Dense(H)(h))              [B, W, H]   the "linear" layer
  h  = SelfAttention(h)               [B, W, H]   residual, masked (layers.py)
  p  = [max_t h ; mean_t h]           [B, 2H]     over real words (`pooling`)
  y  = Dense(num_classes)(p)          [B, C]      logits

GLoMo variants (`variant`), with a `GraphTransfer` (glomo_jax/transfer/layer.py,
built from `transfer`, a `TransferOptions`) that maps H [B, W, d] →
[H ; gated(H, HM)] [B, W, d + F]:
* 'embeddings': GraphTransfer(mode='glomo') on e, before the first BiGRU
  (the paper's "GLoMo on embeddings", its IMDB result).
* 'rnn': GraphTransfer(mode='glomo') on the first BiGRU layer's states
  [B, W, 2H]; a second BiGRU layer then reads the fused states (the transfer
  needs a layer after it). The model then has at least 2 BiGRU layers
  (`rnn_layers` defaults to 2 for this variant); compare it with
  variant 'baseline', rnn_layers=2.
* 'uniform': GraphTransfer(mode='uniform') on e: the "uniform graph" ablation
  (every word averages all real words; no graphs needed).
Graphs are inputs ([B, 2L, K, W, W], word-level, from
`glomo_jax.graphs.unit_graphs.word_graphs`): no gradient reaches the predictor.

Dropout (`dropout_rate`) is applied to the embeddings, to each BiGRU's
output, inside the self-attention and before the classifier. The graph
transfer reads clean features, as the authors' does: its output [e ; gated]
is dropped where e alone would be, and inside it the same rate drops, with
locked masks, only the inputs of the mixture weights and of the gate
(`glomo_jax.transfer.layer`).
"""
from __future__ import annotations

from typing import Callable, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from glomo_jax.text import layers
from glomo_jax.transfer.options import TransferOptions, variant_of


class TextClassifier(nn.Module):
  """RNN + linear + self-attention text classifier (module docstring).

  Attributes:
    vocab_size: embedding rows (Vocabulary.size).
    embed_dim: E (100 for glove.6B.100d).
    hidden: H, the BiGRU width per direction and the linear layer's width.
    num_classes: C.
    rnn_layers: stacked BiGRU layers; None = 1, or 2 for variant 'rnn'.
    pooling: any of 'max', 'mean'.
    dropout_rate: see module docstring.
    embedding_init: flax initializer of the table (e.g.
      `layers.embedding_initializer(glove_matrix)`).
    freeze_embeddings: no gradient to the table.
    variant: 'baseline', 'embeddings', 'rnn' or 'uniform'.
    transfer: the GraphTransfer's options (its num_layers: L of the graph
      predictor, whose graphs have 2L layers).
  """
  vocab_size: int
  embed_dim: int = 100
  hidden: int = 128
  num_classes: int = 2
  rnn_layers: int | None = None
  pooling: Sequence[str] = ("max", "mean")
  dropout_rate: float = 0.2
  embedding_init: Callable = nn.initializers.normal(0.1)
  freeze_embeddings: bool = False
  variant: str = "baseline"
  transfer: TransferOptions = TransferOptions()

  def num_rnn_layers(self) -> int:
    if self.rnn_layers is None:
      return 2 if variant_of(self.variant).at == "rnn" else 1
    if variant_of(self.variant).at == "rnn" and self.rnn_layers < 2:
      raise ValueError("variant 'rnn' fuses graphs into the first BiGRU's states and "
                       f"needs rnn_layers >= 2, got {self.rnn_layers}")
    return self.rnn_layers

  @nn.compact
  def __call__(self, text: jax.Array, text_mask: jax.Array,
               text_graphs: jax.Array | None = None, *, train: bool = False
               ) -> jax.Array:
    """Logits of a batch.

    Args:
      text: int [B, W] word ids (0 = padding).
      text_mask: [B, W], True for real words (a prefix of each row).
      text_graphs: float [B, 2L, K, W, W] word-level graphs (target, source),
        needed for variants 'embeddings' and 'rnn', ignored otherwise.
      train: dropout on (needs a 'dropout' rng).

    Returns:
      float32 [B, num_classes] logits.
    """
    variant = variant_of(self.variant)
    mask = text_mask.astype(bool)
    fmask = mask[..., None].astype(jnp.float32)
    drop = lambda x: nn.Dropout(self.dropout_rate, deterministic=not train)(x)  # noqa: E731
    if variant.reads_graphs:
      layers.check_graphs(text_graphs, mask, self.transfer.layers_for(), "text")
      text_graphs = jax.lax.stop_gradient(jnp.asarray(text_graphs, jnp.float32))
    transfer = self.transfer.layer(self.variant, self.dropout_rate)

    x = layers.WordEmbedding(self.vocab_size, self.embed_dim, self.embedding_init,
                             self.freeze_embeddings, name="embed")(text)
    if variant.at == "inputs":
      x = transfer(x, text_graphs if variant.reads_graphs else None, mask, train=train)
    x = drop(x) * fmask

    for layer in range(self.num_rnn_layers()):
      x = layers.BiRNN(self.hidden, "gru", name=f"rnn_{layer}")(x, mask)
      if layer == 0 and variant.at == "rnn":
        x = transfer(x, text_graphs, mask, train=train) * fmask
      x = drop(x)

    h = nn.relu(nn.Dense(self.hidden, name="linear")(x)) * fmask
    h = layers.SelfAttention(dropout_rate=self.dropout_rate, name="self_attention")(
        h, mask, train=train)
    pooled = drop(layers.masked_pool(h, mask, self.pooling))
    return nn.Dense(self.num_classes, name="classifier")(pooled)
