"""glomo_jax.convert: loading PyTorch (release / peer) weights.

(a) golden values written by ``benchmarks/torch_equivalence.py --write_golden``
    from the PyTorch peer in float64 (no torch needed here): graphs, features,
    BN running statistics, loss and gradients must match to 1e-10;
(b) the layout mapping on a small hand-made state_dict;
(c) clear errors for missing, unexpected and mis-shaped tensors.
"""
import functools
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from glomo_jax import GLoMo, ModelConfig
from glomo_jax import convert
from glomo_jax.convert import (config_from_torch_state_dict, convert_tensor,
                               load_torch_checkpoint, variables_from_torch_state_dict)

GOLDEN = os.path.join(os.path.dirname(__file__), "data", "peer_golden.npz")
CASES = ("gru", "residual", "gru_mask")
TOL = 1e-10


# ---------------------------------------------------------------------------
# (a) golden values from the PyTorch peer
# ---------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def _golden(case):
  """(reference {name: array}, ours {name: array}) for one golden case."""
  z = np.load(GOLDEN)
  comp = str(z[f"{case}/composition"])
  sd, start = {}, 0
  for name, shape in zip(z["sd/names"], z["sd/shapes"]):
    shape = tuple(int(n) for n in shape if n >= 0)
    size = int(np.prod(shape))
    sd[str(name)] = z["sd/values"][start:start + size].reshape(shape)
    start += size
  sd = {k: sd[k] for k in z[f"keys/{comp}"]}
  ref = {k[len(case) + 1:]: z[k] for k in z.files if k.startswith(case + "/")}
  with jax.enable_x64(True):                    # scoped: does not leak into other tests
    config = config_from_torch_state_dict(
        sd, context_length=3, sample_positions=len(ref["pos_fw"]),
        dtype="float64", param_dtype="float64")
    assert config.composition == comp
    variables = jax.tree_util.tree_map(jnp.asarray, variables_from_torch_state_dict(sd, config))
    model = GLoMo(config)
    tokens = jnp.asarray(ref["tokens"])
    mask = jnp.asarray(ref["mask"]) if "mask" in ref else None
    positions = (jnp.asarray(ref["pos_fw"]), jnp.asarray(ref["pos_bw"]))
    apply = functools.partial(model.apply, train=True, mutable=["batch_stats"])
    ours = {"graphs": apply(variables, tokens, mask, method=GLoMo.graphs)[0],
            "features": apply(variables, tokens, mask, method=GLoMo.features)[0]}

    def loss_fn(params):
      (loss, _), updates = apply({"params": params, "batch_stats": variables["batch_stats"]},
                                 tokens, mask, positions=positions)
      return loss, updates

    (loss, updates), grads = jax.value_and_grad(loss_fn, has_aux=True)(variables["params"])
    ours.update(loss=loss, grads=grads, batch_stats=updates["batch_stats"])
    ours = jax.tree_util.tree_map(np.asarray, ours)
  return config, ref, ours


def _leaf(tree, path, layer):
  for key in path:
    tree = tree[key]
  return tree if layer is None else tree[layer]


def _real(ref):
  """Masks for graphs (real target rows) and features (real positions): our
  graphs also zero padding *targets*, the peer only padding sources."""
  if "mask" not in ref:
    return 1.0, 1.0
  m = ref["mask"].astype(np.float64)
  return m[:, None, None, :, None], m[None, :, :, None]


@pytest.mark.parametrize("case", CASES)
def test_golden_graphs_features_and_bn_statistics(case):
  config, ref, ours = _golden(case)
  rows, pos = _real(ref)
  assert ours["graphs"].shape == ref["graphs"].shape
  np.testing.assert_allclose(ours["graphs"] * rows, ref["graphs"] * rows, rtol=0, atol=TOL)
  np.testing.assert_allclose(ours["features"] * pos, ref["features"] * pos, rtol=0, atol=TOL)
  names = ref["bn_names"]
  assert len(names) == 4 * (config.key_layers + config.query_layers)
  for name, value in zip(names, ref["bn_values"]):
    col, path, layer, want = convert_tensor(str(name), value, config)
    assert col == "batch_stats"
    np.testing.assert_allclose(_leaf(ours["batch_stats"], path, layer), want,
                               rtol=0, atol=TOL, err_msg=name)


