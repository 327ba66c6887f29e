r"""Where finished picking runs read on longer sequences: for each run and
question k, the accuracy and, span by span, the gate openness and the
attention's mass (`glomo_jax.focused.spans`; docs/focused.md).

  python -m experiments.picking_spans --workdir=runs/picking/fhe_n200_s0 \
      [--workdir=runs/picking/lstm1_n200_s0 ...] [--length=10000] \
      [--k=20,100,180] [--examples=100]

The sequences: the first --examples drawn from each run's stream of
--length-digit test sequences (split n<length>: where --length is one of
the run's test_lengths, the first of the very sequences its results.json
scored), every one asked each k (1 to the trained length). Default k: a
tenth, half and nine tenths of the largest k the run trained on. Prints one
markdown table per run.
"""
from absl import flags

from experiments import cli

_WORKDIRS = flags.DEFINE_multi_string("workdir", None, "A picking run's --workdir (repeat).")
_LENGTH = flags.DEFINE_integer("length", 10_000, "The sequences' length in digits.")
_K = flags.DEFINE_list("k", None, "The questions k (default: module docstring).")
_EXAMPLES = flags.DEFINE_integer("examples", 100, "Sequences read with each k.")
flags.mark_flags_as_required(["workdir"])


def spans_table(workdir: str, length: int, ks: list[int] | None, examples: int) -> str:
  """The markdown table of one run (module docstring)."""
  from glomo_jax.focused.spans import (SpanReader, load_picking_run,  # noqa: PLC0415
                                       read_picking_config, span_edges)
  from glomo_jax.focused.task import length_set  # noqa: PLC0415
  config = read_picking_config(workdir)
  trained = config.max_length
  ks = ks or sorted({max(config.min_k, round(config.trained_max_k * f)) for f in (0.1, 0.5, 0.9)})
  for ok, what in ((examples >= 1, f"--examples must be >= 1, got {examples}"),
                   (length >= trained, f"--length must be >= the run's training length "
                                       f"{trained}, got {length}"),
                   (all(1 <= k <= trained for k in ks), f"every --k must be in 1..{trained} "
                                                        f"(the training length), got {ks}")):
    if not ok:
      raise ValueError(f"{workdir}: {what}")
  config, variables = load_picking_run(workdir)
  reader = SpanReader(config, variables)
  sequences = length_set(config.replace(test_examples=max(examples, config.test_examples)),
                         length)
  sequences = sequences.rows(range(examples))
  later = span_edges(trained, trained, length)          # [0, n, 2n, 4n, ..., length]
  head = ["k", "accuracy", "1..k", f"k+1..{trained:,}"] + [
      f"{a + 1:,}..{b:,}" for a, b in zip(later[1:], later[2:])]
  lines = [f"{workdir} ({config.model.kind}, trained at {trained:,} digits): {examples} "
           f"sequences of {length:,} digits, test gate {config.model.test_gate!r}; in each "
           "span, gate open % / attention mass %",
           "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for k in ks:
    read = reader.read(sequences.with_k(k), span_edges(k, trained, length))
    cells = [f"{100 * s['openness']:.2f} / {100 * s['attention']:.1f}" for s in read["spans"]]
    if k == trained:
      cells.insert(1, "–")                   # no digit between k and the trained length
    lines.append("| " + " | ".join([str(k), f"{100 * read['accuracy']:.1f}"] + cells) + " |")
  return "\n".join(lines)


def questions(values: list[str] | None) -> list[int] | None:
  """--k's values as integers (None: the default)."""
  try:
    return [int(k) for k in values] if values else None
  except ValueError:
    raise ValueError(f"--k takes whole numbers separated by commas, got {','.join(values)}"
                     ) from None


def main(argv):
  del argv
  ks = questions(_K.value)
  print("\n\n".join(spans_table(w, _LENGTH.value, ks, _EXAMPLES.value)
                    for w in _WORKDIRS.value))


if __name__ == "__main__":
  cli.run(main)
