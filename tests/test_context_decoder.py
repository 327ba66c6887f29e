"""ContextDecoder.decode_windows against the decoder run on the built inputs."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from glomo_jax import ModelConfig
from glomo_jax.models.context_decoder import ContextDecoder, context_inputs, context_targets


@pytest.mark.parametrize("positions", [
    [0, 5, 5, 2],             # 4 windows × 2 read steps < 12 positions: gates of the gathered rows
    list(range(9)),           # every start: 18 > 12, gates once per position, then gathered
])
def test_decode_windows_equals_decoding_the_teacher_forced_inputs(positions):
  config = ModelConfig.tiny(dtype="float64", param_dtype="float64")
  dec = ContextDecoder(config)
  with jax.enable_x64(True):
    emb = jax.random.normal(jax.random.PRNGKey(0), (2, 12, config.dim), jnp.float64)
    pos = jnp.asarray(positions)
    h0 = jax.random.normal(jax.random.PRNGKey(1), (2, len(positions), config.dim), jnp.float64)
    inputs = context_inputs(emb, pos, config.context_length)
    variables = dec.init(jax.random.PRNGKey(2), h0, inputs)

    def plain(v, h0, emb):
      return dec.apply(v, h0, context_inputs(emb, pos, config.context_length))

    def windows(v, h0, emb):
      return dec.apply(v, h0, emb, pos, method=ContextDecoder.decode_windows)

    out = windows(variables, h0, emb)
    assert out.shape == (2, len(positions), config.context_length, config.dim)
    np.testing.assert_allclose(out, plain(variables, h0, emb), rtol=1e-12, atol=1e-13)
    # gradients in the parameters, the start states and the embeddings
    w = jax.random.normal(jax.random.PRNGKey(3), out.shape, jnp.float64)
    loss = lambda f: lambda *a: jnp.sum(w * f(*a))
    got = jax.grad(loss(windows), argnums=(0, 1, 2))(variables, h0, emb)
    want = jax.grad(loss(plain), argnums=(0, 1, 2))(variables, h0, emb)
    for (path, g), r in zip(jax.tree_util.tree_leaves_with_path(got),
                            jax.tree_util.tree_leaves(want)):
      np.testing.assert_allclose(g, r, rtol=1e-10, atol=1e-12, err_msg=jax.tree_util.keystr(path))
    # each window reads its own future tokens: E(x_{t+1}), E(x_{t+2}) feed window t
    d_emb = np.abs(np.asarray(got[2])).sum(axis=(0, 2))
    read = {p + s for p in positions for s in range(1, config.context_length)}
    assert all((d_emb[i] > 0) == (i in read) for i in range(12))


def test_context_inputs_and_targets_by_hand():
  emb = jnp.arange(2 * 6 * 1, dtype=jnp.float32).reshape(2, 6, 1) + 1
  tokens = jnp.arange(12).reshape(2, 6)
  mask = jnp.ones((2, 6), bool).at[1, 4:].set(False)
  pos = jnp.asarray([0, 2])
  inputs = context_inputs(emb, pos, 3)                      # [2, 2, 3, 1]
  np.testing.assert_array_equal(inputs[0, :, :, 0], [[0, 2, 3], [0, 4, 5]])
  targets, weights = context_targets(tokens, mask, pos, 3)
  np.testing.assert_array_equal(targets[1], [[7, 8, 9], [9, 10, 11]])
  np.testing.assert_array_equal(weights[0], np.ones((2, 3)))
  np.testing.assert_array_equal(weights[1], [[1, 1, 1], [1, 0, 0]])
