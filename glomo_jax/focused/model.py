"""The focused hierarchical encoder (Ke et al. 2018, "Focused Hierarchical
RNNs for Conditional Sequence Processing") and its one- and two-layer
baselines, on one code; and the picking task's reader on top of it.

`FocusedEncoder` reads token features x [B, T, D] (mask [B, T], right
padding) conditioned on a question vector q [B, Dq]:

  lower     h^l_t = LSTM_l(x_t, h^l_{t-1})                     every real token
  question  q' = q, or W_q q + b_q when Dq != H                  [B, H]
  gate      p_t = σ(w_bᵀ LReLU(W_b z_t + b_b)),  z_t = [q' ⊙ h^l_t, h^l_t, q']
            b_t ~ Bernoulli(p_t) ('sample') or 1[p_t ≥ ½] ('threshold');
            b_t = 0 at padding
  upper     (c^u_t, h^u_t) = LSTM_u(h^l_t, (c^u_{t-1}, h^u_{t-1}))  where b_t = 1,
            (c^u_t, h^u_t) = (c^u_{t-1}, h^u_{t-1})                 where b_t = 0

Kinds: 'fhe' (the above; what attention may read: h^u_t where b_t = 1, the
"unique states"), 'lstm2' (b_t = 1 at every real token: a two-layer LSTM,
every h^u_t readable), 'lstm1' (no upper layer and no gate: every h^l_t).
LReLU's negative slope is flax's 0.01; the LSTMs' forget-gate biases start
at 1. The encoder knows nothing of the picking task: a passage encoder
conditioned on a question (SQuAD's) reuses it as is.

`PickingReader` answers the picking task (module `picking`): digit d_t at
1-based position t is x_t = E d_t (with `positions`, [E d_t, t / s]; with
`gate_positions` t / s joins the gate's z_t alone) and
the question k is q = W_k (k / s) + b_k (s: `position_scale`): a scalar, so
any k has an encoding, and the lower LSTM reads the digits, not k. Then
attention conditioned on the question over the readable states,
e_t = vᵀ tanh(W_a h_t + U_a q + b_a), α = softmax over readable t,
c = Σ_t α_t h_t, and the answer p(A | Q, P) = softmax(W_o LReLU(W_c [c; q]
+ b_c) + b_o) over the 10 digits. Its oracle gates (`ORACLES`, the
controls whose gate is known to be right): 'prefix' opens every digit the
answer counts, b_t = 1[t ≤ k]; 'kth' only the k-th, b_t = 1[t = k], where
the lower LSTM's count is whole.
"""
from __future__ import annotations

from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from glomo_jax.text.layers import lstm_update, masked_softmax

KINDS = ("fhe", "lstm1", "lstm2")
DECISIONS = ("sample", "threshold")
# the picking task's oracle gates, known to be right: b_t = 1[t <= k] ('prefix':
# every digit the answer counts) or b_t = 1[t = k] ('kth': where the count is whole)
ORACLES = ("prefix", "kth")
NUM_DIGITS = 10


def evaluation_rng(seed: int, first_index: jax.Array) -> jax.Array:
  """The key of gates sampled at evaluation ('sample'): the run's seed with
  the batch's first example index folded in, so a batch gets the same gates
  in every evaluation (and a rerun)."""
  return jax.random.fold_in(jax.random.key(seed), first_index)


def _forget_bias_one(key, shape, dtype=jnp.float32):
  """LSTM gate biases [4H] in the order (i, f, g, o): 1 for f, 0 elsewhere."""
  del key
  h = shape[0] // 4
  return jnp.zeros(shape, dtype).at[h:2 * h].set(1.0)


class GatedLSTM(nn.Module):
  """An LSTM over a sequence that updates its state only where `update` is
  set and carries it unchanged (bit for bit) elsewhere; the state starts at 0.

  Parameters: 'input' (Dense D -> 4H, gates (i, f, g, o), forget bias 1) and
  'hidden' [H, 4H] (orthogonal); math: `glomo_jax.text.layers.lstm_update`.
  """
  features: int

  @nn.compact
  def __call__(self, x: jax.Array, update: jax.Array) -> jax.Array:
    """x: [B, T, D]; update: [B, T] (bool or 0/1) -> h [B, T, H], the state
    after step t (the carried one where update is 0)."""
    h_dim = self.features
    gates = nn.Dense(4 * h_dim, bias_init=_forget_bias_one, name="input")(x)
    wh = self.param("hidden", nn.initializers.orthogonal(), (h_dim, 4 * h_dim))

    def step(state, inputs):  # state (c, h) [B, H]; inputs ([B, 4H], [B, 1])
      g, u = inputs
      c, h = state
      c_new, h_new = lstm_update(g + h @ wh, c)
      c, h = jnp.where(u, c_new, c), jnp.where(u, h_new, h)
      return (c, h), h
    zeros = jnp.zeros((x.shape[0], h_dim), gates.dtype)
    steps = (jnp.moveaxis(gates, 1, 0), jnp.moveaxis(update.astype(bool), 1, 0)[..., None])
    _, hs = jax.lax.scan(step, (zeros, zeros), steps)
    return jnp.moveaxis(hs, 0, 1)


