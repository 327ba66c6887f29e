"""The focused hierarchical encoder's math (glomo_jax.focused, docs/focused.md):
the boundary gate's equation and the LSTM by hand (NumPy), a closed gate
carries the upper state bit for bit, REINFORCE's gradient by hand, padding
changes nothing, the baselines on the same code (any length: test_picking.py's
tiny run tests at twice its training length)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from glomo_jax.focused.model import BoundaryGate, FocusedEncoder, GatedLSTM, PickingReader
from glomo_jax.focused.objective import focused_loss, gate_log_prob


def sigmoid(x):
  return 1 / (1 + np.exp(-x))


def numpy_lstm(params, x, update):
  """The gated LSTM by hand: x [B, T, D], update [B, T] -> h [B, T, H]."""
  w_i, b_i = np.asarray(params["input"]["kernel"]), np.asarray(params["input"]["bias"])
  w_h = np.asarray(params["hidden"])
  hidden = w_h.shape[0]
  c = np.zeros((x.shape[0], hidden))
  h = np.zeros((x.shape[0], hidden))
  out = []
  for t in range(x.shape[1]):
    g = x[:, t] @ w_i + b_i + h @ w_h
    i, f, gg, o = np.split(g, 4, axis=-1)
    c_new = sigmoid(f) * c + sigmoid(i) * np.tanh(gg)
    h_new = sigmoid(o) * np.tanh(c_new)
    u = update[:, t, None].astype(bool)
    c, h = np.where(u, c_new, c), np.where(u, h_new, h)
    out.append(h)
  return np.stack(out, 1)


def test_the_gate_is_the_seeds_equation_by_hand():
  rng = np.random.default_rng(0)
  h = rng.normal(size=(2, 3, 4)).astype(np.float32)
  q = rng.normal(size=(2, 4)).astype(np.float32)
  gate = BoundaryGate(hidden=5)
  params = gate.init(jax.random.key(1), h, q)["params"]
  logits = np.asarray(gate.apply({"params": params}, h, q))
  w_b_matrix = np.asarray(params["hidden"]["kernel"])   # W_b [3H, 5]
  b_b, w_b = np.asarray(params["hidden"]["bias"]), np.asarray(params["out"]["kernel"])[:, 0]
  for i in range(2):
    for t in range(3):
      z = np.concatenate([q[i] * h[i, t], h[i, t], q[i]])        # [q ⊙ h, h, q]
      a = z @ w_b_matrix + b_b
      by_hand = w_b @ np.where(a > 0, a, 0.01 * a)                # LReLU, slope 0.01
      np.testing.assert_allclose(logits[i, t], by_hand, rtol=1e-5, atol=1e-6)
  assert params["out"].keys() == {"kernel"}                       # w_b has no bias
  extra = rng.normal(size=(2, 3, 1)).astype(np.float32)          # e.g. positions t / s
  params = gate.init(jax.random.key(1), h, q, extra)["params"]
  logits = np.asarray(gate.apply({"params": params}, h, q, extra))
  w_b_matrix = np.asarray(params["hidden"]["kernel"])             # [3H + 1, 5]
  b_b, w_b = np.asarray(params["hidden"]["bias"]), np.asarray(params["out"]["kernel"])[:, 0]
  z = np.concatenate([q[1] * h[1, 2], h[1, 2], q[1], extra[1, 2]])   # [q ⊙ h, h, q, extra]
  a = z @ w_b_matrix + b_b
  np.testing.assert_allclose(logits[1, 2], w_b @ np.where(a > 0, a, 0.01 * a), rtol=1e-5,
                             atol=1e-6)


def test_a_closed_gate_carries_the_upper_state_unchanged():
  rng = np.random.default_rng(1)
  x = rng.normal(size=(2, 6, 3)).astype(np.float32)
  update = np.array([[0, 1, 0, 0, 1, 1], [1, 1, 0, 1, 0, 0]], bool)
  lstm = GatedLSTM(features=4)
  params = lstm.init(jax.random.key(2), x, update)["params"]
  h = np.asarray(lstm.apply({"params": params}, x, update))
  np.testing.assert_allclose(h, numpy_lstm(params, x, update), rtol=1e-5, atol=1e-6)
  for b, t in zip(*np.nonzero(~update)):
    previous = h[b, t - 1] if t else np.zeros(4, np.float32)
    np.testing.assert_array_equal(h[b, t], previous)              # bit for bit
  assert not np.array_equal(h[0, 1], h[0, 0]) and not np.array_equal(h[0, 4], h[0, 3])
  # the forget gate's bias starts at 1, the others at 0
  np.testing.assert_array_equal(np.asarray(params["input"]["bias"]),
                                np.repeat([0.0, 1.0, 0.0, 0.0], 4))


def test_reinforce_gradient_by_hand():
  """Three examples and a padding row (weight 0), gates fixed: the gradient
  of L with respect to the gate's logits and the log-likelihood."""
  rng = np.random.default_rng(2)
  logits = rng.normal(size=(4, 5))
  gates = rng.integers(0, 2, size=(4, 5)).astype(np.float64)
  mask = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 0, 0, 0, 0]], bool)
  ll = np.array([-0.5, -1.2, -2.0, -0.1])
  w = np.array([1.0, 1.0, 1.0, 0.0])
  beta, gamma, lam = 0.3, 0.25, 0.1
  with jax.enable_x64(True):
    def loss(ll_, logits_):
      return focused_loss(ll_, logits_, jnp.asarray(gates), jnp.asarray(mask), jnp.asarray(w),
                          beta=beta, gamma=gamma, entropy_weight=lam)[0]
    value, (d_ll, d_logits) = jax.value_and_grad(loss, argnums=(0, 1))(
        jnp.asarray(ll), jnp.asarray(logits))
  m, p = mask.astype(float), sigmoid(logits)
  length = m.sum(1)
  reward = ll - beta * np.maximum((gates * m).sum(1) - gamma * length, 0)
  baseline = np.array([np.mean([reward[j] for j in range(3) if j != i]) for i in range(4)])
  advantage = reward - baseline
  count, tokens = w.sum(), (w * length).sum()
  log_pi = ((gates * np.log(p) + (1 - gates) * np.log(1 - p)) * m).sum(1)
  neg_entropy = ((p * np.log(p) + (1 - p) * np.log(1 - p)) * m).sum(1)
  by_hand = (-(w * ll).sum() / count - (w * advantage * log_pi).sum() / count
             + lam * (w * neg_entropy).sum() / tokens)
  np.testing.assert_allclose(value, by_hand, rtol=1e-12)
  grad_logits = (-(w * advantage)[:, None] * (gates - p) * m / count
                 + lam * w[:, None] * m * p * (1 - p) * logits / tokens)
  np.testing.assert_allclose(d_logits, grad_logits, rtol=1e-10, atol=1e-14)
  # the reward is a constant: the log-likelihood's gradient is the NLL's alone
  np.testing.assert_allclose(d_ll, -w / count, rtol=1e-12)


