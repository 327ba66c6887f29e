r"""The LSTM language model (the token curve's control) at the `wiki_cpu` preset's data:
its corpus fields, tokenizer settings, held-out share, windows (16 × 100,
shift 50), evaluation and loop are taken from experiments/configs/wiki_cpu.py
itself; the network (`LstmOptions`: d 128 tied, 2 × 300 LSTM units, a
projection to 128; 2,298,528 parameters at 8,000 pieces against GLoMo's
2,311,942) and the optimiser are the control's: Adam 3e-3, global-norm clip
1.0, chosen by a 1,000-step pilot on held-out loss over Adam 1e-3,
the authors' SGD (lr 8, momentum 0.2, clip 0.25) and SGD lr 20 (clip 0.25),
and over Adam 1e-2, level with it at step 1,000 after a lead that shrank
every evaluation.

  python -m experiments.lstm_lm --config=experiments/configs/lstm_lm.py \
      --config.corpus.pattern='../shared/data/wiki_text/enwiki2015_wikiextractor_part1.jsonl.xz' \
      --config.tokenizer_path=runs/wiki_cpu/tokenizer.model --workdir=runs/lstm_lm

`--config.tokenizer_path` = a GLoMo run's <workdir>/tokenizer.model reads
exactly that run's pieces (without it, a tokenizer is trained as the
preset trains one). `:tiny` is a seconds-long smoke run of the same pipeline
(wiki_cpu's `tiny` data, a 32-wide network).
"""
from glomo_jax.pretraining import PretrainConfig, TextPretrainConfigBase
from experiments.configs import wiki_cpu
from experiments.configs.common import config_dict
from experiments.lstm_control import LstmLmConfig, LstmOptions

RUN_KIND = "lstm_lm"   # experiments/kinds.py
# taken from the wiki_cpu preset: every text field but the optimiser's
OPTIMISER = ("optimizer", "learning_rate", "momentum", "clip_norm", "weight_decay", "export")
SHARED = tuple(name for name in TextPretrainConfigBase.__dataclass_fields__
               if name not in OPTIMISER)


def get_config(arg: str = ""):
  if arg not in ("", "tiny"):
    raise ValueError(f"unknown lstm_lm preset {arg!r}; use '' or 'tiny'")
  wiki = PretrainConfig.from_dict(wiki_cpu.get_config(arg).to_dict())
  lstm = LstmOptions(dim=32, hidden=48) if arg == "tiny" else LstmOptions()
  return config_dict(LstmLmConfig(lstm=lstm, **{name: getattr(wiki, name) for name in SHARED}))