class BoundaryGate(nn.Module):
  """The boundary gate's logit w_bᵀ LReLU(W_b z_t + b_b), z_t = [q ⊙ h_t, h_t, q]
  (so p_t = σ(logit)), with `extra` features appended to z_t when given.
  Parameters: 'hidden' (W_b, b_b), 'out' (w_b, no bias)."""
  hidden: int

  @nn.compact
  def __call__(self, h: jax.Array, q: jax.Array, extra: jax.Array | None = None) -> jax.Array:
    """h: [B, T, H] lower states; q: [B, H]; extra: [B, T, E] or None ->
    logits [B, T]."""
    qt = jnp.broadcast_to(q[:, None, :], h.shape)
    z = jnp.concatenate([qt * h, h, qt] + ([] if extra is None else [extra.astype(h.dtype)]),
                        axis=-1)
    a = nn.leaky_relu(nn.Dense(self.hidden, name="hidden")(z))
    return nn.Dense(1, use_bias=False, name="out")(a)[..., 0]


class Encoded(NamedTuple):
  """What `FocusedEncoder` gives.

  states: [B, T, H] the states a reader attends over (upper; lstm1: lower).
  readable: [B, T] float 0/1, where they may be read: real tokens where the
    gate is open (the upper layer updated there); every real token for the
    baselines. The share of real tokens readable is the gate openness.
  gate_logits: [B, T] the gate's logits ('fhe'), else None.
  lower: [B, T, H] the lower LSTM's states, defined at every real token
    (a reader that must address every token reads them beside `states`:
    SQuAD's focused passage encoder).
  """
  states: jax.Array
  readable: jax.Array
  gate_logits: jax.Array | None
  lower: jax.Array


class FocusedEncoder(nn.Module):
  """The module docstring's encoder.

  Attributes:
    features: H, both LSTMs' width.
    kind: 'fhe', 'lstm1' or 'lstm2'.
    gate_hidden: width of the gate's hidden layer (W_b).
    reinforce_encoder: the gate reads h^l_t and q' as they are, so
      REINFORCE's gradient reaches the lower LSTM and the question encoding
      (True, the slides' model as written); False: through stop_gradient,
      so they learn from the reader's loss alone and the gate's own weights
      alone from the reward.
  """
  features: int
  kind: str = "fhe"
  gate_hidden: int = 32
  reinforce_encoder: bool = True

  @nn.compact
  def __call__(self, x: jax.Array, mask: jax.Array, q: jax.Array, *,
               decide: str = "threshold", rng: jax.Array | None = None,
               given: jax.Array | None = None,
               gate_features: jax.Array | None = None) -> Encoded:
    """x: [B, T, D] token features; mask: [B, T]; q: [B, Dq] the question
    vector; decide: how b_t is drawn, 'sample' (needs `rng`), 'threshold',
    or 'given' (b_t = `given` [B, T], 0/1: a gate from outside, e.g. an
    oracle; the gate is not computed and gate_logits is None);
    gate_features: [B, T, E] appended to the gate's z_t alone (e.g. each
    token's position), or None (the slides' gate)."""
    if self.kind not in KINDS:
      raise ValueError(f"unknown encoder kind {self.kind!r}: one of {list(KINDS)}")
    if decide not in DECISIONS + ("given",):
      raise ValueError(f"unknown gate decision {decide!r}: one of {list(DECISIONS)} or 'given'")
    if (decide == "given") != (given is not None):
      raise ValueError("given gates go with decide='given' and only with it")
    real = mask.astype(bool)
    lower = GatedLSTM(self.features, name="lower")(x, real)
    if self.kind == "lstm1":
      return Encoded(lower, real.astype(lower.dtype), None, lower)
    logits = None
    opened = real
    if self.kind == "fhe" and decide == "given":
      opened = given.astype(bool) & real
    elif self.kind == "fhe":
      if q.shape[-1] != self.features:
        q = nn.Dense(self.features, name="question")(q)
      seen = (lower, q) if self.reinforce_encoder else jax.lax.stop_gradient((lower, q))
      logits = BoundaryGate(self.gate_hidden, name="gate")(*seen, gate_features)
      if decide == "sample":
        if rng is None:
          raise ValueError("sampled gates need an rng")
        opened = jax.random.bernoulli(rng, jax.nn.sigmoid(logits)) & real
      else:
        opened = (logits >= 0) & real         # p_t >= 1/2
    upper = GatedLSTM(self.features, name="upper")(lower, opened)
    return Encoded(upper, opened.astype(upper.dtype), logits, lower)


