#!/usr/bin/env python3
"""Numerical equivalence of glomo_jax with the PyTorch peer.

Builds the peer (a PyTorch implementation of the GLoMo pretraining model,
loaded from ``--peer`` or ``$GLOMO_TORCH_PEER``; its interface:
benchmarks/README.md, "The peer") at a small config, randomises its
BatchNorm scales, biases and running statistics, converts its state_dict
with `glomo_jax.convert`, and compares, on the same tokens and the same
sampled decoder positions:

* graphs [B, 2L, K, S, S] (peer ``.graphs()`` vs ``GLoMo.graphs``),
* features [1 + 2L, B, S, d] (``.features()``),
* the loss and every parameter gradient (peer names mapped through the
  converter),
* in BN train mode also the running statistics after one forward,

in BN train and eval mode, float64 and float32, GRU and residual
composition, without and with a padding mask. Prints a table of max abs
differences; exits 1 if a float64 one is > 1e-10 or a float32 one > 1e-4.

Padding (deliberate difference): glomo_jax's graphs also zero the rows of
padding *targets* (padding neither sends nor receives weight), the peer only
masks padding sources. With a mask, graphs and features are compared on real
target positions only, and the decoder positions are drawn so that every
start and target is a real token (the peer's loss does not mask).

  .venv/bin/python benchmarks/torch_equivalence.py --peer path/to/peer.py   # needs torch
  .venv/bin/python benchmarks/torch_equivalence.py --peer path/to/peer.py \\
      --write_golden tests/data/peer_golden.npz
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from glomo_jax import GLoMo  # noqa: E402
from glomo_jax.convert import (config_from_torch_state_dict,  # noqa: E402
                               variables_from_torch_state_dict)

BOUNDS = {"float64": 1e-10, "float32": 1e-4}
PEER_ENV = "GLOMO_TORCH_PEER"  # the peer's file when --peer is not given
QUANTITIES = ("graphs", "features", "loss", "grads", "bn_stats")


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  peer = os.environ.get(PEER_ENV) or None
  p.add_argument("--peer", default=peer, required=peer is None,
                 help=f"file of the PyTorch peer (default: ${PEER_ENV})")
  p.add_argument("--d", type=int, default=64)
  p.add_argument("--ntokens", type=int, default=300)
  p.add_argument("--bsz", type=int, default=4)
  p.add_argument("--bptt", type=int, default=40)
  p.add_argument("--nlayers", type=int, default=3)
  p.add_argument("--nlayers_key", type=int, default=4)
  p.add_argument("--nlayers_query", type=int, default=4)
  p.add_argument("--heads", type=int, default=8)
  p.add_argument("--head_dim", type=int, default=32)
  p.add_argument("--kernel_size", type=int, default=3)
  p.add_argument("--dec_layers", type=int, default=2)
  p.add_argument("--dec_len", type=int, default=3)
  p.add_argument("--sample_len", type=int, default=20)
  p.add_argument("--no_gru", type=int, choices=(0, 1), default=None,
                 help="only this composition (default: both)")
  p.add_argument("--dtypes", default="float64,float32")
  p.add_argument("--modes", default="train,eval", help="BN modes")
  p.add_argument("--masks", default="0,1", help="0: no padding, 1: padding mask")
  p.add_argument("--threads", type=int, default=1, help="torch threads")
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--write_golden", default=None,
                 help="write the tiny float64 golden case for tests/test_convert.py "
                      "to this .npz and exit")
  return p.parse_args(argv)


def load_peer(path):
  if not os.path.isfile(path):
    raise SystemExit(f"no peer at {path}")
  spec = importlib.util.spec_from_file_location("glomo_torch_reference", os.path.abspath(path))
  if spec is None:
    raise FileNotFoundError(f"no peer at {path}")
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod


# ---------------------------------------------------------------------------
# the peer
# ---------------------------------------------------------------------------
def build_peer(mod, a, use_gru, seed, base=None):
  """A float32 peer GLoMo with random BN statistics (float32 values, so that
  .double() changes no value). `base`: a state_dict to copy shared weights from."""
  import torch
  torch.manual_seed(seed)
  peer = mod.GLoMo(d=a.d, ntokens=a.ntokens, nlayers=a.nlayers, nlayers_key=a.nlayers_key,
                   nlayers_query=a.nlayers_query, heads=a.heads, head_dim=a.head_dim,
                   kernel_size=a.kernel_size, dec_layers=a.dec_layers, dec_len=a.dec_len,
                   sample_len=a.sample_len, use_gru=use_gru)
  with torch.no_grad():
    for m in peer.modules():
      if isinstance(m, torch.nn.BatchNorm1d):
        m.weight.uniform_(0.5, 1.5)
        m.bias.uniform_(-0.5, 0.5)
        m.running_mean.uniform_(-0.3, 0.3)
        m.running_var.uniform_(0.5, 2.0)
  if base is not None:
    own = peer.state_dict()
    peer.load_state_dict({k: v for k, v in base.items() if k in own}, strict=False)
  return peer


def peer_outputs(peer, dtype, tokens, mask, positions, train):
  """graphs, features, loss, grads {name: array}, state_dict after one forward."""
  import torch
  peer = peer.double() if dtype == "float64" else peer.float()
  tdt = torch.float64 if dtype == "float64" else torch.float32
  snapshot = {k: v.clone() for k, v in peer.state_dict().items()}
  tok = torch.from_numpy(tokens.astype(np.int64))
  m = None if mask is None else torch.from_numpy(mask).to(tdt)
  pos = tuple(torch.from_numpy(p.astype(np.int64)) for p in positions)
  peer.train(train)
  out = {}
  with torch.no_grad():
    out["graphs"] = peer.graphs(tok, m).numpy()
    peer.load_state_dict(snapshot)
    out["features"] = peer.features(tok, m).numpy()
    peer.load_state_dict(snapshot)
  peer.zero_grad(set_to_none=True)
  loss = peer(tok, m, positions=pos)
  loss.backward()
  out["loss"] = loss.detach().numpy()
  out["grads"] = {n: p.grad.detach().numpy().copy() for n, p in peer.named_parameters()}
  out["state"] = {k: v.detach().numpy().copy() for k, v in peer.state_dict().items()}
  out["n_params"] = sum(p.numel() for p in peer.parameters())
  peer.load_state_dict(snapshot)
  return out


# ---------------------------------------------------------------------------
# glomo_jax
# ---------------------------------------------------------------------------
def jax_outputs(config, variables, tokens, mask, positions, train):
  model = GLoMo(config)
  tok = jnp.asarray(tokens, jnp.int32)
  m = None if mask is None else jnp.asarray(mask)
  pos = tuple(jnp.asarray(p, jnp.int32) for p in positions)
  variables = jax.tree_util.tree_map(jnp.asarray, variables)
  mutable = ["batch_stats"] if train else False

  def apply(params, method=None):
    v = {"params": params, "batch_stats": variables["batch_stats"]}
    kw = dict(train=train, mutable=mutable)
    if method is None:
      kw["positions"] = pos
    else:
      kw["method"] = method
    res = model.apply(v, tok, m, **kw)
    return res if train else (res, {})

  out = {}
  out["graphs"] = np.asarray(apply(variables["params"], GLoMo.graphs)[0])
  out["features"] = np.asarray(apply(variables["params"], GLoMo.features)[0])

  def loss_fn(params):
    (loss, _), updates = apply(params)
    return loss, updates

  (loss, updates), grads = jax.value_and_grad(loss_fn, has_aux=True)(variables["params"])
  out["loss"] = np.asarray(loss)
  out["grads"] = jax.tree_util.tree_map(np.asarray, grads)
  out["batch_stats"] = jax.tree_util.tree_map(np.asarray, updates.get("batch_stats", {}))
  out["n_params"] = sum(x.size for x in jax.tree_util.tree_leaves(variables["params"]))
  return out


# ---------------------------------------------------------------------------
# inputs and comparison
# ---------------------------------------------------------------------------
def make_inputs(a, rng, masked):
  """tokens [B, S], mask [B, S] or None, positions (fw, bw) [n] each."""
  b, s, dec = a.bsz, a.bptt, a.dec_len
  tokens = rng.randint(0, a.ntokens, size=(b, s))
  if not masked:
    hi = s - dec
    return tokens, None, (rng.randint(0, hi, a.sample_len), rng.randint(0, hi, a.sample_len))
  pads = [(i * s) // (3 * b) for i in range(b)]        # right padding of each row
  mask = np.ones((b, s), np.float64)
  for i, p in enumerate(pads):
    mask[i, s - p:] = 0
  shortest = s - max(pads)
  if shortest - dec < 1:
    raise ValueError("sequence too short for a padding mask")
  # every start and target real in both reading directions (the peer's loss
  # has no mask): fw t + D < shortest; bw (flipped) t >= max padding
  pos_fw = rng.randint(0, shortest - dec, a.sample_len)
  pos_bw = rng.randint(max(pads), s - dec, a.sample_len)
  return tokens, mask, (pos_fw, pos_bw)


def max_diff(x, y, where=None):
  d = np.abs(np.asarray(x, np.float64) - np.asarray(y, np.float64))
  if where is not None:
    d = d * np.broadcast_to(where, d.shape)
  return float(d.max()) if d.size else 0.0


def flat_leaves(tree, prefix=()):
  if isinstance(tree, dict):
    for k, v in tree.items():
      yield from flat_leaves(v, prefix + (k,))
  else:
    yield "/".join(prefix), tree


def compare(config, p, j, mask, train):
  """{quantity: (max abs diff, where)} for one setting."""
  real_rows = None if mask is None else mask[:, None, None, :, None]   # graphs [B,2L,K,S,S]
  real_pos = None if mask is None else mask[None, :, :, None]          # feats [1+2L,B,S,d]
  res = {"graphs": (max_diff(p["graphs"], j["graphs"], real_rows), ""),
         "features": (max_diff(p["features"], j["features"], real_pos), ""),
         "loss": (max_diff(p["loss"], j["loss"]), "")}
  # gradients: the peer's names through the converter (buffers from its state)
  named = dict(p["state"])
  named.update(p["grads"])
  peer_grads = variables_from_torch_state_dict(named, config)["params"]
  ours = dict(flat_leaves(j["grads"]))
  worst = max(((max_diff(v, ours[k]), k) for k, v in flat_leaves(peer_grads)))
  res["grads"] = worst
  if train:
    peer_stats = variables_from_torch_state_dict(p["state"], config)["batch_stats"]
    ours = dict(flat_leaves(j["batch_stats"]))
    res["bn_stats"] = max(((max_diff(v, ours[k]), k) for k, v in flat_leaves(peer_stats)))
  return res


def run_setting(mod, a, dtype, use_gru, train, masked, peer32):
  rng = np.random.RandomState(a.seed + 7 * masked + 3 * train)
  tokens, mask, positions = make_inputs(a, rng, masked)
  state = {k: v.numpy() for k, v in peer32.state_dict().items()}
  config = config_from_torch_state_dict(
      state, context_length=a.dec_len, sample_positions=a.sample_len,
      dtype=dtype, param_dtype=dtype, dropout=0.0, embed_grad_scale_by_freq=True)
  variables = variables_from_torch_state_dict(state, config)
  p = peer_outputs(peer32, dtype, tokens, mask, positions, train)
  peer32.float()
  j = jax_outputs(config, variables, tokens, mask, positions, train)
  return compare(config, p, j, mask, train), p, j, mask


def float32_vs_float64(p32, j32, p64, mask):
  """Graph and feature errors of each float32 run against the float64 peer
  (same inputs): tells float32 rounding from a real difference."""
  rows = None if mask is None else mask[:, None, None, :, None]
  pos = None if mask is None else mask[None, :, :, None]
  return {"peer graphs": max_diff(p32["graphs"], p64["graphs"], rows),
          "ours graphs": max_diff(j32["graphs"], p64["graphs"], rows),
          "peer features": max_diff(p32["features"], p64["features"], pos),
          "ours features": max_diff(j32["features"], p64["features"], pos)}


def main(argv=None):
  a = parse_args(argv)
  try:
    import torch
  except ImportError:
    print("torch_equivalence needs PyTorch: .venv/bin/pip install torch==2.13.0 "
          "(that exact version: the CPU wheel)", file=sys.stderr)
    return 2
  torch.set_num_threads(a.threads)
  mod = load_peer(a.peer)
  if a.write_golden:
    write_golden(a.write_golden, mod, a.seed)
    return 0
  comps = [1, 0] if a.no_gru is None else [1 - a.no_gru]
  peers = {g: build_peer(mod, a, bool(g), a.seed) for g in comps}
  rows, failed, ref, vs64 = [], False, {}, []
  for dtype in a.dtypes.split(","):
    for g in comps:
      for mode in a.modes.split(","):
        for masked in (int(x) for x in a.masks.split(",")):
          train = mode == "train"
          run = lambda: run_setting(mod, a, dtype, bool(g), train, bool(masked), peers[g])
          if dtype == "float64":
            with jax.enable_x64(True):
              res, p, j, mask = run()
          else:
            res, p, j, mask = run()
          name = f"{dtype} {'gru' if g else 'residual'} BN-{mode}{' +mask' if masked else ''}"
          key = (g, mode, masked)
          if dtype == "float64":
            ref[key] = p
          elif key in ref:
            vs64.append((name, float32_vs_float64(p, j, ref[key], mask)))
          bad = [q for q, (v, _) in res.items() if not v <= BOUNDS[dtype]]
          bad += ["n_params"] if p["n_params"] != j["n_params"] else []
          failed |= bool(bad)
          rows.append((name, res, p["n_params"], j["n_params"], bad))
          print_row(rows[-1], header=len(rows) == 1)
  print("\nmax |peer - glomo_jax| (n_params: the peer's embedding counts once); "
        "bounds: float64 1e-10, float32 1e-4. With +mask: graphs on real target "
        "rows and features on real positions only (glomo_jax also zeroes "
        "padding-target rows; the peer masks only padding sources); decoder "
        "positions are real tokens in both directions.")
  print("worst leaves (grads | bn_stats):")
  for name, res, *_ in rows:
    print(f"  {name:32s} {res['grads'][1]}"
          + (f" | {res['bn_stats'][1]}" if "bn_stats" in res else ""))
  if vs64:
    print("float32 runs against the float64 peer on the same inputs (rounding "
          "scale):")
    for name, d in vs64:
      print(f"  {name:32s} " + "  ".join(f"{k} {v:.2e}" for k, v in d.items()))
  print("FAIL" if failed else "OK")
  return 1 if failed else 0


# ---------------------------------------------------------------------------
# the golden file of tests/test_convert.py
# ---------------------------------------------------------------------------
GOLDEN = dict(d=16, ntokens=40, bsz=2, bptt=12, nlayers=2, nlayers_key=2,
              nlayers_query=2, heads=4, head_dim=8, kernel_size=3, dec_layers=2,
              dec_len=3, sample_len=6)
GOLDEN_GRADS = ("embed.weight", "graph_fw.key_convs.1.bn.bias",
                "graph_fw.key_convs.1.bn.weight", "graph_bw.query_convs.0.bn.bias",
                "graph_bw.query_proj.1.bias", "graph_fw.key_proj.0.bias",
                "graph_bw.threshold.0.weight", "graph_fw.threshold.1.bias",
                "decoder_bw.bias_hh_l1", "decoder_fw.bias_ih_l0")
GOLDEN_CASE_GRADS = {  # (conv biases before a train-mode BN have zero gradient)
    "gru": ("graph_bw.gru.bias_ih", "graph_fw.key_convs.0.conv.weight"),
    "residual": ("graph_bw.value_proj.0.bias", "graph_bw.query_convs.1.conv.weight"),
    "gru_mask": ("graph_bw.gru.bias_hh",)}


def round_to_float16(peer):
  """Rounds every float parameter and buffer to a float16 value (so the golden
  file can store the weights in float16 with no loss)."""
  import torch
  with torch.no_grad():
    for t in peer.state_dict().values():
      if t.is_floating_point():
        t.copy_(t.half().to(t.dtype))
  return peer


def write_golden(path, mod, seed):
  """Float64 peer outputs of a tiny model, BN train mode: cases 'gru',
  'residual' (the same weights but the GRU cell) and 'gru_mask' (padding).

  Layout: sd/{names, shapes (padded with -1), values} hold the union of both
  peers' state_dicts packed into one float16 vector (every weight and BN
  statistic is rounded to a float16 value first, so the float64 peer has the
  same values); keys/<composition> lists the names of that peer's state_dict;
  <case>/{composition, tokens, mask, pos_fw, pos_bw, graphs, features, loss},
  <case>/grad/<torch name>, and <case>/{bn_names, bn_values} (running
  statistics after the forward), float64.
  """
  a = argparse.Namespace(**GOLDEN, seed=seed)
  peers = {"gru": round_to_float16(build_peer(mod, a, True, seed))}
  base = peers["gru"].state_dict()
  peers["residual"] = round_to_float16(build_peer(mod, a, False, seed, base=base))
  out, sd = {}, {}
  for comp, peer in peers.items():
    state = {k: v.numpy() for k, v in peer.state_dict().items()
             if not k.endswith("num_batches_tracked")}
    for k, v in state.items():
      if k in sd and not np.array_equal(sd[k], v):
        raise AssertionError(f"{k} differs between the gru and residual peers")
      sd[k] = v.astype(np.float16)
    out[f"keys/{comp}"] = np.array(sorted(state))
  names = sorted(sd)                                  # packed: fewer zip members
  out["sd/names"] = np.array(names)
  out["sd/shapes"] = np.array([list(sd[k].shape) + [-1] * (3 - sd[k].ndim) for k in names])
  out["sd/values"] = np.concatenate([sd[k].reshape(-1) for k in names])
  rng = np.random.RandomState(seed)
  for case, comp, masked in (("gru", "gru", False), ("residual", "residual", False),
                             ("gru_mask", "gru", True)):
    tokens, mask, positions = make_inputs(a, rng, masked)
    p = peer_outputs(peers[comp], "float64", tokens, mask, positions, True)
    peers[comp].float()
    out.update({f"{case}/composition": np.array(comp),
                f"{case}/tokens": tokens.astype(np.int32),
                f"{case}/pos_fw": positions[0].astype(np.int32),
                f"{case}/pos_bw": positions[1].astype(np.int32),
                f"{case}/graphs": p["graphs"], f"{case}/features": p["features"],
                f"{case}/loss": np.asarray(p["loss"], np.float64)})
    if mask is not None:
      out[f"{case}/mask"] = mask.astype(np.int8)
    for name in GOLDEN_GRADS + GOLDEN_CASE_GRADS[case]:
      out[f"{case}/grad/{name}"] = p["grads"][name]
    bn = sorted(k for k in p["state"] if ".bn.running_" in k)
    out[f"{case}/bn_names"] = np.array(bn)
    out[f"{case}/bn_values"] = np.stack([p["state"][k] for k in bn])
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  np.savez_compressed(path, **out)
  print(f"wrote {path}: {len(out)} arrays, {os.path.getsize(path) / 1024:.1f} KiB")


def print_row(row, header=False):
  name, res, n_peer, n_ours, bad = row
  if header:
    print(f"{'setting':34s}" + "".join(f"{q:>11s}" for q in QUANTITIES)
          + f"{'n_params peer/ours':>22s}  status")
  cells = "".join(f"{res[q][0]:11.2e}" if q in res else f"{'-':>11s}" for q in QUANTITIES)
  status = "ok" if not bad else "FAIL " + ",".join(bad)
  print(f"{name:34s}{cells}{f'{n_peer}/{n_ours}':>22s}  {status}", flush=True)


if __name__ == "__main__":
  sys.exit(main())
