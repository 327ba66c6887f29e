"""The SQuAD reader of Clark & Gardner (2018, document-qa), which the GLoMo
paper's SQuAD model follows (§3: "a self-attention layer following the
bi-attention layer, along with multiple layers of RNNs"), with the GLoMo
transfer variants.

For a passage c (Tc words) and a question q (Tq words); d = 2·hidden:

  words        e = [GloVe(w) (fixed) ; CharCNN(chars of w)]       [B, T, E + F]
  (variants 'embeddings' / 'uniform': e = [GloVe(w) ; CharCNN ; gated], where
   [GloVe ; gated] = GraphTransfer(GloVe): the graphs mix the word vectors
   alone, as in the authors' reader (squad/model_t.py: `context_word` is
   mixed, gated and then joined by `context_ch`))          [B, T, E + F + E']
  (E' = transfer.features, default E)
  encoding     c̄, q̄ = vdrop(BiGRU(vdrop(e))), one GRU for both texts [B, T, d]
  (variant 'rnn': c̄ = vdrop(GraphTransfer(BiGRU(vdrop(e)))) = [c̄ ; gated], q̄ likewise)
  (passage_encoder 'focused': q̄ as above from the question alone; the
   passage is read by Ke et al.'s focused hierarchical encoder
   (`glomo_jax.focused.model.FocusedEncoder`, LSTMs `hidden` wide)
   conditioned on the question's mean state q̂ = mean_j q̄_j (real j):
   lower h^l_t = LSTM_l(vdrop(e)_t), gate p_t = σ(w_bᵀ LReLU(W_b [q' ⊙ h^l_t ;
   h^l_t ; q'] + b_b)) (q' = W_q q̂ + b_q), b_t ~ Bernoulli(p_t) in training
   (at evaluation `focused.test_gate`), upper h^u_t = LSTM_u(h^l_t) where b_t =
   1, carried where b_t = 0; c̄ = vdrop([h^l ; h^u]) [B, Tc, d], defined at
   every word (the pointers address every word; the upper state carries
   the question-focused reading of the opened words); with 'rnn' the
   GraphTransfer acts on [h^l ; h^u] as on the BiGRU's states; focused.kind
   'lstm2': b_t = 1 at every real word, no gate: the control on the same code)
  bi-attention s_ij = w1·c̄_i + w2·q̄_j + w3·(c̄_i ⊙ q̄_j) + b         [B, Tc, Tq]
               c2q_i = Σ_j softmax_j(s_ij) q̄_j
               q2c = Σ_i softmax_i(max_j s_ij) c̄_i                (one vector)
               g = ReLU(W [c̄ ; c2q ; c̄ ⊙ c2q ; c̄ ⊙ q2c])          [B, Tc, dense]
  self-attn    y = vdrop(BiGRU(vdrop(g)));  s_ij trilinear, i → i masked
               a_i = Σ_j softmax_j(s_ij) y_j
               g = g + ReLU(W [y ; a ; y ⊙ a])                   (residual)
  spans        m1 = BiGRU(vdrop(g));  start = w_s·m1
               m2 = BiGRU([g ; m1]);  end = w_e·m2  (the end reads the start RNN)

vdrop is variational dropout (one mask per sequence, shared over time).
The layer sequence is document-qa's `get_model` (docqa/scripts/
ablate_triviaqa.py, used by ablate_squad.py): embed_mapper, BiAttention
(TriLinear, q2c), match_encoder (FullyConnected, ResidualLayer around GRU +
StaticAttentionSelf + FullyConnected), BoundsPredictor(ChainBiMapper).
The focused encoder's gate gets no gradient from the span loss (b_t is
discrete): SquadTask trains it by REINFORCE (`GateObjective.loss`).
Not copied: their TruncatedNormal(0.05) GRU initialisation (Flax defaults
here) and zero vectors for words GloVe lacks (random ones here, as the
GLoMo task asks).
CharCNN: learned char embeddings (20), a width-5 convolution (100 filters,
'SAME' padding with zero vectors for absent characters), ReLU, max over the
word's characters. Softmaxes are over real words only; start / end logits at
padding are -1e30. Graphs are inputs under stop_gradient (the predictor
receives no gradient); passage and question each get their own graphs
and share one GraphTransfer.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from glomo_jax.focused.model import FocusedEncoder
from glomo_jax.squad.config import ReaderOptions
from glomo_jax.text import layers
from glomo_jax.transfer.options import variant_of

NEG = -1e30


class CharCNN(nn.Module):
  """Word vectors from characters: embed, convolve, ReLU, max over the word.

  chars: int [B, T, C] (0 = no character) → [B, T, filters]; a word without
  characters (padding) gives zeros."""
  num_chars: int
  char_dim: int = 20
  filters: int = 100
  width: int = 5
  dropout_rate: float = 0.2

  @nn.compact
  def __call__(self, chars: jax.Array, *, train: bool = False) -> jax.Array:
    b, t, c = chars.shape
    present = (chars > 0)[..., None]
    x = nn.Embed(self.num_chars, self.char_dim, name="embed",
                 embedding_init=nn.initializers.normal(0.05))(chars)
    x = nn.Dropout(self.dropout_rate, deterministic=not train)(x) * present
    x = nn.Conv(self.filters, (self.width,), padding="SAME", name="conv")(
        x.reshape(b * t, c, self.char_dim)).reshape(b, t, c, self.filters)
    x = jnp.where(present, nn.relu(x), 0.0)
    return jnp.max(x, axis=2)


class TriLinear(nn.Module):
  """s_ij = w1·x_i + w2·y_j + w3·(x_i ⊙ y_j) + b: x [B, Tx, d], y [B, Ty, d]
  → [B, Tx, Ty]."""

  @nn.compact
  def __call__(self, x: jax.Array, y: jax.Array) -> jax.Array:
    d = x.shape[-1]
    wx = nn.Dense(1, name="x")(x)[..., 0]
    wy = nn.Dense(1, use_bias=False, name="y")(y)[..., 0]
    w = self.param("product", nn.initializers.normal(1.0 / d ** 0.5), (d,))
    return wx[:, :, None] + wy[:, None, :] + jnp.einsum("bid,bjd->bij", x * w, y)


def bi_attention(s: jax.Array, c: jax.Array, c_mask: jax.Array, q: jax.Array,
                 q_mask: jax.Array) -> jax.Array:
  """[c ; c2q ; c ⊙ c2q ; c ⊙ q2c] (module docstring) of scores s [B, Tc, Tq];
  c [B, Tc, d], q [B, Tq, d] → [B, Tc, 4d]."""
  both = c_mask[:, :, None] & q_mask[:, None, :]
  c2q = jnp.einsum("bij,bjd->bid", layers.masked_softmax(s, both, axis=2), q)
  row_max = jnp.max(jnp.where(both, s, NEG), axis=2)              # [B, Tc]
  q2c = jnp.einsum("bi,bid->bd", layers.masked_softmax(row_max, c_mask), c)[:, None]
  return jnp.concatenate([c, c2q, c * c2q, c * q2c], axis=-1)


class Reading(NamedTuple):
  """What `SquadReader.read` gives.

  start, end: float32 [B, Tc] the span logits, -1e30 at padding.
  gate_logits: float32 [B, Tc] the focused passage encoder's gate logits ℓ_t
    (p_t = σ(ℓ_t)), None for the BiGRU.
  gates: float32 [B, Tc] its decisions b_t (0/1, 0 at padding), None for
    the BiGRU.
  """
  start: jax.Array
  end: jax.Array
  gate_logits: jax.Array | None = None
  gates: jax.Array | None = None


class SquadReader(nn.Module):
  """The document-qa reader (module docstring).

  Attributes:
    vocab_size, embedding_init: the fixed word table [V, E] (E: the
      options' embed_dim).
    num_chars: CharCNN's characters.
    options: the reader's sizes (`ReaderOptions`: embed_dim; char_dim,
      char_filters, char_width of the CharCNN; hidden: GRU width per
      direction, document-qa 100; dense: the ReLU layers' width, 200;
      dropout_rate: variational dropout, 0.2), the GraphTransfer's
      options (`transfer`) and the passage encoder (`passage_encoder`,
      `focused`); its oov_scale and glove_scale shape the word table
      before it gets here.
    variant: 'baseline', 'embeddings', 'rnn' or 'uniform'.
  """
  vocab_size: int
  num_chars: int
  options: ReaderOptions = ReaderOptions()
  embedding_init: Callable = nn.initializers.normal(0.1)
  variant: str = "baseline"

  def __call__(self, context, context_mask, context_chars, question, question_mask,
               question_chars, context_graphs=None, question_graphs=None, *,
               train: bool = False) -> tuple[jax.Array, jax.Array]:
    """Start and end logits of a batch of (passage, question) pairs: `read`'s
    (start, end)."""
    reading = self.read(context, context_mask, context_chars, question, question_mask,
                        question_chars, context_graphs, question_graphs, train=train)
    return reading.start, reading.end

  @nn.compact
  def read(self, context, context_mask, context_chars, question, question_mask,
           question_chars, context_graphs=None, question_graphs=None, *,
           train: bool = False) -> Reading:
    """The span logits of a batch of (passage, question) pairs, and the
    focused passage encoder's gates.

    Args:
      context: int [B, Tc] word ids; context_mask: bool [B, Tc] (a prefix);
        context_chars: int [B, Tc, C] character ids.
      question, question_mask, question_chars: the same for [B, Tq].
      context_graphs: float [B, 2L, K, Tc, Tc] ([.., target, source]);
        question_graphs: [B, 2L, K, Tq, Tq]: for variants 'embeddings' / 'rnn'.
      train: dropout on (needs a 'dropout' rng); the focused encoder's gates
        are sampled in training and decided by `focused.test_gate` otherwise
        (sampling needs a 'gate' rng).

    Returns:
      `Reading`: start, end float32 [B, Tc] (-1e30 at padding); the gate's
      logits and decisions [B, Tc] (focused passage encoder).
    """
    variant, o = variant_of(self.variant), self.options
    cm, qm = context_mask.astype(bool), question_mask.astype(bool)
    batch, tc, tq = context.shape[0], context.shape[1], question.shape[1]
    length = max(tc, tq)

    def pad(x):  # both texts as one batch of 2B rows of `length` (one RNN loop)
      return jnp.pad(x, [(0, 0), (0, length - x.shape[1])] + [(0, 0)] * (x.ndim - 2))
    pair = lambda a, b: jnp.concatenate([pad(a), pad(b)], axis=0)  # noqa: E731
    mask2 = pair(cm, qm)
    f2 = mask2[..., None].astype(jnp.float32)
    vdrop = lambda x: nn.Dropout(o.dropout_rate, broadcast_dims=(1,),  # noqa: E731
                                 deterministic=not train)(x)
    graphs = (None, None)
    if variant.reads_graphs:
      layers.check_graphs(context_graphs, cm, o.transfer.layers_for(), "context")
      layers.check_graphs(question_graphs, qm, o.transfer.layers_for(), "question")
      graphs = context_graphs, question_graphs
    transfer = o.transfer.layer(self.variant, o.dropout_rate)

    def transferred(x):  # one transfer, called on each text at its own length
      return pair(transfer(x[:batch, :tc], graphs[0], cm, train=train),
                  transfer(x[batch:, :tq], graphs[1], qm, train=train)) * f2

    words = layers.WordEmbedding(self.vocab_size, o.embed_dim, self.embedding_init,
                                 freeze=True, name="embed")(pair(context, question))
    chars = CharCNN(self.num_chars, o.char_dim, o.char_filters, o.char_width,
                    o.dropout_rate, name="chars")(pair(context_chars, question_chars),
                                                     train=train)
    x = jnp.concatenate([words, chars], axis=-1) * f2
    if variant.at == "inputs":  # [words ; chars ; gated(words)]
      x = jnp.concatenate([x, transferred(words * f2)[..., o.embed_dim:]], axis=-1)
    gate_logits = gates = None
    if o.is_focused:
      rnn_transfer = transfer if variant.at == "rnn" else None
      c, q, gate_logits, gates = self._focused(vdrop(x), cm, qm, batch, graphs, rnn_transfer,
                                               vdrop, train)
    else:
      x = layers.BiRNN(o.hidden, "gru", name="encoder")(vdrop(x), mask2)
      if variant.at == "rnn":
        x = transferred(x)
      x = vdrop(x)
      c, q = x[:batch, :tc], x[batch:, :tq]

    fc = mask2[:batch, :tc, None].astype(jnp.float32)
    s = TriLinear(name="bi_attention")(c, q)
    g = nn.relu(nn.Dense(o.dense, name="attended")(bi_attention(s, c, cm, q, qm))) * fc

    y = vdrop(layers.BiRNN(o.hidden, "gru", name="self_encoder")(vdrop(g), cm))
    allowed = cm[:, None, :] & cm[:, :, None] & ~jnp.eye(tc, dtype=bool)[None]
    a = jnp.einsum("bij,bjd->bid",
                   layers.masked_softmax(TriLinear(name="self_attention")(y, y), allowed), y)
    g = g + nn.relu(nn.Dense(o.dense, name="self_attended")(
        jnp.concatenate([y, a, y * a], axis=-1))) * fc
    g = vdrop(g)

    m1 = layers.BiRNN(o.hidden, "gru", name="start_encoder")(g, cm)
    m2 = layers.BiRNN(o.hidden, "gru", name="end_encoder")(
        jnp.concatenate([g, m1], axis=-1), cm)
    start = nn.Dense(1, name="start")(m1)[..., 0]
    end = nn.Dense(1, name="end")(m2)[..., 0]
    return Reading(jnp.where(cm, start, NEG).astype(jnp.float32),
                   jnp.where(cm, end, NEG).astype(jnp.float32), gate_logits, gates)

  def _focused(self, x, cm, qm, batch: int, graphs, transfer, vdrop, train: bool):
    """The focused passage encoder (module docstring): x [2B, T, F] both
    texts' dropped-out word features (passages first); cm [B, Tc], qm
    [B, Tq]; transfer: the 'rnn' variant's GraphTransfer or None.
    -> (c̄ [B, Tc, d'], q̄ [B, Tq, d'], gate logits [B, Tc], gates [B, Tc])."""
    o = self.options
    tc, tq = cm.shape[1], qm.shape[1]
    fc, fq = cm[..., None].astype(jnp.float32), qm[..., None].astype(jnp.float32)
    q = layers.BiRNN(o.hidden, "gru", name="encoder")(x[batch:, :tq], qm)
    if transfer is not None:
      q = transfer(q, graphs[1], qm, train=train) * fq
    q = vdrop(q)
    decide = "sample" if train else o.focused.test_gate
    encoded = FocusedEncoder(o.hidden, o.focused.kind, o.focused.gate_hidden, name="focused")(
        x[:batch, :tc], cm, layers.masked_pool(q, qm, ("mean",)), decide=decide,
        rng=self.make_rng("gate") if decide == "sample" else None)
    c = jnp.concatenate([encoded.lower, encoded.states], axis=-1) * fc
    if transfer is not None:
      c = transfer(c, graphs[0], cm, train=train) * fc
    return vdrop(c), q, encoded.gate_logits, encoded.readable
