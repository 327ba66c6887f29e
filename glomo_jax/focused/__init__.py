"""Ke et al. (2018), "Focused Hierarchical RNNs for
Conditional Sequence Processing" (docs/focused.md), on the training loop.

* `model`: `FocusedEncoder` (lower LSTM, boundary gate, upper LSTM that
  carries its state where the gate is closed; kinds 'fhe', 'lstm1',
  'lstm2'), `QuestionAttention`, `PickingReader`.
* `objective`: the answer's log-likelihood, REINFORCE for the gate with a
  leave-one-out baseline, the sparsity cost, the entropy term.
* `picking`: the picking task's sets (generated, malicious, a user's JSON
  lines) and its answer rule.
* `config`, `task`: `PickingConfig`, `PickingTask`, `run_picking` (the run
  kind 'picking').
* `spans`: where a trained reader reads on longer sequences (the gate
  openness and the attention's mass span by span: `SpanReader`; `load_picking_run`).
"""
from glomo_jax.focused.config import FocusedOptions, GateObjective, PickingConfig
from glomo_jax.focused.model import FocusedEncoder, PickingReader
from glomo_jax.focused.picking import PickingSet, read_picking, targets
from glomo_jax.focused.task import PickingTask, run_picking

__all__ = ["FocusedEncoder", "FocusedOptions", "GateObjective", "PickingConfig", "PickingReader",
           "PickingSet", "PickingTask", "read_picking", "run_picking", "targets"]