def test_padding_changes_nothing():
  rng = np.random.default_rng(3)
  lengths, k = np.array([5, 7]), np.array([3, 7])
  short = rng.integers(0, 10, size=(2, 7))
  long = np.concatenate([short, rng.integers(0, 10, size=(2, 6))], 1)   # garbage after
  long[0, 5:7] = 9
  model = PickingReader("fhe", hidden=8, digit_dim=4, gate_hidden=4, attention_hidden=4,
                        position_scale=10.0)
  variables = model.init(jax.random.key(0), short, lengths, k)
  apply = jax.jit(model.apply, static_argnames="decide")
  a = apply(variables, short, lengths, k)
  b = apply(variables, long, lengths, k)
  np.testing.assert_allclose(a.logits, b.logits, rtol=1e-6, atol=1e-6)
  real = np.asarray(a.mask)
  np.testing.assert_array_equal(np.asarray(b.mask)[:, :7], real)
  np.testing.assert_allclose(np.asarray(a.gate_logits)[real], np.asarray(b.gate_logits)[:, :7][real],
                             rtol=1e-6)
  np.testing.assert_array_equal(np.asarray(b.readable)[:, :7], np.asarray(a.readable))
  assert not np.asarray(b.readable)[~np.asarray(b.mask)].any()
  assert not np.asarray(b.attention)[~np.asarray(b.mask)].any()
  # sampled gates never open at padding; the loss ignores padding tokens
  sampled = apply(variables, long, lengths, k, decide="sample", rng=jax.random.key(5))
  assert not np.asarray(sampled.readable)[~np.asarray(sampled.mask)].any()
  ll, weights = jnp.zeros(2), jnp.ones(2)
  garbage = jnp.where(sampled.mask, sampled.gate_logits, 7.0)
  args = dict(beta=0.1, gamma=0.2, entropy_weight=0.1)
  assert focused_loss(ll, sampled.gate_logits, sampled.readable, sampled.mask, weights,
                      **args)[0] == focused_loss(ll, garbage, sampled.readable, sampled.mask,
                                                 weights, **args)[0]
  np.testing.assert_array_equal(gate_log_prob(garbage, sampled.readable, sampled.mask),
                                gate_log_prob(sampled.gate_logits, sampled.readable,
                                              sampled.mask))


