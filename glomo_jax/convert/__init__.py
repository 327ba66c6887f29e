"""Load PyTorch GLoMo weights: the authors' release or the PyTorch peer.

Two naming schemes are accepted, also mixed in one dict:

* the authors' release (kimiyoung/glomo ``pretrain/model.py``, class
  ``Model``): ``enc_emb.weight``, ``st_predictor_{fw,bw}.key_cnn.{i}.0.*``
  (Conv1d), ``.key_cnn.{i}.1.*`` (BatchNorm1d), ``query_cnn``,
  ``key_dot_trans.{l}``, ``query_dot_trans.{l}``, ``sparse_trans.{l}``
  (sparse_mode 4), ``sparse_bias`` (sparse_mode 2), ``gru_cell``,
  ``value_trans.{l}``, ``dec_net_{fw,bw}.rnn_fw.*`` and
  ``dec_net_{fw,bw}.out.weight`` (tied to the embedding: checked, dropped);
* the PyTorch peer's (a PyTorch implementation of the GLoMo pretraining
  model that the benchmarks compare against; benchmarks/README.md):
  ``embed.weight``, ``graph_{fw,bw}.key_convs.{i}.conv.weight``, ``.bn.*``,
  ``key_proj.{l}``, ``query_proj.{l}``, ``threshold.{l}``, ``gru``,
  ``value_proj.{l}``, ``decoder_{fw,bw}.weight_ih_l{n}`` … The release's
  names are first rewritten to these (`official_to_peer_name`).

Layouts (torch → glomo_jax):

* Linear(d, K·H) weight [K·H, d] of layer l → ``key_kernel[l]`` [d, K, H]
  (= weight.T reshaped; output unit k·H + h is head k, unit h), bias [K·H] →
  ``key_bias[l]`` [K, H]; the same for the queries.
* threshold Linear(H, 1) of layer l: weight [1, H] → ``threshold_kernel[l]``
  [H], bias [1] → ``threshold_bias[l]``; the release's ``sparse_bias`` [L] →
  ``threshold_bias`` [L] (threshold='scalar').
* Conv1d weight [out, in, k] → kernel [k, in, out]; bias as is.
* BatchNorm1d weight/bias → ``norm/scale``/``norm/bias`` (params);
  running_mean/running_var → ``norm/mean``/``norm/var`` (batch_stats);
  ``num_batches_tracked`` is dropped (momentum is fixed, it is not used).
* GRU / GRUCell weight_ih [3h, in] → input_kernel [in, 3h], weight_hh →
  hidden_kernel, bias_ih/bias_hh → input_bias/hidden_bias (gate order r, z, n
  is the same); decoder layer n from ``*_l{n}``.
* value Linear(d, d) of layer l → ``value_kernel[l]`` = weight.T,
  ``value_bias[l]``.

Values may be numpy arrays or torch tensors; this module never imports torch
(only `load_torch_checkpoint` does, lazily).

API: `config_from_torch_state_dict` (a ModelConfig from the shapes),
`variables_from_torch_state_dict` (the whole variable tree),
`convert_tensor` (one tensor or gradient -> its leaf), `load_torch_checkpoint`
(.pt -> {name: numpy array}), `official_to_peer_name` / `peer_to_official_name`.
``benchmarks/torch_equivalence.py`` checks the result against the peer.
"""
from glomo_jax.convert.layout import (config_from_torch_state_dict, convert_tensor,
                                     variables_from_torch_state_dict)
from glomo_jax.convert.names import (load_torch_checkpoint, official_to_peer_name,
                                    peer_to_official_name)

__all__ = ["config_from_torch_state_dict", "convert_tensor", "load_torch_checkpoint",
           "official_to_peer_name", "peer_to_official_name", "variables_from_torch_state_dict"]