@pytest.mark.parametrize("case", CASES)
def test_golden_loss_and_gradients(case):
  config, ref, ours = _golden(case)
  np.testing.assert_allclose(ours["loss"], ref["loss"], rtol=0, atol=TOL)
  names = [k for k in ref if k.startswith("grad/")]
  assert len(names) >= 10
  for name in names:
    col, path, layer, want = convert_tensor(name[5:], ref[name], config)
    assert col == "params"
    np.testing.assert_allclose(_leaf(ours["grads"], path, layer), want,
                               rtol=0, atol=TOL, err_msg=name)


def test_golden_does_not_leak_x64():
  _golden("gru")
  assert jnp.zeros(1).dtype == jnp.float32


# ---------------------------------------------------------------------------
# (b) layout mapping on a hand-made state_dict
# ---------------------------------------------------------------------------
D, V, K, H, L, KS, NK, NQ, NDEC = 4, 7, 2, 3, 2, 2, 2, 1, 2


def hand_state_dict(composition="gru", official=True, threshold="query", seed=0):
  """The release's (official=True) or the peer's names with random values."""
  rng = np.random.RandomState(seed)
  r = lambda *shape: rng.randn(*shape).astype(np.float32)
  sd = {}
  emb = r(V, D)
  sd["enc_emb.weight" if official else "embed.weight"] = emb
  for x in ("fw", "bw"):
    g = f"st_predictor_{x}" if official else f"graph_{x}"
    for stack, n in (("key", NK), ("query", NQ)):
      for i in range(n):
        conv, bn = ((f"{g}.{stack}_cnn.{i}.0", f"{g}.{stack}_cnn.{i}.1") if official
                    else (f"{g}.{stack}_convs.{i}.conv", f"{g}.{stack}_convs.{i}.bn"))
        sd.update({f"{conv}.weight": r(D, D, KS), f"{conv}.bias": r(D),
                   f"{bn}.weight": r(D), f"{bn}.bias": r(D),
                   f"{bn}.running_mean": r(D), f"{bn}.running_var": np.abs(r(D)),
                   f"{bn}.num_batches_tracked": np.array(3)})
    for l in range(L):
      for proj in ("key", "query"):
        name = f"{g}.{proj}_dot_trans.{l}" if official else f"{g}.{proj}_proj.{l}"
        sd.update({f"{name}.weight": r(K * H, D), f"{name}.bias": r(K * H)})
      if threshold == "query":
        name = f"{g}.sparse_trans.{l}" if official else f"{g}.threshold.{l}"
        sd.update({f"{name}.weight": r(1, H), f"{name}.bias": r(1)})
      if composition == "residual":
        name = f"{g}.value_trans.{l}" if official else f"{g}.value_proj.{l}"
        sd.update({f"{name}.weight": r(D, D), f"{name}.bias": r(D)})
    if threshold == "scalar":
      sd[f"{g}.sparse_bias"] = r(L)
    if composition == "gru":
      cell = f"{g}.gru_cell" if official else f"{g}.gru"
      sd.update({f"{cell}.weight_ih": r(3 * D, 2 * D), f"{cell}.weight_hh": r(3 * D, D),
                 f"{cell}.bias_ih": r(3 * D), f"{cell}.bias_hh": r(3 * D)})
    dec = f"dec_net_{x}.rnn_fw" if official else f"decoder_{x}"
    for n in range(NDEC):
      sd.update({f"{dec}.weight_ih_l{n}": r(3 * D, D), f"{dec}.weight_hh_l{n}": r(3 * D, D),
                 f"{dec}.bias_ih_l{n}": r(3 * D), f"{dec}.bias_hh_l{n}": r(3 * D)})
    if official:
      sd[f"dec_net_{x}.out.weight"] = emb.copy()
  return sd


def hand_config(**changes):
  base = dict(vocab_size=V, dim=D, num_heads=K, head_dim=H, num_graph_layers=L,
              key_layers=NK, query_layers=NQ, kernel_size=KS, decoder_layers=NDEC,
              context_length=3, sample_positions=0)
  return ModelConfig(**{**base, **changes})


