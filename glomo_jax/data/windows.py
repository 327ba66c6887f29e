"""Windows of a token stream, shuffled per epoch, batched, sharded by host, resumable.

Window arithmetic (authors: bptt 200, shift 100). Window w covers stream
positions ``[w·shift, w·shift + bptt)``. With ``tail='drop'`` only windows that
fit wholly in the stream are kept. With ``tail='pad'`` (default), when the
full windows leave tokens at the end uncovered, one more window starting at
the next multiple of ``shift`` is added; its part past the end of the stream
is ``pad_id`` with mask 0 (fewer than ``shift`` positions, and only in that one
window). A stream shorter than ``bptt`` tokens is an error either way.

Order. Epoch e visits the windows in the order
``np.random.default_rng([seed, e]).permutation(num_windows)`` (or in stream
order when ``shuffle=False``) and cuts it into global batches of
``batch_size`` windows. ``drop_remainder=True`` drops the last
``num_windows mod batch_size`` windows of the permutation (different ones
every epoch); ``False`` keeps them in a last batch filled up with padding rows
(tokens pad_id, mask 0, window_index -1), so every batch has the same shape.

Hosts. Process p of P takes rows ``[p·b, (p+1)·b)`` of every global batch,
b = batch_size / P (an error unless it divides). Every host holds the same
stream and computes the same permutation, so the hosts' rows are disjoint and
together are exactly the global batch, and the iterator state is the same on
every host.

Batches are dicts of numpy arrays:

* ``tokens``: int32 [b, bptt].
* ``mask``: int32 [b, bptt], 1 for stream tokens, 0 for tail / row padding.
* ``window_index``: int64 [b], the window's index (its start is
  window_index·shift), -1 for padding rows.
* with a stream that has arcs (synthetic corpus): ``arc_source`` int32
  [b, bptt], for a position that is the target of a planted arc whose source
  lies in the same window, the source's position in the window (always
  smaller); -1 elsewhere (no arc, or the source fell before the window's
  start); ``arc_kind`` int8 [b, bptt], synthetic.ARC_* code there, 0 elsewhere.

Resume: `state()` is a small JSON-serialisable dict (epoch, step within the
epoch, seed and the settings that must match); `restore(state)` continues
exactly where it stopped: the batches that follow are those the uninterrupted
iterator would have produced.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Iterator, Mapping

import numpy as np

from glomo_jax.data.corpus import CorpusSpec, CorpusStats
from glomo_jax.data.stream import TokenStream, build_stream, split_stream
from glomo_jax.data.tokenizer import PAD_ID, Tokenizer

STATE_VERSION = 1
TAILS = ("pad", "drop")


def window_starts(num_tokens: int, bptt: int, shift: int, tail: str = "pad") -> np.ndarray:
  """Start positions (int64 [num_windows]) of the windows of a stream.

  Raises:
    ValueError: if the stream is shorter than one window, or on bad arguments.
  """
  if bptt < 1 or shift < 1:
    raise ValueError(f"bptt and shift must be >= 1, got bptt={bptt}, shift={shift}")
  if tail not in TAILS:
    raise ValueError(f"unknown tail {tail!r}; choose one of {TAILS}")
  if num_tokens < bptt:
    raise ValueError(f"token stream has {num_tokens} tokens, fewer than one window "
                     f"of bptt={bptt} tokens")
  starts = np.arange(0, num_tokens - bptt + 1, shift, dtype=np.int64)
  if tail == "pad":
    last = int(starts[-1]) + shift
    if int(starts[-1]) + bptt < num_tokens and last < num_tokens:
      starts = np.append(starts, last)
  return starts


class WindowIterator:
  """Yields this host's rows of each global batch; resumable (see module doc).

  Args:
    stream: the token stream (the same on every host).
    batch_size: global batch size, in windows.
    bptt: window length, in tokens.
    shift: distance between window starts, in tokens.
    seed: shuffling seed.
    shuffle: visit windows in a per-epoch permutation (else in stream order).
    num_epochs: stop after this many epochs (None: never stop).
    drop_remainder: see the module docstring.
    tail: 'pad' or 'drop'.
    process_index, process_count: this host and the number of hosts.
  """

  def __init__(self, stream: TokenStream, *, batch_size: int, bptt: int = 200,
               shift: int = 100, seed: int = 0, shuffle: bool = True,
               num_epochs: int | None = None, drop_remainder: bool = True,
               tail: str = "pad", process_index: int = 0, process_count: int = 1):
    if batch_size < 1:
      raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if not 0 <= process_index < process_count:
      raise ValueError(f"need 0 <= process_index < process_count, got "
                       f"{process_index}, {process_count}")
    if batch_size % process_count:
      raise ValueError(f"global batch_size {batch_size} is not divisible by "
                       f"process_count {process_count}")
    self.stream = stream
    self.batch_size = batch_size
    self.bptt = bptt
    self.shift = shift
    self.seed = seed
    self.shuffle = shuffle
    self.num_epochs = num_epochs
    self.drop_remainder = drop_remainder
    self.tail = tail
    self.process_index = process_index
    self.process_count = process_count
    self.local_batch_size = batch_size // process_count
    self.starts = window_starts(stream.num_tokens, bptt, shift, tail)
    n = len(self.starts)
    if drop_remainder and n < batch_size:
      raise ValueError(f"only {n} windows of bptt={bptt}, shift={shift} in "
                       f"{stream.num_tokens} tokens, fewer than batch_size={batch_size}; "
                       "use drop_remainder=False or a smaller batch")
    self.batches_per_epoch = n // batch_size if drop_remainder else -(-n // batch_size)
    self._offsets = np.arange(bptt, dtype=np.int64)
    self._order_epoch = -1
    self._order = np.empty(0, np.int64)
    self.epoch = 0
    self.step = 0

  @property
  def num_windows(self) -> int:
    return len(self.starts)

  def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
    return self

  def order(self, epoch: int) -> np.ndarray:
    """Window indices in the order epoch `epoch` visits them (int64 [num_windows])."""
    if epoch != self._order_epoch:
      n = self.num_windows
      self._order = (np.random.default_rng([self.seed, epoch]).permutation(n)
                     if self.shuffle else np.arange(n, dtype=np.int64))
      self._order_epoch = epoch
    return self._order

  def global_window_indices(self, epoch: int, step: int) -> np.ndarray:
    """Window indices of global batch `step` of `epoch`; -1 marks padding rows."""
    chosen = self.order(epoch)[step * self.batch_size:(step + 1) * self.batch_size]
    if len(chosen) < self.batch_size:
      chosen = np.concatenate([chosen, np.full(self.batch_size - len(chosen), -1)])
    return chosen.astype(np.int64)

  def batch(self, epoch: int, step: int) -> dict[str, np.ndarray]:
    """This host's rows of global batch `step` of `epoch` (no state change)."""
    rows = slice(self.process_index * self.local_batch_size,
                 (self.process_index + 1) * self.local_batch_size)
    return self.gather(self.global_window_indices(epoch, step)[rows])

  def gather(self, window_index: np.ndarray) -> dict[str, np.ndarray]:
    """Batch arrays for the given window indices (-1 = padding row)."""
    stream = self.stream
    n = stream.num_tokens
    real_row = window_index >= 0
    start = np.where(real_row, self.starts[np.maximum(window_index, 0)], n)
    pos = start[:, None] + self._offsets[None, :]  # [b, bptt] stream positions
    inside = pos < n
    clipped = np.minimum(pos, n - 1)
    out = {
        "tokens": np.where(inside, stream.tokens[clipped], PAD_ID).astype(np.int32),
        "mask": inside.astype(np.int32),
        "window_index": window_index.astype(np.int64),
    }
    if stream.has_arcs:
      src = stream.arc_source[clipped]
      has = inside & (src >= start[:, None])
      out["arc_source"] = np.where(has, src - start[:, None], -1).astype(np.int32)
      out["arc_kind"] = np.where(has, stream.arc_kind[clipped], 0).astype(np.int8)
    return out

  def __next__(self) -> dict[str, np.ndarray]:
    if self.num_epochs is not None and self.epoch >= self.num_epochs:
      raise StopIteration
    out = self.batch(self.epoch, self.step)
    self.step += 1
    if self.step == self.batches_per_epoch:
      self.epoch, self.step = self.epoch + 1, 0
    return out

  def _settings(self) -> dict[str, Any]:
    return {"seed": self.seed, "batch_size": self.batch_size, "bptt": self.bptt,
            "shift": self.shift, "shuffle": self.shuffle, "tail": self.tail,
            "drop_remainder": self.drop_remainder, "num_windows": self.num_windows,
            "num_tokens": self.stream.num_tokens}

  def state(self) -> dict[str, Any]:
    """Position and settings, JSON-serialisable; the same on every host."""
    return {"version": STATE_VERSION, "epoch": self.epoch, "step": self.step,
            **self._settings()}

  def restore(self, state: Mapping[str, Any]) -> None:
    """Continues from `state` (from `state()` of an iterator with the same settings).

    Raises:
      ValueError: if the state's version or settings differ from this
        iterator's (e.g. another seed, batch size or stream).
    """
    if state.get("version") != STATE_VERSION:
      raise ValueError(f"iterator state version {state.get('version')}, "
                       f"expected {STATE_VERSION}")
    mismatch = {k: (state.get(k), v) for k, v in self._settings().items()
                if state.get(k) != v}
    if mismatch:
      raise ValueError("the checkpoint's data position does not fit this data "
                       f"(checkpoint, now): {mismatch}; rerun with the run's original "
                       "corpus and window settings, or in a new --workdir")
    epoch, step = int(state["epoch"]), int(state["step"])
    if epoch < 0 or not 0 <= step < self.batches_per_epoch:
      raise ValueError(f"bad position epoch={epoch}, step={step} "
                       f"(batches per epoch: {self.batches_per_epoch})")
    self.epoch, self.step = epoch, step


