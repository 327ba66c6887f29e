r"""How peaked and how local an exported predictor's word graphs are on a
text file, next to a uniform graph (glomo_jax.eval.graph_stats).

  python -m experiments.graph_stats --export=runs/wiki_cpu/export \
      --data=../shared/data/mnli/mnli_train_subset_9k.jsonl.xz --field=premise

Reads the last `--num` records of a JSON-lines file (.gz / .xz too), splits
`--field` into words as the task models do, and prints one line per graph
layer (share of empty rows, entropy in nats and how far below a uniform
graph over the same allowed words it is, weight on the word itself and its
neighbours, mean distance in words against the uniform graph's).
"""
from __future__ import annotations

from absl import flags

from experiments import cli

_EXPORT = flags.DEFINE_string("export", None, "Export directory of a graph predictor.")
_DATA = flags.DEFINE_string("data", None, "JSON-lines file with the texts.")
_FIELD = flags.DEFINE_string("field", "text", "Text field of each record.")
_NUM = flags.DEFINE_integer("num", 256, "Texts to read (the last ones of the file).")
_MAX_WORDS = flags.DEFINE_integer("max_words", 40, "Cut every text to this many words.")
_BATCH = flags.DEFINE_integer("batch_size", 32, "Predictor batch.")
flags.mark_flags_as_required(["export", "data"])


def statistics_table(export_dir: str, path: str, field: str, num: int, max_words: int,
                     batch_size: int = 32) -> str:
  import numpy as np  # noqa: PLC0415
  from glomo_jax.eval.graph_stats import graph_statistics, uniform_reference  # noqa: PLC0415
  from glomo_jax.export import load_graph_predictor  # noqa: PLC0415
  from glomo_jax.tasks.datasets import read_jsonl  # noqa: PLC0415
  from glomo_jax.tasks.words import tokenize  # noqa: PLC0415
  from glomo_jax.transfer.align import word_graphs  # noqa: PLC0415

  records = list(read_jsonl(path))[-num:]
  missing = next((r for r in records if field not in r), None)
  if missing is not None:
    raise ValueError(f"{path}: a record has no field {field!r} (fields: {sorted(missing)})")
  texts = [w for w in (tokenize(str(r[field])) for r in records) if w]
  if not texts:
    raise ValueError(f"{path}: no non-empty {field!r} texts")
  predictor = load_graph_predictor(export_dir)
  graphs, masks = [], []
  for start in range(0, len(texts), batch_size):
    g, m = word_graphs(predictor, None, texts[start:start + batch_size], max_words)
    graphs.append(g)
    masks.append(m)
  graphs, mask = np.concatenate(graphs), np.concatenate(masks)
  stats = graph_statistics(graphs, mask)
  reference = uniform_reference(mask)
  layers = predictor.config.num_graph_layers
  lines = [f"{len(texts)} texts of {path} ({field}), {mask.sum(1).mean():.1f} words on "
           f"average (at most {max_words}); heads pooled",
           "| layer | empty rows | entropy (nats) | below uniform (nats) | self | adjacent "
           "| mean distance | uniform's distance |",
           "|---|---|---|---|---|---|---|---|"]
  rows = [(f"{'forward' if i < layers else 'backward'} {i % layers + 1}", s)
          for i, s in enumerate(stats)]
  rows += [(f"uniform, {name}", s) for name, s in reference.items()]
  for name, s in rows:
    lines.append(f"| {name} | {s['empty']:.3f} | {s['entropy']:.2f} | {s['entropy_gap']:.2f} | "
                 f"{s['self']:.3f} | {s['adjacent']:.3f} | {s['distance']:.2f} | "
                 f"{s['uniform_distance']:.2f} |")
  return "\n".join(lines)


def main(argv):
  del argv
  print(statistics_table(_EXPORT.value, _DATA.value, _FIELD.value, _NUM.value,
                         _MAX_WORDS.value, _BATCH.value))


if __name__ == "__main__":
  cli.run(main)
