#!/usr/bin/env python3
"""Runs the PyTorch peer's benchmark with its model on an accelerator.

The peer (a PyTorch implementation of the GLoMo pretraining model; its
interface: benchmarks/README.md, "The peer") builds its model and draws its
token batches on the CPU. This wrapper loads it unchanged and swaps its
``GLoMo`` class for a subclass that moves itself to ``--device`` when built
and moves each ``[bsz, bptt]`` token batch there in ``forward`` (the host
still draws the batch, as glomo_jax's benchmark does before its
``device_put``). The timed step stays the peer's own: draw,
``zero_grad``, forward, backward, clip, fused SGD, ``float(loss)``, which
waits for the device.

``--tf32 1`` lets float32 matmuls and convolutions use TensorFloat-32
(``torch.backends.cuda.matmul.allow_tf32``, ``cudnn.allow_tf32``); 0 (the
default) keeps them float32, as glomo_jax with
``jax_default_matmul_precision=highest``.

Prints the peer's JSON line with ``device``, ``device_name``, ``tf32`` and
``device_peak_mb`` (``torch.cuda.max_memory_allocated``) added. Every other
flag goes to the peer.

  python benchmarks/peer_on_device.py --peer path/to/peer.py \\
      --device cuda --config small --steps 30 --warmup 10
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import sys


def load_peer(path: str):
  spec = importlib.util.spec_from_file_location("glomo_torch_reference", path)
  if spec is None or spec.loader is None:
    raise SystemExit(f"cannot load the peer from {path}")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def on_device(peer, device):
  """The peer's GLoMo class, built on `device`, taking host token batches."""

  class DeviceGLoMo(peer.GLoMo):
    def __init__(self, *args, **kwargs):
      super().__init__(*args, **kwargs)
      self.to(device)

    def forward(self, tokens, mask=None, positions=None):
      tokens = tokens.to(device)
      if mask is not None:
        mask = mask.to(device)
      return super().forward(tokens, mask=mask, positions=positions)

  return DeviceGLoMo


def main(argv=None) -> None:
  # no abbreviations: the peer's own --d must not match --device
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
  p.add_argument("--peer", required=True, help="file of the PyTorch peer")
  p.add_argument("--device", default="cuda", help="torch device, e.g. cuda or cuda:1")
  p.add_argument("--tf32", type=int, choices=(0, 1), default=0)
  ours, rest = p.parse_known_args(argv)
  import torch

  device = torch.device(ours.device)
  if device.type == "cuda" and not torch.cuda.is_available():
    raise SystemExit("torch sees no CUDA device (torch.cuda.is_available() is False)")
  torch.backends.cuda.matmul.allow_tf32 = bool(ours.tf32)
  torch.backends.cudnn.allow_tf32 = bool(ours.tf32)
  peer = load_peer(ours.peer)
  peer.GLoMo = on_device(peer, device)
  args = peer.resolve(peer.build_parser().parse_args(rest))
  with contextlib.redirect_stdout(io.StringIO()):  # the peer prints its own line
    rec = peer.benchmark(args)
  rec["device"] = str(device)
  rec["tf32"] = bool(ours.tf32)
  if device.type == "cuda":
    rec["device_name"] = torch.cuda.get_device_name(device)
    rec["device_peak_mb"] = round(torch.cuda.max_memory_allocated(device) / 2**20, 1)
  print(json.dumps(rec), flush=True)


if __name__ == "__main__":
  main(sys.argv[1:])