def _tree_spec(tree):
  return jax.tree_util.tree_map(lambda x: (tuple(x.shape), jnp.dtype(x.dtype)), tree)


@pytest.mark.parametrize("composition", ["gru", "residual"])
def test_tree_matches_init(composition):
  config = hand_config(composition=composition)
  ours = variables_from_torch_state_dict(hand_state_dict(composition), config)
  init = jax.eval_shape(lambda: GLoMo(config).init(
      jax.random.PRNGKey(0), jnp.zeros((1, 6), jnp.int32), train=False))
  assert _tree_spec(ours) == _tree_spec(init)
  assert all(isinstance(x, np.ndarray) for x in jax.tree_util.tree_leaves(ours))


def test_layouts():
  sd = hand_state_dict("gru")
  v = variables_from_torch_state_dict(sd, hand_config())
  p, bs = v["params"], v["batch_stats"]
  np.testing.assert_array_equal(p["embedding"], sd["enc_emb.weight"])
  # Linear(d, K·H) of layer l -> key_kernel[l][i, k, h] = W[k·H + h, i]
  for l in range(L):
    w = sd[f"st_predictor_bw.key_dot_trans.{l}.weight"]
    b = sd[f"st_predictor_bw.key_dot_trans.{l}.bias"]
    for i in range(D):
      for k in range(K):
        for h in range(H):
          assert p["graph_bw"]["key_kernel"][l, i, k, h] == w[k * H + h, i]
    np.testing.assert_array_equal(p["graph_bw"]["key_bias"][l], b.reshape(K, H))
    q = sd[f"st_predictor_fw.query_dot_trans.{l}.weight"]
    np.testing.assert_array_equal(p["graph_fw"]["query_kernel"][l], q.T.reshape(D, K, H))
    t = sd[f"st_predictor_fw.sparse_trans.{l}.weight"]
    np.testing.assert_array_equal(p["graph_fw"]["threshold_kernel"][l], t[0])
    assert p["graph_fw"]["threshold_bias"][l] == sd[f"st_predictor_fw.sparse_trans.{l}.bias"][0]
  # Conv1d [out, in, k] -> [k, in, out]; BN -> norm params and batch_stats
  w = sd["st_predictor_fw.key_cnn.1.0.weight"]
  block = p["graph_fw"]["key_cnn"]["block_1"]
  for o in range(D):
    for i in range(D):
      for j in range(KS):
        assert block["kernel"][j, i, o] == w[o, i, j]
  np.testing.assert_array_equal(block["bias"], sd["st_predictor_fw.key_cnn.1.0.bias"])
  np.testing.assert_array_equal(block["norm"]["scale"], sd["st_predictor_fw.key_cnn.1.1.weight"])
  np.testing.assert_array_equal(block["norm"]["bias"], sd["st_predictor_fw.key_cnn.1.1.bias"])
  stats = bs["graph_fw"]["key_cnn"]["block_1"]["norm"]
  np.testing.assert_array_equal(stats["mean"], sd["st_predictor_fw.key_cnn.1.1.running_mean"])
  np.testing.assert_array_equal(stats["var"], sd["st_predictor_fw.key_cnn.1.1.running_var"])
  # GRU: weight_ih [3h, in] -> input_kernel [in, 3h], gate order kept
  gru = p["features_bw"]["gru"]
  np.testing.assert_array_equal(gru["input_kernel"], sd["st_predictor_bw.gru_cell.weight_ih"].T)
  np.testing.assert_array_equal(gru["hidden_kernel"], sd["st_predictor_bw.gru_cell.weight_hh"].T)
  np.testing.assert_array_equal(gru["input_bias"], sd["st_predictor_bw.gru_cell.bias_ih"])
  np.testing.assert_array_equal(gru["hidden_bias"], sd["st_predictor_bw.gru_cell.bias_hh"])
  dec = p["decoder_fw"]["gru"]["layer_1"]
  np.testing.assert_array_equal(dec["input_kernel"], sd["dec_net_fw.rnn_fw.weight_ih_l1"].T)
  np.testing.assert_array_equal(dec["hidden_bias"], sd["dec_net_fw.rnn_fw.bias_hh_l1"])


