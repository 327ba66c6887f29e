r"""Ask a trained SQuAD run a question about a passage.

  python -m experiments.squad_answer --workdir=runs/squad_baseline \
      --passage="The Normans were the people who in the 10th and 11th centuries \
gave their name to Normandy, a region in France." \
      --question="What region did the Normans give their name to?"

Prints the answer (the passage's own text), its character offsets and its
probability under the reader. `--passage_file` reads the passage from a file.
"""
from __future__ import annotations

from absl import flags

from experiments import cli

_WORKDIR = flags.DEFINE_string("workdir", None, "The --workdir of an experiments.squad run.")
_PASSAGE = flags.DEFINE_string("passage", None, "The passage (or use --passage_file).")
_PASSAGE_FILE = flags.DEFINE_string("passage_file", None, "A UTF-8 file holding the passage.")
_QUESTION = flags.DEFINE_string("question", None, "The question.")
flags.mark_flags_as_required(["workdir", "question"])


def main(argv):
  del argv
  if (_PASSAGE.value is None) == (_PASSAGE_FILE.value is None):
    raise ValueError("give the passage with exactly one of --passage and --passage_file")
  passage = _PASSAGE.value
  if passage is None:
    with open(_PASSAGE_FILE.value, encoding="utf-8") as f:
      passage = f.read()
  from glomo_jax.squad import Answerer  # noqa: PLC0415
  answer = Answerer(_WORKDIR.value).answer(passage, _QUESTION.value)
  print(f"answer: {answer.text}")
  print(f"characters {answer.start}-{answer.end}, probability {answer.probability:.3f}")


if __name__ == "__main__":
  cli.run(main)
