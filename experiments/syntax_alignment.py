r"""Do a predictor's graphs follow syntax? Scores against a CoNLL-U treebank.

  python -m experiments.syntax_alignment --export=runs/wiki_cpu/export \
      --conllu=../shared/data/ud_english_ewt/en_ewt-ud-dev.conllu.gz

The predictor reads each sentence's raw text (``# text``); its graphs are
pooled to the treebank's words by characters, without self-loops
(`glomo_jax.eval.treebank_alignment`). Prints one table: the baselines (left
and right neighbour, uniform graphs, the best fixed offset), the untrained
predictor (same config, fresh parameters), and the trained predictor's
every (direction, layer, head) and equal-weight mixtures; columns are the
share of words whose highest-weight source is their head, or a tree
neighbour (head or dependent), and the UUAS of the maximum spanning tree
(`glomo_jax.eval.syntax`). Then, for the most frequent relations, head share
and UUAS of the main rows. "best" rows are chosen on the scored sentences
themselves. `--output` writes every number as JSON.
"""
from __future__ import annotations

from absl import flags

from experiments import cli

_EXPORT = flags.DEFINE_string("export", None, "Export directory of a text graph predictor.")
_CONLLU = flags.DEFINE_string("conllu", None, "CoNLL-U treebank (.conllu, .gz or .xz).")
_MAX_SENTENCES = flags.DEFINE_integer("max_sentences", 0,
                                      "Score the first N sentences (0: all).")
_MAX_WORDS = flags.DEFINE_integer("max_words", 128, "Skip sentences longer than this.")
_OFFSETS = flags.DEFINE_integer("offsets", 8, "Fixed-offset baselines up to ±this.")
_SEED = flags.DEFINE_integer("untrained_seed", 0, "Seed of the untrained predictor.")
_BATCH = flags.DEFINE_integer("batch_size", 32, "Sentences per predictor call.")
_RELATIONS = flags.DEFINE_integer("relations", 10, "Most frequent relations to break down.")
_ROWS = flags.DEFINE_enum("rows", "mean", ["mean", "whole_word"],
                          "A word's row from its pieces' rows: their mean, or the last "
                          "piece's forward and the first piece's backward.")
_OUTPUT = flags.DEFINE_string("output", None, "Write every score to this JSON file.")
flags.mark_flags_as_required(["export", "conllu"])

_METRICS = ("head", "neighbour", "uuas")


def summary_rows(result: dict) -> list[tuple[str, str]]:
  """(label, graph name) of the main table, in order."""
  from glomo_jax.eval.treebank_alignment import best_by, single_heads  # noqa: PLC0415
  names = list(result["graphs"])
  offsets = [n for n in names if n.startswith("offset ")]
  rows = [(n, n) for n in ("left neighbour", "right neighbour", "left+right",
                           "uniform fw", "uniform bw", "uniform fw+bw")]
  best = best_by(result, "head", offsets)
  rows.append((f"best fixed offset ({best.split()[1]})", best))
  for prefix, label in (("untrained", "untrained predictor"), ("", "trained predictor")):
    lead = f"{prefix} " if prefix else ""
    mixtures = [n for n in names if n.startswith(lead) and n.endswith(" mean")
                and (prefix or not n.startswith("untrained"))]
    rows += [(f"{label}: {n[len(lead):]}", n) for n in mixtures]
    heads = single_heads(names, prefix)
    best = best_by(result, "head", heads)
    rows.append((f"{label}: best head ({best[len(lead):]})", best))
    if not prefix:
      rows += [(f"{label}: {n}", n) for n in heads if n != best]
  return rows


def alignment_tables(result: dict, relations: int) -> str:
  graphs = result["graphs"]
  lines = [f"{result['sentences']} sentences, {result['words']} words, {result['edges']} "
           f"gold edges ({result['skipped_long']} longer sentences and "
           f"{result['skipped_unseen']} with a word without pieces skipped); "
           f"{result['heads_left']:.1%} of heads come before their word",
           "", "| graph | head | head or dependent | UUAS |", "|---|---|---|---|"]
  rows = summary_rows(result)
  for label, name in rows:
    lines.append(f"| {label} | " + " | ".join(f"{graphs[name][m]:.3f}" for m in _METRICS)
                 + " |")
  main = [r for r in rows if r[1] in ("left neighbour", "right neighbour", "uniform fw+bw",
                                      "untrained fw+bw mean", "fw+bw mean")]
  main.append(next(r for r in rows if r[0].startswith("trained predictor: best head")))
  per = result["relations"]
  top = sorted(per["left neighbour"].items(), key=lambda kv: -kv[1]["count"])[:relations]
  lines += ["", "Per relation, head share / UUAS:", "",
            "| relation | words | " + " | ".join(label for label, _ in main) + " |",
            "|---|---|" + "---|" * len(main)]
  for rel, stats in top:
    cells = [f"{per[name][rel]['head']:.2f} / {per[name][rel]['uuas']:.2f}"
             for _, name in main]
    lines.append(f"| {rel} | {stats['count']} | " + " | ".join(cells) + " |")
  return "\n".join(lines)


def main(argv):
  del argv
  import itertools  # noqa: PLC0415
  import time  # noqa: PLC0415
  from glomo_jax.eval.conllu import read_conllu  # noqa: PLC0415
  from glomo_jax.eval.treebank_alignment import score_treebank, untrained_twin  # noqa: PLC0415
  from glomo_jax.export import ExportedPixelGraphPredictor, load_graph_predictor  # noqa: PLC0415
  from glomo_jax.io import write_json  # noqa: PLC0415

  predictor = load_graph_predictor(_EXPORT.value)
  if isinstance(predictor, ExportedPixelGraphPredictor):
    raise ValueError(f"{_EXPORT.value} is a pixel predictor: syntax needs a text predictor")
  if predictor.tokenizer is None:
    raise ValueError(f"{_EXPORT.value} has no tokenizer.model: re-export it with one")
  sentences = read_conllu(_CONLLU.value)
  if _MAX_SENTENCES.value > 0:
    sentences = itertools.islice(sentences, _MAX_SENTENCES.value)
  sentences = list(sentences)
  start = time.perf_counter()
  result = score_treebank(
      sentences, {"": predictor, "untrained": untrained_twin(predictor, _SEED.value)},
      batch_size=_BATCH.value, max_words=_MAX_WORDS.value, offsets=_OFFSETS.value,
      rows=_ROWS.value)
  if not result["sentences"]:
    raise ValueError(f"{_CONLLU.value}: no sentence of 2 to {_MAX_WORDS.value} words to score")
  print(alignment_tables(result, _RELATIONS.value))
  print(f"\n{time.perf_counter() - start:.0f} s")
  if _OUTPUT.value:
    write_json(_OUTPUT.value, result)


if __name__ == "__main__":
  cli.run(main)
