"""The focused encoder's training objective (Ke et al. 2018): the answer's
log-likelihood for the network, REINFORCE for the boundary gate.

For example i of a batch (weight w_i, real length T_i, gates b_i sampled
from π(b_t = 1) = p_t = σ(ℓ_t)):

  reward     R_i = log p(A_i | Q_i, P_i) − β ReLU(Σ_t b_it − γ T_i)
  baseline   B_i = Σ_{j≠i} w_j R_j / Σ_{j≠i} w_j   (the other examples' mean
             reward: stateless, so a resumed run is exact; 0 with no other)
             or, with S ≥ 2 gate samples of each example (`samples`: the
             batch's rows are S copies of its examples, sample-major), the
             mean reward of the example's other S − 1 samples, which takes
             the example's difficulty out of R − B
  loss       L = −Σ_i w_i log p(A_i | Q_i, P_i) / Σ_i w_i
                 − Σ_i w_i (R_i − B_i) log π(b_i) / Σ_i w_i
                 + λ_H Σ_i w_i Σ_t [p_t log p_t + (1 − p_t) log(1 − p_t)] / Σ_i w_i T_i

R and B are constants of the gradient (stop_gradient), so the second term's
gradient is REINFORCE's −E[(R − B) ∇ log π(b)]: the gate's own weights learn
from the reward (and the entropy term) only, the lower LSTM and the question
encoding, which the gate reads, from the reward and the log-likelihood
(the log-likelihood alone when `FocusedEncoder.reinforce_encoder` is off), and
the rest of the network (whose gates are discrete) from the log-likelihood
only. The sparsity cost G = ReLU(Σ_t b_t − γT) lies in the reward because it
depends on the sampled gates alone (no gradient reaches it otherwise). The
last term is the negative entropy per real token (weight λ_H), whose
minimisation keeps the gate exploring.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp


def gate_log_prob(logits: jax.Array, gates: jax.Array, mask: jax.Array) -> jax.Array:
  """log π(b) of each example: Σ_t over real tokens of b_t log p_t + (1 − b_t)
  log(1 − p_t), p = σ(logits). logits, gates, mask: [B, T] -> [B]."""
  m = mask.astype(logits.dtype)
  b = gates.astype(logits.dtype)
  per_token = b * jax.nn.log_sigmoid(logits) + (1 - b) * jax.nn.log_sigmoid(-logits)
  return jnp.sum(per_token * m, axis=-1)


def gate_negative_entropy(logits: jax.Array, mask: jax.Array) -> jax.Array:
  """Σ_t over real tokens of p_t log p_t + (1 − p_t) log(1 − p_t) (≤ 0):
  [B, T] -> [B]."""
  p = jax.nn.sigmoid(logits)
  per_token = p * jax.nn.log_sigmoid(logits) + (1 - p) * jax.nn.log_sigmoid(-logits)
  return jnp.sum(per_token * mask.astype(logits.dtype), axis=-1)


def sparsity_cost(gates: jax.Array, mask: jax.Array, gamma: float,
                  dtype=jnp.float32) -> jax.Array:
  """G(b) = ReLU(Σ_t b_t − γ T) of each example, T its real tokens: [B, T] -> [B]."""
  m = mask.astype(dtype)
  opened = jnp.sum(gates.astype(dtype) * m, axis=-1)
  return jax.nn.relu(opened - gamma * jnp.sum(m, axis=-1))


def leave_one_out_baseline(rewards: jax.Array, weights: jax.Array, samples: int = 1
                           ) -> jax.Array:
  """B_i = the weighted mean of the other examples' rewards (0 where no
  other example has weight): [B] -> [B]. samples S ≥ 2: rows r = s B' + i
  (B' = B / S) are S samples of example i, and B_r = the mean of the other
  samples' rewards of the same example."""
  if samples > 1:
    per = rewards.reshape(samples, -1)
    return ((jnp.sum(per, 0, keepdims=True) - per) / (samples - 1)).reshape(rewards.shape)
  total, count = jnp.sum(weights * rewards), jnp.sum(weights)
  others = count - weights
  return jnp.where(others > 0, (total - weights * rewards) / jnp.where(others > 0, others, 1.0),
                   0.0)


def focused_loss(log_likelihood: jax.Array, logits: jax.Array | None, gates: jax.Array,
                 mask: jax.Array, weights: jax.Array, *, beta: float, gamma: float,
                 entropy_weight: float, samples: int = 1) -> tuple[jax.Array, dict]:
  """(L, metrics) of the module docstring for a batch.

  Args:
    log_likelihood: [B] log p(A | Q, P) of each example.
    logits: [B, T] the gate's logits, or None (a baseline without a gate:
      L is the mean negative log-likelihood).
    gates: [B, T] the sampled b (0/1; the baselines: where they read).
    mask: [B, T] real tokens; weights: [B] (0 for padding rows).
    beta, gamma, entropy_weight: β, γ, λ_H.
    samples: S, the gate samples of each example (rows sample-major; the
      baseline of the module docstring).

  Returns:
    L and {'loss': mean −log p(A | Q, P), 'objective': L, 'openness': the
    share of real tokens with b_t = 1, and for the gate 'reward' (mean R),
    'sparsity' (mean G), 'negative_entropy' (per real token)}.
  """
  dtype = log_likelihood.dtype
  w = weights.astype(dtype)
  count = jnp.maximum(jnp.sum(w), 1.0)
  m = mask.astype(dtype)
  tokens = jnp.maximum(jnp.sum(w * jnp.sum(m, -1)), 1.0)
  nll = -jnp.sum(w * log_likelihood) / count
  metrics = {"loss": nll,
             "openness": jnp.sum(w * jnp.sum(gates.astype(dtype) * m, -1)) / tokens}
  if logits is None:
    return nll, dict(metrics, objective=nll)
  cost = sparsity_cost(gates, mask, gamma, dtype)
  reward = jax.lax.stop_gradient(log_likelihood - beta * cost)
  advantage = jax.lax.stop_gradient(reward - leave_one_out_baseline(reward, w, samples))
  reinforce = -jnp.sum(w * advantage * gate_log_prob(logits, gates, mask)) / count
  negative_entropy = jnp.sum(w * gate_negative_entropy(logits, mask)) / tokens
  objective = nll + reinforce + entropy_weight * negative_entropy
  return objective, dict(metrics, objective=objective, reward=jnp.sum(w * reward) / count,
                         sparsity=jnp.sum(w * cost) / count,
                         negative_entropy=negative_entropy)