def test_residual_and_scalar_threshold_layouts():
  sd = hand_state_dict("residual", threshold="scalar")
  config = config_from_torch_state_dict(sd, num_heads=K)
  assert (config.composition, config.threshold, config.head_dim) == ("residual", "scalar", H)
  p = variables_from_torch_state_dict(sd, config)["params"]
  for l in range(L):
    np.testing.assert_array_equal(p["features_fw"]["value_kernel"][l],
                                  sd[f"st_predictor_fw.value_trans.{l}.weight"].T)
    np.testing.assert_array_equal(p["features_fw"]["value_bias"][l],
                                  sd[f"st_predictor_fw.value_trans.{l}.bias"])
  np.testing.assert_array_equal(p["graph_bw"]["threshold_bias"], sd["st_predictor_bw.sparse_bias"])
  with pytest.raises(ValueError, match="not divisible by num_heads=8"):
    config_from_torch_state_dict(sd)            # K·H = 6 and the default K = 8


def test_zero_threshold_layout_only_when_asked_for():
  sd = hand_state_dict(threshold="zero")        # the release's sparse_mode 1
  with pytest.raises(ValueError, match="threshold='zero'"):
    config_from_torch_state_dict(sd, num_heads=K)
  config = config_from_torch_state_dict(sd, num_heads=K, threshold="zero")
  assert (config.threshold, config.head_dim) == ("zero", H)
  p = variables_from_torch_state_dict(sd, config)["params"]
  assert not {"threshold_kernel", "threshold_bias"} & set(p["graph_fw"])


def test_both_naming_schemes_and_torch_free_values():
  config = hand_config()
  official = variables_from_torch_state_dict(hand_state_dict(official=True), config)
  peer = variables_from_torch_state_dict(hand_state_dict(official=False), config)
  jax.tree_util.tree_map(np.testing.assert_array_equal, official, peer)
  prefixed = {"module." + k: v for k, v in hand_state_dict().items()}
  jax.tree_util.tree_map(np.testing.assert_array_equal, official,
                         variables_from_torch_state_dict(prefixed, config))
  assert "torch" not in convert.__dict__


def test_param_dtype():
  v = variables_from_torch_state_dict(hand_state_dict(), hand_config(param_dtype="float64"))
  assert {x.dtype for x in jax.tree_util.tree_leaves(v)} == {np.dtype("float64")}


def test_config_inference():
  sd = hand_state_dict("gru")
  config = config_from_torch_state_dict(sd, context_length=2)
  want = dict(vocab_size=V, dim=D, num_heads=K, head_dim=H, num_graph_layers=L,
              key_layers=NK, query_layers=NQ, kernel_size=KS, decoder_layers=NDEC,
              threshold="query", composition="gru", context_length=2)
  assert {k: getattr(config, k) for k in want} == want
  assert config.embed_grad_scale_by_freq and config.norm == "batch"   # the authors'
  assert config_from_torch_state_dict(hand_state_dict("residual")).composition == "residual"
  with pytest.raises(ValueError, match="num_heads=4 contradicts"):
    config_from_torch_state_dict(sd, num_heads=4)


def test_converted_model_runs():
  config = hand_config()
  variables = variables_from_torch_state_dict(hand_state_dict(), config)
  graphs = GLoMo(config).apply(variables, jnp.zeros((2, 6), jnp.int32), method=GLoMo.graphs)
  assert graphs.shape == (2, 2 * L, K, 6, 6)