class QuestionAttention(nn.Module):
  """Attention conditioned on a question: e_t = vᵀ tanh(W_a h_t + U_a q + b_a),
  α = softmax over the readable positions (all 0 when none is).

  Attributes: hidden: the width of W_a, U_a."""
  hidden: int

  @nn.compact
  def __call__(self, h: jax.Array, readable: jax.Array, q: jax.Array
               ) -> tuple[jax.Array, jax.Array]:
    """h: [B, T, H]; readable: [B, T]; q: [B, Dq] -> (context c [B, H],
    weights α [B, T])."""
    keys = nn.Dense(self.hidden, name="keys")(h)
    query = nn.Dense(self.hidden, use_bias=False, name="query")(q)
    scores = nn.Dense(1, use_bias=False, name="score")(jnp.tanh(keys + query[:, None]))[..., 0]
    alpha = masked_softmax(scores, readable > 0)
    return jnp.einsum("bt,bth->bh", alpha, h), alpha


class Answer(NamedTuple):
  """What `PickingReader` gives: logits [B, 10] of the answer; the
  encoder's readable [B, T] and gate_logits [B, T] (or None); attention
  α [B, T]; mask [B, T] of the real digits."""
  logits: jax.Array
  readable: jax.Array
  gate_logits: jax.Array | None
  attention: jax.Array
  mask: jax.Array


class PickingReader(nn.Module):
  """The module docstring's picking reader.

  Attributes:
    kind: the encoder's ('fhe', 'lstm1', 'lstm2').
    hidden: H (LSTMs, question vector, answer layer).
    digit_dim: width of the digit embeddings E.
    gate_hidden, attention_hidden: widths of the gate's and the attention's
      hidden layers.
    position_scale: s, the scale of k (and of the positions).
    positions: append t / s to each digit's features (a departure from the
      seed, whose readers see tokens only: the lower LSTM must count).
    reinforce_encoder: `FocusedEncoder`'s.
    gate_positions: append t / s to the gate's z_t alone ('fhe'; a
      departure too): the gate knows where it is, the LSTMs and the
      attention still read the digits alone.
  """
  kind: str = "fhe"
  hidden: int = 64
  digit_dim: int = 16
  gate_hidden: int = 32
  attention_hidden: int = 32
  position_scale: float = 100.0
  positions: bool = False
  reinforce_encoder: bool = True
  gate_positions: bool = False

  @staticmethod
  def example_inputs() -> tuple[jax.Array, jax.Array, jax.Array]:
    """(digits, length, k) of one 2-digit sequence: inputs to `init` with."""
    one = jnp.ones((1,), jnp.int32)
    return jnp.zeros((1, 2), jnp.int32), one, one

  @nn.compact
  def __call__(self, digits: jax.Array, length: jax.Array, k: jax.Array, *,
               decide: str = "threshold", rng: jax.Array | None = None) -> Answer:
    """digits: int [B, T] (anything at padding); length: int [B] real
    digits; k: int [B], the question; decide: 'sample' (needs `rng`) or
    'threshold' (`FocusedEncoder`), or an oracle gate of `ORACLES` ('fhe'):
    'prefix' b_t = 1[t ≤ k], 'kth' b_t = 1[t = k]."""
    if decide not in DECISIONS + ORACLES:
      raise ValueError(f"unknown gate decision {decide!r}: one of {list(DECISIONS + ORACLES)}")
    t = jnp.arange(1, digits.shape[1] + 1, dtype=jnp.float32)
    mask = t[None] <= length[:, None]
    given = None
    if decide in ORACLES:
      kf = k.astype(jnp.float32)[:, None]
      given = (t[None] <= kf) if decide == "prefix" else (t[None] == kf)
      decide = "given"
    scale = jnp.float32(self.position_scale)
    x = nn.Embed(NUM_DIGITS, self.digit_dim, name="digits")(jnp.clip(digits, 0, 9))
    where = jnp.broadcast_to((t / scale)[None, :, None], digits.shape + (1,)).astype(x.dtype)
    if self.positions:
      x = jnp.concatenate([x, where], axis=-1)
    q = nn.Dense(self.hidden, name="question")((k.astype(jnp.float32) / scale)[:, None])
    encoded = FocusedEncoder(self.hidden, self.kind, self.gate_hidden, self.reinforce_encoder,
                             name="encoder")(
        x, mask, q, decide=decide, rng=rng, given=given,
        gate_features=where if self.gate_positions else None)
    context, alpha = QuestionAttention(self.attention_hidden, name="attention")(
        encoded.states, encoded.readable, q)
    hidden = nn.leaky_relu(nn.Dense(self.hidden, name="answer_hidden")(
        jnp.concatenate([context, q], axis=-1)))
    logits = nn.Dense(NUM_DIGITS, name="answer")(hidden)
    return Answer(logits, encoded.readable, encoded.gate_logits, alpha, mask)
