r"""From the row before each verb, the forward graphs' weight on its gold
subject (`glomo_jax.classification.subject_arcs`): the demo's arc table on real text.

  python -m experiments.verb_number_arcs --export=runs/wiki_cpu/export \
      --conllu=../shared/data/ud_english_ewt/en_ewt-ud-dev.conllu.gz \
      --select_conllu=../shared/data/ud_english_ewt/en_ewt-ud-train.conllu.gz

The best head is the one with the highest top-1 rate on --select_conllu's
instances (distance 2+), then scored on --conllu's; the untrained twin of
the predictor (same shapes, fresh parameters) is scored beside it.
--output_json keeps every figure (each head too).
"""
from __future__ import annotations

import itertools
import json

from absl import flags

from experiments import cli

_EXPORT = flags.DEFINE_string("export", None, "Exported graph predictor directory.")
_CONLLU = flags.DEFINE_string("conllu", None, "Treebank whose instances are scored.")
_SELECT = flags.DEFINE_string("select_conllu", None, "Treebank on which each predictor's "
                              "best head is chosen (None: --conllu itself, optimistic).")
_OUTPUT_JSON = flags.DEFINE_string("output_json", None, "Write the figures as JSON.")
_BATCH = flags.DEFINE_integer("batch_size", 32, "Instances per predictor call.")
_MAX_SENTENCES = flags.DEFINE_integer("max_sentences", None, "Read each treebank's first N.")
flags.mark_flags_as_required(["export", "conllu"])


def table(result: dict, names: list[str]) -> str:
  """The printed table: one line per group."""
  lines = [f"{'group':15s} {'n':>5s} {'chance':>7s} {'offset':>9s} {'noun':>6s}  "
           + "  ".join(f"{n + ' best head (w / top1)':>36s}  {n + ' mean (w / top1)':>26s}"
                       for n in names)]
  for group in ("distance 2+", "attractors 0", "attractors 1+"):
    if group not in result:
      continue
    e = result[group]
    cells = []
    for n in names:
      b, m = e[n]["best head"], e[n]["mean of heads"]
      cells.append(f"{b['head']:>14s} {b['weight']:.3f} / {b['top1']:.3f}   "
                   f"{m['weight']:.3f} / {m['top1']:.3f}  (nearest other noun: "
                   f"{b['noun weight']:.3f} / {b['noun top1']:.3f}, "
                   f"{m['noun weight']:.3f} / {m['noun top1']:.3f})")
    lines.append(f"{group:15s} {e['examples']:5d} {e['chance']:7.3f} "
                 f"{e['best offset']['offset']:>3d}: {e['best offset']['top1']:.3f} "
                 f"{e['nearest noun']:6.3f}  " + "  ".join(cells))
  lines.append(f"(distance 1, not scored: {result['distance 1']})")
  return "\n".join(lines)


def main(argv):
  del argv
  from glomo_jax.eval.conllu import read_conllu  # noqa: PLC0415
  from glomo_jax.classification.subject_arcs import forward_rows, instances, score_subject_arcs  # noqa: PLC0415
  from glomo_jax.eval.treebank_alignment import untrained_twin  # noqa: PLC0415
  from glomo_jax.export.predictor import load_graph_predictor  # noqa: PLC0415
  from glomo_jax.io import write_json  # noqa: PLC0415

  trained = load_graph_predictor(_EXPORT.value)
  predictors = {"trained": trained, "untrained": untrained_twin(trained)}
  first = lambda path: list(itertools.islice(read_conllu(path), _MAX_SENTENCES.value))  # noqa: E731
  scored = instances(first(_CONLLU.value))
  select = None
  if _SELECT.value:
    chosen = instances(first(_SELECT.value))
    picked = score_subject_arcs(chosen, {n: forward_rows(p, chosen, _BATCH.value)
                                         for n, p in predictors.items()})
    select = {n: picked["distance 2+"][n]["best head"]["head"] for n in predictors}
  rows = {n: forward_rows(p, scored, _BATCH.value) for n, p in predictors.items()}
  result = score_subject_arcs(scored, rows, select)
  result.update(export=_EXPORT.value, conllu=_CONLLU.value, select_conllu=_SELECT.value)
  print(table(result, list(predictors)))
  if _OUTPUT_JSON.value:
    write_json(_OUTPUT_JSON.value, result)
  print(json.dumps({g: {n: result[g][n]["best head"] for n in predictors}
                    for g in ("distance 2+", "attractors 1+") if g in result}, indent=1))


if __name__ == "__main__":
  cli.run(main)
