"""Matmul and convolution FLOPs of one GLoMo training step, from the shapes."""
from __future__ import annotations


def model_flops(config, bsz: int, bptt: int, every_row: bool = False) -> dict:
  """Matmul/conv FLOPs of one training step, counted from the shapes.

  A multiply-add is 2 FLOPs. Per direction (both are counted), with B = bsz,
  T = bptt, d, V, K heads of size H, L graph layers, k kernel, D =
  context_length, n decoder start positions (sample_positions, or T − D when
  0), N = B·n decoder rows, and R = the target rows of the top graph layer
  (n: glomo_jax computes the top layer only where the decoder starts,
  `GraphPredictor.split_graphs`; T with ``every_row``, as the peer and the
  authors do):

  * conv: (key_layers + query_layers) · 2·B·T'·k·d·d, T' = T + k − 1 with
    batch norm (the authors' both-sided padding computes T + k − 1 outputs),
    else T;
  * key_query_proj: keys 2·B·T·d·L·K·H, queries 2·B·(T·(L−1) + R)·d·K·H;
  * threshold (query threshold): 2·B·K·H·(T·(L−1) + R);
  * scores: 2·B·K·H·T·(T·(L−1) + R) (dense rows × T, masked afterwards);
  * graph_mixing (graph × values, K heads of d/K): 2·B·d·T·(T·(L−1) + R);
  * composition: GRU: 2·B·(T·(L−1) + R)·(2d·3d + d·3d) (input and hidden
    gates); residual: L · 2·B·T·d·d (value maps, at every source);
  * decoder: hidden gates decoder_layers · 2·N·D·d·3d; input gates
    (decoder_layers − 1) · 2·N·D·d·3d + 2·M·d·3d, where the first layer's
    M = min(N·(D − 1), B·T) rows are what `ContextDecoder.decode_windows`
    computes (step 0's input is zero; overlapping windows share a
    position's gates); M = N·D with ``every_row``, as the peer does;
  * output_layer (tied softmax over V): 2·N·D·d·V.

  Not counted: element-wise work (BatchNorm, ReLU, gates' sigmoid/tanh,
  graph normalisation, softmax, loss), gathers/scatters (embedding lookup
  and its gradient), the gradient clip and the SGD update. Training =
  3 × forward (backward = 2 × forward: input and weight gradients of every
  matmul; the first conv's input gradient is needed for the embedding).

  Args:
    config: a glomo_jax ModelConfig (context objective).
    bsz, bptt: batch size and window length.
    every_row: count the peer's work: the top layer at every position, the
      decoder's first-layer input gates at every step of every window.

  Returns:
    {'forward': {part: FLOPs, both directions}, 'forward_total', 'train'}.
  """
  c = config
  B, T = bsz, bptt
  d, V, K, H, L = c.dim, c.vocab_size, c.num_heads, c.head_dim, c.num_graph_layers
  k, D = c.kernel_size, c.context_length
  n = c.sample_positions if c.sample_positions > 0 else T - D
  N = B * n
  R = T if (every_row or not c.decoupled) else n
  rows = T * (L - 1) + R                       # target rows over all layers
  part = {}
  if c.decoupled:
    t_conv = T + k - 1 if c.norm == "batch" else T
    part["conv"] = (c.key_layers + c.query_layers) * 2 * B * t_conv * k * d * d
  part["key_query_proj"] = 2 * B * T * d * L * K * H + 2 * B * rows * d * K * H
  if c.sparsity == "squared_relu" and c.threshold == "query":
    part["threshold"] = 2 * B * K * H * rows
  part["scores"] = 2 * B * K * H * T * rows
  part["graph_mixing"] = 2 * B * d * T * rows
  if c.composition == "gru":
    part["composition"] = 2 * B * rows * (2 * d * 3 * d + d * 3 * d)
  else:
    part["composition"] = L * 2 * B * T * d * d
  first_rows = N * D if every_row else min(N * (D - 1), B * T)
  part["decoder"] = (c.decoder_layers * 2 * N * D * d * 3 * d
                     + (c.decoder_layers - 1) * 2 * N * D * d * 3 * d
                     + 2 * first_rows * d * 3 * d)
  part["output_layer"] = 2 * N * D * d * V
  forward = {name: 2 * value for name, value in part.items()}  # two directions
  total = sum(forward.values())
  return {"forward": forward, "forward_total": total, "train": 3 * total}
