"""The fused squared-ReLU graph mixing (Pallas, interpret mode on the CPU),
both forms (GPU and TPU), equals Eq. 1's graph (`normalize_graph`) mixed per
head (`mix_heads`), in value and in the gradients of queries, keys,
thresholds and values: every row (causal, blocks past the diagonal skipped)
and given rows (repeats, any order), with and without padding, tiles that
the lengths do not fill, the thresholds of every kind (per query, one
scalar, zero)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from glomo_jax.models.feature_predictor import mix_heads
from glomo_jax.ops.pallas.graph_mix import fused_graph_mix
from glomo_jax.ops.sparse_graph import allowed_sources, normalize_graph

B, K, T, H, C = 2, 2, 11, 3, 2
ROWS = np.array([3, 0, 9, 9, 5, 10])


def reference(q, k, theta, values, rows, mask):
  scores = jnp.einsum("bkjh,bkih->bkji", q, k, preferred_element_type=theta.dtype)
  allowed = allowed_sources(T, mask, rows)
  allowed = allowed if mask is None else allowed[:, 0][:, None]
  return mix_heads(normalize_graph(scores, theta[..., None], allowed), values)


def case(dtype, rows, seed=0):
  ks = jax.random.split(jax.random.PRNGKey(seed), 5)
  r = T if rows is None else len(rows)
  q = jax.random.normal(ks[0], (B, K, r, H), dtype)
  k = jax.random.normal(ks[1], (B, K, T, H), dtype)
  theta = 0.3 * jax.random.normal(ks[2], (B, K, r), dtype)   # about half the pairs live
  values = jax.random.normal(ks[3], (B, T, K * C), dtype)
  cotangent = jax.random.normal(ks[4], (B, r, K * C), dtype)
  return (q, k, theta, values), cotangent


def vjp(fn, args, cotangent):
  out, pullback = jax.vjp(fn, *args)
  return (out,) + pullback(cotangent)


def check(dtype, rows, mask, rtol, theta=None, **blocks):
  args, ct = case(dtype, rows)
  if theta is not None:             # a scalar or zero threshold, broadcast as the model does
    args = args[:2] + (jnp.full(args[2].shape, theta, args[2].dtype),) + args[3:]
  rows = None if rows is None else jnp.asarray(rows)
  fused = jax.jit(lambda *a: vjp(lambda *x: fused_graph_mix(*x, rows, mask, **blocks), a, ct))
  want = vjp(lambda *x: reference(*x, rows, mask), args, ct)
  got = fused(*args)
  for name, a, b in zip(("m", "dq", "dk", "dtheta", "dvalues"), got, want):
    assert a.dtype == b.dtype, name
    b = np.asarray(b, np.float64)
    np.testing.assert_allclose(np.asarray(a, np.float64), b, rtol=rtol,
                               atol=rtol * np.max(np.abs(b)), err_msg=name)


MASK = jnp.arange(T)[None, :] < jnp.array([[T], [7]])   # row 1: 4 padding tokens


FORMS = ["gpu", "tpu"]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("rows", [None, ROWS], ids=["every_row", "given_rows"])
@pytest.mark.parametrize("masked", [False, True], ids=["no_mask", "mask"])
def test_float32_equals_graph_then_mix(rows, masked, form):
  check(jnp.float32, rows, MASK if masked else None, 5e-6, block_rows=4, block_sources=4,
        form=form)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("rows", [None, ROWS], ids=["every_row", "given_rows"])
def test_float64_equals_graph_then_mix(rows, form):
  with jax.enable_x64(True):
    check(jnp.float64, rows, MASK, 1e-12, block_rows=4, block_sources=8, form=form)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("theta", [0.2, 0.0], ids=["scalar", "zero"])
def test_scalar_and_zero_thresholds(theta, form):
  # float64: with θ = 0 a row with one live source has dθ = 0 up to rounding
  # (G = 1), which float32 leaves at 1e-5 of the largest dθ in both. Every
  # row in the form's default blocks; given rows in blocks of 8.
  with jax.enable_x64(True):
    check(jnp.float64, ROWS, MASK, 1e-12, theta=theta, block_rows=8, form=form)
    check(jnp.float64, None, MASK, 1e-12, theta=theta, form=form)


@pytest.mark.parametrize("form", FORMS)
def test_rows_without_sources_mix_nothing(form):
  # Row 0 has no source; with θ above every score no row keeps one: zeros,
  # and no gradient, as the reference's ε keeps 0 / ε finite.
  args, ct = case(jnp.float32, None, seed=1)
  q, k, _, values = args
  theta = jnp.full((B, K, T), 1e3)
  got = vjp(lambda *x: fused_graph_mix(*x, block_rows=4, block_sources=4, form=form),
            (q, k, theta, values), ct)
  for a in got:
    assert np.all(np.asarray(a) == 0)


@pytest.mark.parametrize("form", FORMS)
def test_no_graph_sized_array_in_the_compiled_program(form):
  t, br = 64, 8
  args = (jnp.ones((1, 2, t, 4)), jnp.ones((1, 2, t, 4)), jnp.zeros((1, 2, t)),
          jnp.ones((1, t, 6)))
  f = jax.jit(jax.grad(lambda *a: jnp.sum(fused_graph_mix(*a, block_rows=br,
                                                           block_sources=br, form=form)),
                       argnums=(0, 1, 2, 3)))
  hlo = f.lower(*args).compile().as_text()
  assert f",{t},{t}]" not in hlo and f"[{t},{t}]" not in hlo
  assert f"f32[{br},{br}]" in hlo


def test_compiled_gpu_form_refuses_widths_triton_cannot_load():
  args, _ = case(jnp.float32, None)       # H = 3, slices of 2
  with pytest.raises(ValueError, match="powers of two.*head_dim"):
    fused_graph_mix(*args, form="gpu", interpret=False)