# ---------------------------------------------------------------------------
# (c) errors
# ---------------------------------------------------------------------------
def test_missing_unexpected_and_mismatched_are_listed():
  sd = hand_state_dict()
  del sd["st_predictor_fw.query_dot_trans.1.bias"]
  del sd["dec_net_bw.rnn_fw.weight_hh_l1"]
  sd["st_predictor_fw.extra.weight"] = np.zeros(3)
  sd["st_predictor_bw.key_cnn.0.0.weight"] = np.zeros((D, D, KS + 1))
  with pytest.raises(ValueError) as err:
    variables_from_torch_state_dict(sd, hand_config())
  msg = str(err.value)
  assert "missing (2)" in msg                       # in the naming scheme given
  assert "st_predictor_fw.query_dot_trans.1.bias" in msg
  assert "dec_net_bw.rnn_fw.weight_hh_l1" in msg
  assert "unexpected (1)" in msg and "st_predictor_fw.extra.weight" in msg
  assert "shape mismatches (1" in msg
  assert f"st_predictor_bw.key_cnn.0.0.weight: expected ({D}, {D}, {KS}), " \
         f"got ({D}, {D}, {KS + 1})" in msg


def test_errors_in_peer_names():
  sd = hand_state_dict(official=False)
  del sd["graph_bw.threshold.0.weight"]
  sd["decoder_fw.weight_ih_l0"] = np.zeros((3 * D, D + 1))
  with pytest.raises(ValueError) as err:
    variables_from_torch_state_dict(sd, hand_config())
  msg = str(err.value)
  assert "missing (1): ['graph_bw.threshold.0.weight']" in msg
  assert f"decoder_fw.weight_ih_l0: expected ({3 * D}, {D}), got ({3 * D}, {D + 1})" in msg


def test_name_rules_invert():
  for name in hand_state_dict(official=True):
    peer = convert.official_to_peer_name(name)
    if peer is None:
      assert name.endswith(".out.weight")
    else:
      assert convert.peer_to_official_name(peer) == name


def test_wrong_config_is_a_shape_error():
  with pytest.raises(ValueError, match=r"enc_emb.weight: expected \(7, 8\), got \(7, 4\)"):
    variables_from_torch_state_dict(hand_state_dict(), hand_config(dim=8, num_heads=2))
  with pytest.raises(ValueError, match="missing"):     # a GRU checkpoint, residual config
    variables_from_torch_state_dict(hand_state_dict(), hand_config(composition="residual"))


def test_tied_output_weight_must_equal_the_embedding():
  sd = hand_state_dict()
  sd["dec_net_fw.out.weight"] = sd["dec_net_fw.out.weight"] + 1
  with pytest.raises(ValueError, match="dec_net_fw.out.weight is tied"):
    variables_from_torch_state_dict(sd, hand_config())


def test_duplicate_names_and_unsupported_configs():
  sd = hand_state_dict()
  sd["embed.weight"] = sd["enc_emb.weight"]
  with pytest.raises(ValueError, match="both map to 'embed.weight'"):
    variables_from_torch_state_dict(sd, hand_config())
  with pytest.raises(ValueError, match="norm='batch'"):
    variables_from_torch_state_dict(hand_state_dict(), hand_config(norm="layer"))


def test_convert_tensor_unknown_name():
  with pytest.raises(KeyError, match="no glomo_jax leaf"):
    convert_tensor("graph_fw.nothing.weight", np.zeros(1), hand_config())


def test_load_checkpoint_without_torch(monkeypatch):
  monkeypatch.setitem(sys.modules, "torch", None)     # import torch raises ImportError
  with pytest.raises(ImportError, match="needs PyTorch"):
    load_torch_checkpoint("model.pt")


def test_load_checkpoint_with_torch(tmp_path):
  torch = pytest.importorskip("torch")
  sd = hand_state_dict()
  path = str(tmp_path / "sd.pt")
  torch.save({"state_dict": {k: torch.from_numpy(np.asarray(v)) for k, v in sd.items()}}, path)
  loaded = load_torch_checkpoint(path)
  assert set(loaded) == set(sd)
  np.testing.assert_array_equal(loaded["enc_emb.weight"], sd["enc_emb.weight"])
  # the release pickles the whole module (torch.save(model)): refused unless trusted
  module = torch.nn.Linear(2, 3)
  torch.save(module, path)
  with pytest.raises(ValueError, match="weights_only=False"):
    load_torch_checkpoint(path)
  loaded = load_torch_checkpoint(path, weights_only=False)
  np.testing.assert_array_equal(loaded["weight"], module.weight.detach().numpy())
