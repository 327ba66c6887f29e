"""The peer's named configs, mirrored, and the glomo_jax model of a run."""
from __future__ import annotations

import argparse
import ast
import os

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_WIKI = os.path.join(REPO, "..", "shared", "data", "wiki_text")
DEFAULT_RESULTS = os.path.join(REPO, "benchmarks", "results")
PEER_ON_DEVICE = os.path.join(REPO, "benchmarks", "peer_on_device.py")

# The peer's named configs (its module-level CONFIGS; benchmarks/README.md,
# "The peer"), in its own flag names. Both configs also use heads 8, head_dim
# d/2, kernel 3, 2 decoder layers, dropout 0, GRU composition,
# scale_grad_by_freq, SGD lr 8, momentum 0.2, clip 0.25.
CONFIGS = {
    "small": dict(d=256, ntokens=10000, bsz=16, bptt=100, dec_len=3, nlayers=3,
                  nlayers_key=4, nlayers_query=4, sample_len=20),
    "paper": dict(d=512, ntokens=100000, bsz=32, bptt=200, dec_len=3, nlayers=3,
                  nlayers_key=4, nlayers_query=4, sample_len=20),
}
HEADS, KERNEL, DEC_LAYERS = 8, 3, 2
LR, MOMENTUM, CLIP = 8.0, 0.2, 0.25
SWEEP_DEFAULTS = {"T": "100,200,400,800", "B": "4,8,16,32"}
# --float32_matmul: jax_default_matmul_precision of the glomo_jax workers,
# and the peer's TensorFloat-32 switch (peer_on_device.py --tf32).
FLOAT32_MATMUL = {"highest": ("highest", 0), "tf32": ("tensorfloat32", 1)}


def resolve(args: argparse.Namespace) -> argparse.Namespace:
  """Fills bsz, bptt, sample_positions from the named config."""
  base = CONFIGS[args.config]
  if args.bsz is None:
    args.bsz = base["bsz"]
  if args.bptt is None:
    args.bptt = base["bptt"]
  if args.sample_positions is None:
    args.sample_positions = base["sample_len"]
  return args


def model_config(args):
  """The glomo_jax ModelConfig of a named config with the overrides."""
  from glomo_jax import ModelConfig  # imported here: the driver never imports JAX
  base = CONFIGS[args.config]
  changes = dict(vocab_size=base["ntokens"], dim=base["d"], num_heads=HEADS,
                 head_dim=base["d"] // 2, num_graph_layers=base["nlayers"],
                 key_layers=base["nlayers_key"], query_layers=base["nlayers_query"],
                 kernel_size=KERNEL, context_length=base["dec_len"],
                 decoder_layers=DEC_LAYERS, sample_positions=args.sample_positions,
                 composition="gru", dropout=0.0, embed_grad_scale_by_freq=True,
                 dtype=args.dtype, kernels=getattr(args, "kernels", "reference"))
  if args.loss_chunk_size:
    changes["loss_chunk_size"] = args.loss_chunk_size
  return ModelConfig.paper(**changes)


def check_peer_configs(path: str) -> None:
  """Fails if the peer's CONFIGS differ from the ones mirrored here."""
  with open(path) as f:
    tree = ast.parse(f.read(), path)
  for node in tree.body:
    if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "CONFIGS"
                                            for t in node.targets):
      theirs = {}
      for key, call in zip(node.value.keys, node.value.values):
        theirs[ast.literal_eval(key)] = {kw.arg: ast.literal_eval(kw.value)
                                         for kw in call.keywords}
      if theirs != CONFIGS:
        raise SystemExit(f"the peer's CONFIGS {theirs} differ from the mirrored {CONFIGS}")
      return
  print(f"warning: no CONFIGS found in {path}; not checked", flush=True)