def test_threshold_gate_and_baselines_on_the_same_code():
  rng = np.random.default_rng(4)
  x = rng.normal(size=(2, 9, 3)).astype(np.float32)
  mask = np.arange(9)[None] < np.array([[9], [6]])
  q = rng.normal(size=(2, 5)).astype(np.float32)             # Dq != H: projected
  encoded = {}
  for kind in ("fhe", "lstm1", "lstm2"):
    encoder = FocusedEncoder(features=4, kind=kind, gate_hidden=3)
    variables, encoded[kind] = jax.jit(lambda x, m, q, e=encoder: e.init_with_output(
        jax.random.key(0), x, m, q)[::-1])(x, mask, q)
    names = set(variables["params"])
    assert names == {"fhe": {"lower", "question", "gate", "upper"}, "lstm1": {"lower"},
                     "lstm2": {"lower", "upper"}}[kind]
  fhe = encoded["fhe"]
  np.testing.assert_array_equal(fhe.readable, (np.asarray(fhe.gate_logits) >= 0) & mask)
  for kind in ("lstm1", "lstm2"):
    np.testing.assert_array_equal(encoded[kind].readable, mask)
    assert encoded[kind].gate_logits is None
  with pytest.raises(ValueError, match="sampled gates need an rng"):
    FocusedEncoder(4).init(jax.random.key(0), x, mask, q, decide="sample")


def test_gate_positions_reach_the_gate_alone():
  """With gate_positions the gate's z_t ends with t / s, while the lower
  LSTM still reads the digit embeddings alone."""
  rng = np.random.default_rng(7)
  digits = rng.integers(0, 10, size=(2, 7))
  lengths, k = np.array([7, 5]), np.array([3, 5])
  model = PickingReader("fhe", hidden=6, digit_dim=4, gate_hidden=3, attention_hidden=3,
                        position_scale=10.0, gate_positions=True)
  variables = model.init(jax.random.key(2), digits, lengths, k)
  p = variables["params"]["encoder"]
  assert p["gate"]["hidden"]["kernel"].shape == (3 * 6 + 1, 3)
  assert p["lower"]["input"]["kernel"].shape == (4, 24)
  out, inner = model.apply(variables, digits, lengths, k, capture_intermediates=True)
  lower = inner["intermediates"]["encoder"]["lower"]["__call__"][0]
  q = np.asarray(inner["intermediates"]["question"]["__call__"][0])
  where = np.broadcast_to((np.arange(1, 8) / 10.0)[None, :, None], (2, 7, 1))
  by_hand = BoundaryGate(3).apply({"params": p["gate"]}, lower, q, where)
  np.testing.assert_allclose(out.gate_logits, by_hand, rtol=1e-5, atol=1e-6)
  plain = BoundaryGate(3).apply({"params": p["gate"]}, lower, q, np.zeros_like(where))
  assert not np.allclose(out.gate_logits, plain)                  # the position matters


