r"""Train the LSTM language model, the control of GLoMo's own
language model on verb number (experiments/lstm_control.py): the same
tokens, windows and loop as a `wiki_cpu` GLoMo run.

  python -m experiments.lstm_lm --config=experiments/configs/lstm_lm.py \
      --config.corpus.pattern='../shared/data/wiki_text/enwiki2015_wikiextractor_part1.jsonl.xz' \
      --config.tokenizer_path=runs/wiki_cpu/tokenizer.model --workdir=runs/lstm_lm
  python -m experiments.verb_number_lm --workdir=runs/lstm_lm --examples=...

Rerunning the same command resumes it; SIGTERM saves a checkpoint and stops.
Flags, --distributed and the printed summary: `experiments.entry`.
"""
from experiments import entry

if __name__ == "__main__":
  entry.run_kind("lstm_lm")
