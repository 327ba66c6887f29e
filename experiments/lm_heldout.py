r"""Held-out next-token cross-entropy of a GLoMo pretraining run or an LSTM
run (experiments/lstm_lm.py): the one held-out number the two language
models share (`lstm_control.heldout_next_token_loss`).

  python -m experiments.lm_heldout --workdir=runs/wiki_cpu [--step=N] [--eval_batches=20]

GLoMo's own held-out loss (`heldout/loss` of its run) averages both
directions' cross-entropy of the 3 tokens after each position; this is its
forward direction's first token only, every real token after a window's
first, over the run's own held-out windows (the first --eval_batches
batches; default the run's `eval_batches`, 0: all). For an LSTM run it is
its `heldout/loss`. Reads the run's tokenizer and token cache (the corpus
files when the cache is absent, which it then writes).
"""
from __future__ import annotations

from absl import flags

from experiments import cli

_WORKDIR = flags.DEFINE_string("workdir", None, "A GLoMo pretraining or LSTM run's workdir.")
_STEP = flags.DEFINE_integer("step", None, "Checkpoint step (default: the newest).")
_EVAL_BATCHES = flags.DEFINE_integer("eval_batches", None,
                                     "Held-out batches (default: the run's; 0: all).")
_OUTPUT_JSON = flags.DEFINE_string("output_json", None, "Write the figures as JSON.")
flags.mark_flags_as_required(["workdir"])


def main(argv):
  del argv
  from glomo_jax.io import write_json  # noqa: PLC0415
  from experiments.lstm_control import (heldout_next_token_loss,  # noqa: PLC0415
                                        restore_language_model)

  config, model, variables, _, step = restore_language_model(_WORKDIR.value, _STEP.value)
  result = heldout_next_token_loss(config, model, variables, _WORKDIR.value,
                                   _EVAL_BATCHES.value)
  result.update(workdir=_WORKDIR.value, step=step, model=type(model).__name__)
  print(f"{type(model).__name__} step {step}: held-out next-token cross-entropy "
        f"{result['loss']:.4f} nats over {int(result['tokens'])} tokens")
  if _OUTPUT_JSON.value:
    write_json(_OUTPUT_JSON.value, result)


if __name__ == "__main__":
  cli.run(main)
