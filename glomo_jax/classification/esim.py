"""ESIM (Chen et al. 2017, "Enhanced LSTM for Natural Language Inference")
for MNLI / SNLI, plus the GLoMo paper's self-attention layer after the
inference composition, with the GLoMo transfer variants.

For premise a (length Ta) and hypothesis b (Tb); one set of weights serves
both sentences at every step:

  input encoding    ā = BiLSTM(E a)                   [B, Ta, 2H]  (b̄ likewise)
  soft alignment    e_ij = ā_i · b̄_j                  [B, Ta, Tb]
                    ã_i = Σ_j softmax_j(e_ij) b̄_j     over real j   (`soft_align`)
                    b̃_j = Σ_i softmax_i(e_ij) ā_i     over real i
  enhancement       m_a = ReLU(W [ā; ã; ā − ã; ā ⊙ ã]) [B, Ta, H]  (ESIM's F)
  composition       v_a = BiLSTM(m_a)                  [B, Ta, 2H]
  self-attention    v_a = SelfAttention(v_a)           [B, Ta, 2H]  (the paper's
                    addition; residual, masked; `self_attention=False` drops it)
  pooling           v = [mean v_a; max v_a; mean v_b; max v_b]  [B, 8H], masked
  classifier        y = W2 tanh(W1 v + b1) + b2        [B, 3]     (MLP, tanh)

ESIM's defaults: H = 300, dropout 0.5 (on the embeddings, the enhancement
output and the MLP's inputs), Adam 4e-4, batch 32, gradient norm clip 10.

GLoMo variants (`variant`), each applied to premise and hypothesis separately
with their own graphs and one shared `GraphTransfer` (built from `transfer`):
* 'embeddings': on the embeddings, before the input-encoding BiLSTM
  (the paper's MNLI result).
* 'rnn': on the input-encoding BiLSTM's states; a second input-encoding
  BiLSTM then reads the fused states [B, T, 4H + F] so that ā stays 2H wide.
  (The alignment therefore uses the second layer's states.) Its baseline of
  the same depth is variant 'baseline' with rnn_layers=2 (two input-encoding
  BiLSTMs, the second reading the first's states).
* 'uniform': the uniform-graph ablation on the embeddings.
Graphs are inputs (no gradient reaches the predictor). The transfer reads
clean features and its output is dropped where the embeddings would be; its
own locked dropout (same rate) covers the mixture weights' and the gate's
inputs, as in the authors' code.

Premise and hypothesis share every layer before the alignment and after it,
so the two sentences are padded to max(Ta, Tb) and run as one batch of 2B
(one RNN loop instead of two; padding cannot reach real positions, so this
changes no output).
"""
from __future__ import annotations

from typing import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp

from glomo_jax.text import layers
from glomo_jax.transfer.options import TransferOptions, variant_of


def _pad_time(x: jax.Array, length: int) -> jax.Array:
  """Zero-pads axis 1 of x to `length`."""
  return jnp.pad(x, [(0, 0), (0, length - x.shape[1])] + [(0, 0)] * (x.ndim - 2))


def _pad_square(graphs: jax.Array, length: int) -> jax.Array:
  """Zero-pads the last two axes of [B, 2L, K, T, T] to `length`."""
  extra = length - graphs.shape[-1]
  return jnp.pad(graphs, [(0, 0)] * (graphs.ndim - 2) + [(0, extra), (0, extra)])


def soft_align(a: jax.Array, a_mask: jax.Array, b: jax.Array, b_mask: jax.Array
               ) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
  """ESIM's soft alignment between two encoded sentences.

  Args:
    a: [B, Ta, d]; a_mask: [B, Ta]; b: [B, Tb, d]; b_mask: [B, Tb].

  Returns:
    ã [B, Ta, d] (each premise word's summary of the hypothesis),
    b̃ [B, Tb, d],
    attention_a [B, Ta, Tb]: row i = weights of a_i over b's real words (sums
      to 1 over them; 0 on padding columns; all-zero rows at a's padding),
    attention_b [B, Tb, Ta]: likewise for b over a.
  """
  am = a_mask.astype(bool)
  bm = b_mask.astype(bool)
  scores = jnp.einsum("bid,bjd->bij", a, b)
  both = am[:, :, None] & bm[:, None, :]
  attention_a = layers.masked_softmax(scores, both, axis=2)
  attention_b = jnp.swapaxes(layers.masked_softmax(scores, both, axis=1), 1, 2)
  a_tilde = jnp.einsum("bij,bjd->bid", attention_a, b)
  b_tilde = jnp.einsum("bji,bid->bjd", attention_b, a)
  return a_tilde, b_tilde, attention_a, attention_b


