"""SQuAD v1.1 with GLoMo graph transfer (the paper's Table 1).

* `data`: the official JSON / TFDS `squad/v1.1` → paragraphs and questions,
  words with character offsets; validation carved by article.
* `metrics`: the official exact match and F1.
* `spans`: the best answer span from start / end scores.
* `batching`: padded batches (words, characters, answer span).
* `model`: `SquadReader`, Clark & Gardner's reader with the GLoMo variants.
* `config`, `task`, `run`: `SquadConfig`, `SquadTask` on the training loop,
  `run_squad(config, workdir)`.
* `answer`: `Answerer(workdir).answer(passage, question)`.
"""
from glomo_jax.squad.answer import Answer, Answerer
from glomo_jax.squad.config import ReaderOptions, SquadConfig, SquadFiles
from glomo_jax.squad.data import (Paragraph, Question, SquadSplit, read_squad_json,
                                  read_squad_tfds)
from glomo_jax.squad.metrics import exact_match, f1_score, normalize_answer, squad_scores
from glomo_jax.squad.model import SquadReader
from glomo_jax.squad.run import load_squad, run_squad
from glomo_jax.squad.spans import best_span
from glomo_jax.squad.task import SquadTask

__all__ = [
    "Answer", "Answerer", "Paragraph", "Question", "ReaderOptions", "SquadConfig",
    "SquadFiles", "SquadReader", "SquadSplit", "SquadTask", "best_span", "exact_match",
    "f1_score", "load_squad", "normalize_answer", "read_squad_json", "read_squad_tfds",
    "run_squad", "squad_scores",
]
