"""The two naming schemes of PyTorch GLoMo weights (the authors' release and
the PyTorch peer), and reading them from a .pt file; see `glomo_jax.convert`."""
from __future__ import annotations

import re
from typing import Any, Mapping

import numpy as np

# the release's names -> the peer's (as the peer's `_NAME_RULES`), plus
# sparse_mode 2's per-layer bias, which the peer does not have
_OFFICIAL_RULES = [
    (r"^enc_emb\.", "embed."),
    (r"^st_predictor_(fw|bw)\.key_cnn\.(\d+)\.0\.", r"graph_\1.key_convs.\2.conv."),
    (r"^st_predictor_(fw|bw)\.key_cnn\.(\d+)\.1\.", r"graph_\1.key_convs.\2.bn."),
    (r"^st_predictor_(fw|bw)\.query_cnn\.(\d+)\.0\.", r"graph_\1.query_convs.\2.conv."),
    (r"^st_predictor_(fw|bw)\.query_cnn\.(\d+)\.1\.", r"graph_\1.query_convs.\2.bn."),
    (r"^st_predictor_(fw|bw)\.key_dot_trans\.", r"graph_\1.key_proj."),
    (r"^st_predictor_(fw|bw)\.query_dot_trans\.", r"graph_\1.query_proj."),
    (r"^st_predictor_(fw|bw)\.sparse_trans\.", r"graph_\1.threshold."),
    (r"^st_predictor_(fw|bw)\.sparse_bias$", r"graph_\1.sparse_bias"),
    (r"^st_predictor_(fw|bw)\.gru_cell\.", r"graph_\1.gru."),
    (r"^st_predictor_(fw|bw)\.value_trans\.", r"graph_\1.value_proj."),
    (r"^dec_net_(fw|bw)\.rnn_fw\.", r"decoder_\1."),
]
_TIED = re.compile(r"^dec_net_(fw|bw)\.out\.weight$")
_DROPPED = re.compile(r"(^|\.)num_batches_tracked$")


def official_to_peer_name(name: str) -> str | None:
  """A release (or peer) name -> the peer's name; None for the decoders'
  output weights, which are the tied embedding. Peer names pass unchanged."""
  if _TIED.match(name):
    return None
  for pattern, replacement in _OFFICIAL_RULES:
    name = re.sub(pattern, replacement, name)
  return name


_PEER_RULES = [  # the inverse of _OFFICIAL_RULES, for messages
    (r"^embed\.", "enc_emb."),
    (r"^graph_(fw|bw)\.(key|query)_convs\.(\d+)\.conv\.", r"st_predictor_\1.\2_cnn.\3.0."),
    (r"^graph_(fw|bw)\.(key|query)_convs\.(\d+)\.bn\.", r"st_predictor_\1.\2_cnn.\3.1."),
    (r"^graph_(fw|bw)\.(key|query)_proj\.", r"st_predictor_\1.\2_dot_trans."),
    (r"^graph_(fw|bw)\.threshold\.", r"st_predictor_\1.sparse_trans."),
    (r"^graph_(fw|bw)\.sparse_bias$", r"st_predictor_\1.sparse_bias"),
    (r"^graph_(fw|bw)\.gru\.", r"st_predictor_\1.gru_cell."),
    (r"^graph_(fw|bw)\.value_proj\.", r"st_predictor_\1.value_trans."),
    (r"^decoder_(fw|bw)\.", r"dec_net_\1.rnn_fw."),
]


def peer_to_official_name(name: str) -> str:
  """The peer's name -> the release's."""
  for pattern, replacement in _PEER_RULES:
    name = re.sub(pattern, replacement, name)
  return name


def _to_numpy(value: Any) -> np.ndarray:
  if hasattr(value, "detach"):                       # a torch tensor
    value = value.detach().cpu()
    if str(value.dtype) == "torch.bfloat16":          # numpy has no bfloat16
      value = value.float()
    value = value.numpy()
  return np.asarray(value)


def _normalize(state_dict: Mapping[str, Any], origin: dict | None = None):
  """-> ({peer name: array}, {release name of a tied output weight: array});
  fills `origin` with {peer name: the given name}."""
  out, tied = {}, {}
  origin = {} if origin is None else origin
  for name, value in state_dict.items():
    bare = name[len("module."):] if name.startswith("module.") else name
    new = official_to_peer_name(bare)
    if new is None:
      tied[name] = _to_numpy(value)
      continue
    if _DROPPED.search(new):
      continue
    if new in out:
      raise ValueError(f"state_dict names {origin[new]!r} and {name!r} both "
                       f"map to {new!r}")
    out[new], origin[new] = _to_numpy(value), name
  return out, tied


# ---------------------------------------------------------------------------
# reading .pt files
# ---------------------------------------------------------------------------
def load_torch_checkpoint(path: str, weights_only: bool = True) -> dict[str, np.ndarray]:
  """Reads a PyTorch checkpoint into {name: numpy array} (needs torch).

  Accepts a state_dict, a dict holding one under 'state_dict' or 'model', or
  (with ``weights_only=False``) a whole pickled module, which is what the
  release's ``pretrain/main.py`` writes (``torch.save(model, 'model.pt')``):
  unpickling that runs code from the file and needs the release's
  ``model.py``/``nn_utils.py`` importable, so only do it for files you trust.

  Raises:
    ImportError if torch is not installed; ValueError if the file holds
    something else.
  """
  try:
    import torch  # pylint: disable=import-outside-toplevel
  except ImportError as err:
    raise ImportError(
        "reading a .pt checkpoint needs PyTorch, which glomo_jax does not "
        "depend on: pip install 'torch==2.13.0' (CPU wheel), or save the "
        "state_dict as numpy arrays elsewhere and pass them to "
        "variables_from_torch_state_dict") from err
  try:
    obj = torch.load(path, map_location="cpu", weights_only=weights_only)
  except Exception as err:  # torch raises UnpicklingError for pickled modules
    if weights_only:
      raise ValueError(
          f"{path} is not a plain state_dict ({type(err).__name__}: "
          f"{str(err).splitlines()[0] if str(err) else ''}). The release saves the "
          "whole model (torch.save(model)); load it with weights_only=False "
          "and the release's model.py/nn_utils.py on sys.path, only if you "
          "trust the file") from err
    raise
  if hasattr(obj, "state_dict") and callable(obj.state_dict):
    obj = obj.state_dict()
  if isinstance(obj, Mapping):
    for key in ("state_dict", "model"):
      if isinstance(obj.get(key), Mapping):
        obj = obj[key]
        break
  if not isinstance(obj, Mapping) or not all(hasattr(v, "shape") for v in obj.values()):
    raise ValueError(f"{path} holds {type(obj).__name__}, not a state_dict of tensors")
  return {name: _to_numpy(value) for name, value in obj.items()}
