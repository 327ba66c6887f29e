"""A new text kind from the shared pieces (docs/text_kind.md): a per-word
tagger's config is `TextFields` + `DownstreamConfig` and its own fields, its
vocabulary, table and graph caches come from the set-up functions, and
`ClassificationTask` with `word_targets` trains it per word on the loop.
Per-word sums equal the per-example sums of the labelled words."""
import dataclasses
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from glomo_jax.classification.task import ClassificationTask
from glomo_jax.downstream.config import DownstreamConfig
from glomo_jax.downstream.options import OptimOptions
from glomo_jax.train.config import DOWNSTREAM_LOOP
from glomo_jax.downstream.run import load_predictor, train_and_report
from glomo_jax.downstream.scores import classification_sums
from glomo_jax.graphs.task_graphs import task_graphs
from glomo_jax.text.batching import word_targets
from glomo_jax.text.fields import TextFields, VocabOptions, task_vocabulary
from glomo_jax.text.layers import embedding_initializer
from glomo_jax.text.splits import Split, TaskData

LEXICON = {0: ["the", "a", "every"], 1: ["cat", "dog", "man", "sofa"], 2: ["sleeps", "runs"]}


@dataclasses.dataclass(frozen=True)
class TaggerOptions:
  embed_dim: int = 8
  oov_scale: float = 0.1
  glove_scale: float = 1.0


@dataclasses.dataclass(frozen=True)
class TaggerConfig(TextFields, DownstreamConfig):
  vocab: VocabOptions = VocabOptions()
  max_words: int | None = 8
  graph_cache_topk: int | None = None
  model: TaggerOptions = TaggerOptions()

  def check(self) -> None:
    super().check()
    self.check_text()


class Tagger(nn.Module):
  """Logits [B, W, C] of each word (its embedding, a linear layer)."""
  vocab_size: int
  embed_dim: int
  num_classes: int
  embedding_init: object
  variant: str = "baseline"

  @nn.compact
  def __call__(self, text, text_mask, train: bool = False):
    del text_mask, train
    x = nn.Embed(self.vocab_size, self.embed_dim, embedding_init=self.embedding_init)(text)
    return nn.Dense(self.num_classes)(x)


def tag_split(n: int, seed: int) -> Split:
  rng = np.random.default_rng(seed)
  texts, tags = [], []
  for _ in range(n):
    tag = rng.integers(0, 3, size=rng.integers(2, 11))        # some cut at max_words
    texts.append([LEXICON[t][rng.integers(len(LEXICON[t]))] for t in tag])
    tags.append(tag)
  return Split({"text": texts}, tags)


def tag_data() -> TaskData:
  splits = {"train": tag_split(48, 0), "validation": tag_split(8, 1), "test": tag_split(8, 2)}
  return TaskData("toy_tags", splits, ("text",), ("det", "noun", "verb"), ("test",))


def test_per_word_sums_are_those_of_the_labelled_words():
  logits = jax.random.normal(jax.random.PRNGKey(0), (2, 3, 4))
  labels = jnp.array([[1, 3, -1], [0, -1, -1]])
  weights = jnp.array([1.0, 0.5])
  got = classification_sums(logits, labels, weights)
  rows = [(0, 0), (0, 1), (1, 0)]
  flat = classification_sums(jnp.stack([logits[r] for r in rows]),
                             jnp.array([labels[r] for r in rows]),
                             jnp.array([weights[r[0]] for r in rows]))
  for key in flat:
    np.testing.assert_allclose(got[key], flat[key], rtol=1e-6)


def test_a_per_word_tagger_from_the_shared_pieces(tmp_path, tiny_export):
  config = TaggerConfig(optim=OptimOptions(learning_rate=0.05, batch_size=8),
                        loop=dataclasses.replace(DOWNSTREAM_LOOP, num_steps=24, eval_every=12,
                                                 log_every=12, compile_fast=True))
  config.check()
  data = tag_data()
  vocab, table, _ = task_vocabulary(config, data, config.vocab, config.model, config.data_seed)
  model = Tagger(len(vocab), config.model.embed_dim, data.num_classes,
                 embedding_initializer(table))
  task = ClassificationTask(model, data, vocab, config, target_padder=word_targets("text"))
  results = train_and_report(task, str(tmp_path / "run"),
                             lambda s: {"test": s["results"]["test"]}, start=time.time(),
                             devices=jax.devices()[:1])
  assert results["test"] >= 0.9 and results["config"]["max_words"] == 8
  words = sum(min(len(t), 8) for t in data["test"].texts["text"])
  assert task.evaluate("test", lambda b: {"loss_sum": 0.0, "correct": 0.0,
                                          "count": float((b["label"] >= 0).sum())}
                       )["examples"] == words       # scored per word
  # the predictor's graph caches of the same config
  graphs = task_graphs(config, load_predictor(tiny_export), data,
                       config.graph_cache_root(str(tmp_path)), config.max_words)
  assert graphs.graph_prefix == (4, 4) and sorted(graphs.caches) == sorted(data.splits)