class ESIM(nn.Module):
  """ESIM + self-attention NLI classifier (module docstring).

  Attributes:
    vocab_size: embedding rows.
    embed_dim: E (100 for glove.6B.100d; ESIM used 300-d GloVe 840B).
    hidden: H (ESIM: 300).
    num_classes: 3.
    dropout_rate: ESIM: 0.5.
    self_attention: the self-attention layer after the composition.
    rnn_layers: input-encoding BiLSTMs, 1 or 2; None = 1, or 2 for variant
      'rnn' (which needs 2: the graphs go between them).
    embedding_init, freeze_embeddings: as in TextClassifier.
    variant: 'baseline', 'embeddings', 'rnn' or 'uniform'.
    transfer: the GraphTransfer's options.
  """
  vocab_size: int
  embed_dim: int = 100
  hidden: int = 300
  num_classes: int = 3
  dropout_rate: float = 0.5
  self_attention: bool = True
  rnn_layers: int | None = None
  embedding_init: Callable = nn.initializers.normal(0.1)
  freeze_embeddings: bool = False
  variant: str = "baseline"
  transfer: TransferOptions = TransferOptions()

  @nn.compact
  def __call__(self, premise: jax.Array, premise_mask: jax.Array,
               hypothesis: jax.Array, hypothesis_mask: jax.Array,
               premise_graphs: jax.Array | None = None,
               hypothesis_graphs: jax.Array | None = None, *, train: bool = False
               ) -> jax.Array:
    """Logits of a batch of pairs.

    Args:
      premise: int [B, Ta] word ids; premise_mask: [B, Ta] (prefix of each row).
      hypothesis: int [B, Tb]; hypothesis_mask: [B, Tb].
      premise_graphs: float [B, 2L, K, Ta, Ta]; hypothesis_graphs:
        [B, 2L, K, Tb, Tb]; needed for variants 'embeddings' and 'rnn'.
      train: dropout on (needs a 'dropout' rng).

    Returns:
      float32 [B, num_classes] logits. The alignment weights are sown as
      intermediates 'attention_premise' [B, Ta, Tb] and
      'attention_hypothesis' [B, Tb, Ta].
    """
    variant = variant_of(self.variant)
    am, bm = premise_mask.astype(bool), hypothesis_mask.astype(bool)
    drop = lambda x: nn.Dropout(self.dropout_rate, deterministic=not train)(x)  # noqa: E731
    ga = gb = None
    if variant.reads_graphs:
      num_layers = self.transfer.layers_for()
      layers.check_graphs(premise_graphs, am, num_layers, "premise")
      layers.check_graphs(hypothesis_graphs, bm, num_layers, "hypothesis")
      ga = jax.lax.stop_gradient(jnp.asarray(premise_graphs, jnp.float32))
      gb = jax.lax.stop_gradient(jnp.asarray(hypothesis_graphs, jnp.float32))
    transfer = self.transfer.layer(self.variant, self.dropout_rate)

    batch, ta, tb = premise.shape[0], premise.shape[1], hypothesis.shape[1]
    length = max(ta, tb)
    pair = lambda xa, xb: jnp.concatenate(  # noqa: E731
        [_pad_time(xa, length), _pad_time(xb, length)], axis=0)
    m2 = pair(am, bm)                                    # [2B, T]
    f2 = m2[..., None].astype(jnp.float32)
    g2 = None if ga is None else jnp.concatenate(
        [_pad_square(ga, length), _pad_square(gb, length)], axis=0)

    embed = layers.WordEmbedding(self.vocab_size, self.embed_dim, self.embedding_init,
                                 self.freeze_embeddings, name="embed")
    x = embed(pair(premise, hypothesis)) * f2            # [2B, T, E]
    if variant.at == "inputs":
      x = transfer(x, g2, m2, train=train)               # clean features in
    x = drop(x) * f2

    # input encoding
    x = layers.BiRNN(self.hidden, "lstm", name="encoder")(x, m2)
    depth = self.rnn_layers or (2 if variant.at == "rnn" else 1)
    if depth not in (1, 2) or (variant.at == "rnn" and depth != 2):
      raise ValueError(f"ESIM has 1 or 2 input-encoding BiLSTMs (2 for variant 'rnn'), "
                       f"got rnn_layers={self.rnn_layers}")
    if variant.at == "rnn":
      x = layers.BiRNN(self.hidden, "lstm", name="encoder_2")(
          transfer(x, g2, m2, train=train) * f2, m2)
    elif depth == 2:
      x = layers.BiRNN(self.hidden, "lstm", name="encoder_2")(x, m2)
    a_bar, b_bar = x[:batch, :ta], x[batch:, :tb]

    # local inference
    a_tilde, b_tilde, attention_a, attention_b = soft_align(a_bar, am, b_bar, bm)
    self.sow("intermediates", "attention_premise", attention_a)
    self.sow("intermediates", "attention_hypothesis", attention_b)
    m = pair(jnp.concatenate([a_bar, a_tilde, a_bar - a_tilde, a_bar * a_tilde], -1),
             jnp.concatenate([b_bar, b_tilde, b_bar - b_tilde, b_bar * b_tilde], -1))
    m = drop(nn.relu(nn.Dense(self.hidden, name="projection")(m))) * f2

    # inference composition (+ self-attention)
    v2 = layers.BiRNN(self.hidden, "lstm", name="composition")(m, m2)
    if self.self_attention:
      v2 = layers.SelfAttention(name="self_attention")(v2, m2, train=train)
    va, vb = v2[:batch, :ta], v2[batch:, :tb]

    v = jnp.concatenate([layers.masked_pool(va, am, ("mean", "max")),
                         layers.masked_pool(vb, bm, ("mean", "max"))], axis=-1)
    v = nn.tanh(nn.Dense(self.hidden, name="mlp_hidden")(drop(v)))
    return nn.Dense(self.num_classes, name="mlp_out")(drop(v))