def test_oracle_gates_open_where_the_answer_lies():
  """'prefix' opens t ≤ k, 'kth' t = k (never at padding); the upper LSTM
  then reads those lower states alone, as by hand; no gate is computed."""
  rng = np.random.default_rng(6)
  digits = rng.integers(0, 10, size=(3, 8))
  lengths, k = np.array([8, 6, 5]), np.array([3, 6, 1])
  model = PickingReader("fhe", hidden=6, digit_dim=4, gate_hidden=3, attention_hidden=3,
                        position_scale=10.0)
  variables = model.init(jax.random.key(1), digits, lengths, k)
  t = np.arange(1, 9)[None]
  real = t <= lengths[:, None]
  for decide, want in (("prefix", (t <= k[:, None]) & real), ("kth", t == k[:, None])):
    out, inner = model.apply(variables, digits, lengths, k, decide=decide,
                             capture_intermediates=True)
    np.testing.assert_array_equal(out.readable, want)
    assert out.gate_logits is None
    lower = np.asarray(inner["intermediates"]["encoder"]["lower"]["__call__"][0])
    upper = numpy_lstm(variables["params"]["encoder"]["upper"], lower, want)
    states = inner["intermediates"]["encoder"]["upper"]["__call__"][0]
    np.testing.assert_allclose(states, upper, rtol=1e-5, atol=1e-6)
    # attention reads the open states only
    assert not np.asarray(out.attention)[~want].any()
  with pytest.raises(ValueError, match="unknown gate decision 'suffix'"):
    model.apply(variables, digits, lengths, k, decide="suffix")
  x, q = np.zeros((1, 3, 2), np.float32), np.zeros((1, 4), np.float32)
  with pytest.raises(ValueError, match="given gates go with decide='given'"):
    FocusedEncoder(4).init(jax.random.key(0), x, np.ones((1, 3)), q, decide="given")


def test_several_gate_samples_take_each_others_baseline():
  """S = 3 samples of 2 examples (rows sample-major): B of a row is the mean
  reward of its example's other two samples; L's gradient by hand."""
  rng = np.random.default_rng(7)
  s, b, t = 3, 2, 4
  logits = rng.normal(size=(s * b, t))
  gates = rng.integers(0, 2, size=(s * b, t)).astype(np.float64)
  mask = np.tile(np.array([[1, 1, 1, 1], [1, 1, 0, 0]], bool), (s, 1))
  ll = rng.normal(size=s * b) - 1
  w = np.ones(s * b)
  beta, gamma = 0.2, 0.25
  with jax.enable_x64(True):
    def loss(logits_):
      return focused_loss(jnp.asarray(ll), logits_, jnp.asarray(gates), jnp.asarray(mask),
                          jnp.asarray(w), beta=beta, gamma=gamma, entropy_weight=0.0,
                          samples=s)[0]
    value, d_logits = jax.value_and_grad(loss)(jnp.asarray(logits))
  m, p = mask.astype(float), sigmoid(logits)
  reward = ll - beta * np.maximum((gates * m).sum(1) - gamma * m.sum(1), 0)
  example = np.arange(s * b) % b
  baseline = np.array([np.mean([reward[j] for j in range(s * b)
                                if example[j] == example[r] and j != r]) for r in range(s * b)])
  advantage = reward - baseline
  log_pi = ((gates * np.log(p) + (1 - gates) * np.log(1 - p)) * m).sum(1)
  np.testing.assert_allclose(value, -ll.mean() - (advantage * log_pi).mean(), rtol=1e-12)
  np.testing.assert_allclose(d_logits, -advantage[:, None] * (gates - p) * m / (s * b),
                             rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("reinforce_encoder", [True, False])
def test_reinforce_reaches_the_encoder_only_when_asked(reinforce_encoder):
  """The gradient of Σ log π(b) (REINFORCE's surrogate with R − B = 1):
  the gate's weights always; the lower LSTM and the question's projection
  only with reinforce_encoder; the upper LSTM never (the gates are discrete)."""
  rng = np.random.default_rng(8)
  digits, lengths, k = rng.integers(0, 10, size=(2, 6)), np.array([6, 4]), np.array([2, 4])
  model = PickingReader("fhe", hidden=6, digit_dim=4, gate_hidden=3, attention_hidden=3,
                        position_scale=10.0, reinforce_encoder=reinforce_encoder)
  variables = model.init(jax.random.key(2), digits, lengths, k)

  def surrogate(params):
    out = model.apply({"params": params}, digits, lengths, k, decide="sample",
                      rng=jax.random.key(3))
    return jnp.sum(gate_log_prob(out.gate_logits, out.readable, out.mask))
  grads = jax.jit(jax.grad(surrogate))(variables["params"])

  def moved(tree):
    return any(np.any(np.asarray(g) != 0) for g in jax.tree_util.tree_leaves(tree))
  assert moved(grads["encoder"]["gate"])
  assert moved(grads["encoder"]["lower"]) == reinforce_encoder
  assert moved(grads["question"]) == reinforce_encoder
  assert not moved(grads["encoder"]["upper"]) and not moved(grads["attention"])
