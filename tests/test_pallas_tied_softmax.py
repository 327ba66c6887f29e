"""The fused tied softmax (Pallas, interpret mode on the CPU) equals the
chunked reference and the plain formula, in value and gradient, for both
forms (GPU and TPU), with rows and vocabulary that do not fill their tiles
and the vocabulary cut into ranges."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from glomo_jax.ops.chunked_cross_entropy import tied_softmax_cross_entropy
from glomo_jax.ops.pallas.tied_softmax import fused_tied_softmax_cross_entropy

N, V, D = 37, 45, 12     # 5 row blocks of 8 (3 rows of padding), 3 V tiles of 16


def case(dtype, seed=0):
  k = jax.random.split(jax.random.PRNGKey(seed), 4)
  hidden = jax.random.normal(k[0], (N, D), jnp.float32).astype(dtype)
  table = jax.random.normal(k[1], (V, D), jnp.float32).astype(dtype)
  targets = jax.random.randint(k[2], (N,), 0, V)
  acc = jnp.promote_types(dtype, jnp.float32)
  weights = (jax.random.uniform(k[3], (N,)) * (jnp.arange(N) % 5 != 0)).astype(acc)
  return hidden, table, targets, weights


def plain(hidden, table, targets, weights):
  logits = jnp.dot(hidden, table.T, preferred_element_type=weights.dtype)
  ce = jax.nn.logsumexp(logits, -1) - jnp.take_along_axis(logits, targets[:, None], -1)[:, 0]
  return jnp.sum(weights * ce), ce


def value_and_grads(fn, hidden, table, targets, weights):
  """(loss, ce) of a plain call and (loss, dh, dE, dw) of a differentiated one."""
  f = lambda h, t, w: fn(h, t, targets, w)
  out = jax.jit(f)(hidden, table, weights)
  loss, grads = jax.jit(jax.value_and_grad(lambda *a: 2.0 * f(*a)[0], argnums=(0, 1, 2)))(
      hidden, table, weights)
  return out, (loss,) + grads


def assert_close(got, want, rtol):
  for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * np.max(np.abs(b)))


@pytest.mark.parametrize("form", ["gpu", "tpu"])
def test_float32_equals_the_reference_and_the_formula(form):
  args = case(jnp.float32)
  fused = lambda *a: fused_tied_softmax_cross_entropy(*a, form=form, block_rows=8,
                                                      block_vocab=16, vocab_splits=2)
  got = value_and_grads(fused, *args)
  assert_close(got, value_and_grads(lambda *a: tied_softmax_cross_entropy(*a, 16), *args), 2e-6)
  assert_close(got[0], plain(*args), 2e-6)
  # dL/dw = CE, and the returned CE carries no gradient
  np.testing.assert_allclose(got[1][3], 2.0 * got[0][1], rtol=1e-6)


@pytest.mark.parametrize("form", ["gpu", "tpu"])
def test_float64_equals_the_reference(form):
  with jax.enable_x64(True):
    args = case(jnp.float64, seed=1)
    fused = lambda *a: fused_tied_softmax_cross_entropy(*a, form=form, block_rows=8,
                                                        block_vocab=16, vocab_splits=3)
    got = value_and_grads(fused, *args)
    assert got[1][1].dtype == jnp.float64
    assert_close(got, value_and_grads(lambda *a: tied_softmax_cross_entropy(*a, 7), *args),
                 1e-12)


def test_bfloat16_operands_round_like_the_reference():
  # bfloat16 hidden rows and table, float32 logits and weights: the softmax
  # weights are rounded to bfloat16 before their products in both, in
  # different places (the reference rounds softmax − one-hot, the kernel the
  # unnormalised exponentials), so gradients agree to bfloat16 precision.
  args = case(jnp.bfloat16, seed=2)
  got = value_and_grads(lambda *a: fused_tied_softmax_cross_entropy(
      *a, block_rows=16, block_vocab=32), *args)
  want = value_and_grads(lambda *a: tied_softmax_cross_entropy(*a, 64), *args)
  assert got[1][1].dtype == got[1][2].dtype == jnp.bfloat16
  assert_close(got[0], want[0], 1e-5)       # logits accumulate in float32 in both
  assert_close(got[1], want[1], 2e-2)


def test_default_blocks_and_errors():
  args = case(jnp.float32, seed=3)
  got = value_and_grads(fused_tied_softmax_cross_entropy, *args)
  assert_close(got, value_and_grads(lambda *a: plain(*a), *args), 2e-6)
  with pytest.raises(ValueError, match=r"\[N, dim\] and \[V, dim\]"):
    fused_tied_softmax_cross_entropy(args[0], args[1][:, :3], args[2], args[3])


def test_no_logits_sized_array_in_the_compiled_program():
  n, v, d, rows, cols = 256, 512, 8, 32, 64
  f = jax.jit(jax.value_and_grad(lambda h, t: fused_tied_softmax_cross_entropy(
      h, t, jnp.zeros((n,), jnp.int32), jnp.ones((n,)), block_rows=rows, block_vocab=cols,
      vocab_splits=2)[0], argnums=(0, 1)))
  hlo = f.lower(jnp.ones((n, d)), jnp.ones((v, d))).compile().as_text()
  assert f"f32[{n},{v}]" not in hlo and f"f32[{rows},{v}]" not in hlo
  assert f"f32[{rows},{cols}]" in hlo       # one logits tile at a time


@pytest.mark.parametrize("form", ["gpu", "tpu"])
def test_table_rows_split_over_fsdp_equal_the_formula(form):
  # data 2 × fsdp 4: each device scores its group's 2 × 8 rows against its
  # quarter of the table (36 rows: 3 tiles of 16, the last cut), the group
  # combines the log-sum-exp; two row groups as GLoMo's directions
  from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: PLC0415
  from glomo_jax.train import make_mesh  # noqa: PLC0415
  k = jax.random.split(jax.random.PRNGKey(4), 4)
  n, v, d = 64, 144, 12
  hidden = jax.random.normal(k[0], (n, d))
  table = jax.random.normal(k[1], (v, d))
  targets = jax.random.randint(k[2], (n,), 0, v)
  weights = jax.random.uniform(k[3], (n,)) * (jnp.arange(n) % 5 != 0)
  mesh = make_mesh(2, 4, jax.devices()[:8])
  table = jax.device_put(table, NamedSharding(mesh, P("fsdp", None)))
  with jax.set_mesh(mesh):
    got = value_and_grads(lambda *a: fused_tied_softmax_cross_entropy(
        *a, form=form, block_rows=8, block_vocab=16, row_groups=2), hidden, table, targets,
        weights)
    text = jax.jit(lambda t: fused_tied_softmax_cross_entropy(
        hidden, t, targets, weights, form=form, row_groups=2)[0]).lower(table).as_text()
  gathers = [line for line in text.splitlines() if "all_gather" in line or "all-gather" in line]
  assert gathers and not any(f"{v}x{d}" in line for line in gathers), gathers   # rows, not table
  assert_close(got, value_and_grads(plain, hidden, table, targets, weights), 2e-6)
