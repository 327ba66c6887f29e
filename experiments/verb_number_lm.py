r"""The pretrained GLoMo model as a language model on verb-number instances:
does it give the agreeing verb form the higher probability
(`glomo_jax.classification.lm_agreement`), split by attractors and subject
distance as the verb-number grids are? The LSTM control
(experiments/lstm_lm.py) is scored the same way.

  python -m experiments.verb_number_lm --workdir=runs/wiki_cpu \
      --examples=runs/verb_number_data/ud_all.jsonl.gz --output_json=runs/vn_lm.json
  python -m experiments.verb_number_lm --workdir=runs/wiki_cpu \
      --conllu=../shared/data/ud_english_ewt/en_ewt-ud-dev.conllu.gz

--workdir is a GLoMo pretraining run or an LSTM run, told apart by its
config.json (`lstm_control.restore_language_model`; its newest checkpoint,
or --step); the examples are verb-number JSON lines
(`glomo_jax.classification.verb_number`) whose verbs are is/are, was/were or has/have, or a treebank's gold instances
(`--conllu`: `verb_number_sources.treebank_examples`; `--max_sentences` of
it). --max_examples takes the first N.
"""
from __future__ import annotations

from absl import flags

from experiments import cli

_WORKDIR = flags.DEFINE_string("workdir", None, "A GLoMo pretraining or LSTM run's workdir "
                               "(its checkpoints).")
_STEP = flags.DEFINE_integer("step", None, "Checkpoint step (default: the newest).")
_EXAMPLES = flags.DEFINE_string("examples", None, "Verb-number JSON lines.")
_CONLLU = flags.DEFINE_string("conllu", None, "Or: a treebank (its gold instances).")
_MAX_SENTENCES = flags.DEFINE_integer("max_sentences", None, "With --conllu: its first N.")
_MAX = flags.DEFINE_integer("max_examples", None, "Score only the first N examples.")
_BATCH = flags.DEFINE_integer("batch_size", 32, "Sequences per model call (two an example).")
_OUTPUT_JSON = flags.DEFINE_string("output_json", None, "Write the figures as JSON.")
flags.mark_flags_as_required(["workdir"])
flags.mark_flags_as_mutual_exclusive(["examples", "conllu"], required=True)


def main(argv):
  del argv
  from glomo_jax.classification.lm_agreement import (agreement_scores, read_probe_examples,  # noqa: PLC0415
                                                     verb_form_log_probs)
  from glomo_jax.classification.verb_number import SCORE_GROUPS  # noqa: PLC0415
  from glomo_jax.io import write_json  # noqa: PLC0415
  from experiments.lstm_control import restore_language_model  # noqa: PLC0415

  if _CONLLU.value:
    import itertools  # noqa: PLC0415
    from glomo_jax.classification.verb_number_sources import treebank_examples  # noqa: PLC0415
    from glomo_jax.eval.conllu import read_conllu  # noqa: PLC0415
    sentences = itertools.islice(read_conllu(_CONLLU.value), _MAX_SENTENCES.value)
    examples = list(itertools.islice(treebank_examples(sentences), _MAX.value))
  else:
    examples = read_probe_examples(_EXAMPLES.value, _MAX.value)
  _, model, variables, tokenizer, step = restore_language_model(_WORKDIR.value, _STEP.value)
  log_probs = verb_form_log_probs(model, variables, tokenizer, examples, _BATCH.value)
  result = agreement_scores(examples, log_probs, SCORE_GROUPS)
  result.update(workdir=_WORKDIR.value, step=step,
                examples_file=_EXAMPLES.value or _CONLLU.value)
  for key in ["accuracy"] + [k for k in result if k.startswith("accuracy/")]:
    group = key.split("/", 1)[1] if "/" in key else "all"
    n = result["examples"] if group == "all" else result[f"examples/{group}"]
    print(f"{group:15s} {int(n):6d}  {100 * result[key]:5.1f} %")
  if _OUTPUT_JSON.value:
    write_json(_OUTPUT_JSON.value, result)


if __name__ == "__main__":
  cli.run(main)