@dataclasses.dataclass
class PretrainingData:
  """Streams and iterators of one pretraining run (see `pretraining_data`).

  Attributes:
    train: the training iterator (endless, shuffled).
    train_stream, eval_stream: the token streams (eval_stream None without a
      held-out split).
    tokenizer: the tokenizer used.
    eval_kwargs: the settings of `eval_iterator`.
  """
  train: WindowIterator
  train_stream: TokenStream
  eval_stream: TokenStream | None
  tokenizer: Tokenizer
  eval_kwargs: dict[str, Any]

  def eval_iterator(self) -> WindowIterator:
    """A fresh pass over the held-out windows: stream order, one epoch, every
    window (the last batch filled up with padding rows)."""
    if self.eval_stream is None:
      raise ValueError("no held-out split (heldout_fraction was 0)")
    return WindowIterator(self.eval_stream, shuffle=False, num_epochs=1,
                          drop_remainder=False, **self.eval_kwargs)


def pretraining_data(corpus: CorpusSpec | Mapping[str, Any], tokenizer: Tokenizer, *,
                     batch_size: int, bptt: int = 200, shift: int = 100, seed: int = 0,
                     heldout_fraction: float = 0.01, eval_batch_size: int | None = None,
                     cache_dir: str | None = None, process_index: int = 0,
                     process_count: int = 1, num_threads: int = 1, tail: str = "pad",
                     stats: CorpusStats | None = None) -> PretrainingData:
  """Corpus -> token stream (cached) -> held-out split -> window iterators.

  Every host reads and tokenizes the whole corpus (or loads it from the
  cache) and takes its rows of each global batch, so shuffling is global and
  the iterator state is host-independent. The held-out split is the last
  ceil(heldout_fraction · documents) documents (0: none).
  """
  stream = build_stream(corpus, tokenizer, cache_dir=cache_dir, num_threads=num_threads,
                        stats=stats)
  eval_stream = None
  if heldout_fraction:
    stream, eval_stream = split_stream(stream, heldout_fraction)
  hosts = dict(process_index=process_index, process_count=process_count)
  train = WindowIterator(stream, batch_size=batch_size, bptt=bptt, shift=shift,
                         seed=seed, tail=tail, **hosts)
  eval_kwargs = dict(batch_size=eval_batch_size or batch_size, bptt=bptt, shift=shift,
                     tail=tail, **hosts)
  if eval_stream is not None:  # fail now, not at the first evaluation
    window_starts(eval_stream.num_tokens, bptt, shift, tail)
  return PretrainingData(train, stream, eval_stream, tokenizer, eval_kwargs)
