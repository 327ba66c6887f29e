"""Each run kind's task at a config's sizes, with no data: what
`experiments.tpu_compile` hands to the loop's own `RunPrograms`.

A target holds the kind's real task (its class's own `init_variables`,
`optimizer`, `loss` and `eval_step`, so the programs are those a run
compiles) built from the config alone, and the global shapes of its train
and eval batches. What a run reads from its data is assumed, and listed in
`Target.assumed`: the vocabulary of a downstream text task (`Sizes.vocab`;
a run's comes from its data and GloVe), SQuAD's characters and lengths, the
graphs of a predictor a variant reads (`Sizes.graphs`: 2L and K of the
predictor export, read from `predictor_export` when it exists, else the
paper model's 6 and 8), the image size (32 × 32). Text pretraining's
vocabulary is the config's `vocab_size`, the tokenizer a run trains.
"""
from __future__ import annotations

import dataclasses
import os
import types
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

PAPER_GRAPHS = (6, 8)       # 2L, K of the paper model's predictor


@dataclasses.dataclass(frozen=True)
class Sizes:
  """What a run reads from its data (module docstring)."""
  vocab: int = 30_000
  chars: int = 300
  context_words: int = 400
  question_words: int = 40
  image: tuple = (32, 32)
  graphs: tuple | None = None


@dataclasses.dataclass
class Target:
  """A run kind's task at a config's sizes.

  Attributes:
    name: e.g. 'pretrain (paper.py)'. task: the loop's `Task`.
    train, eval: global batch shapes {key: ShapeDtypeStruct}.
    predict: the export's `predict(variables, *batch)`, for the kinds that
      export a predictor; predict_args: its arguments' shapes.
    assumed: what was assumed of the data (module docstring).
  """
  name: str
  task: Any
  train: dict
  eval: dict
  predict: Callable | None = None
  predict_args: tuple = ()
  assumed: dict = dataclasses.field(default_factory=dict)


def shapes(**entries) -> dict:
  """{key: ShapeDtypeStruct} from key=(shape, dtype)."""
  return {k: jax.ShapeDtypeStruct(tuple(s), d) for k, (s, d) in entries.items()}


def rows(spec: dict, n: int) -> dict:
  """`spec` with n rows."""
  return {k: jax.ShapeDtypeStruct((n,) + tuple(v.shape[1:]), v.dtype) for k, v in spec.items()}


def without_data(cls, **attributes):
  """A task of `cls` holding only the attributes its model methods read
  (the model, its config): its methods are the class's own."""
  task = object.__new__(cls)
  task.__dict__.update(attributes)
  return task


def predictor_graphs(config, sizes: Sizes) -> tuple[int, int]:
  """(2L, K) of the graphs a variant reads: `sizes.graphs`, else the
  config's predictor export's, else the paper model's."""
  if sizes.graphs:
    return tuple(sizes.graphs)
  path = getattr(config, "predictor_export", None)
  if path and os.path.isdir(path):
    from glomo_jax.export.format import read_export  # noqa: PLC0415
    model = read_export(path).config
    return 2 * model.num_graph_layers, model.num_heads
  return PAPER_GRAPHS


# ---- the kinds ----------------------------------------------------------------------------
def pretrain(config, sizes: Sizes) -> Target:
  from glomo_jax.export.predictor import ExportedGraphPredictor  # noqa: PLC0415
  from glomo_jax.pretraining import GLoMoObjective  # noqa: PLC0415
  from glomo_jax.pretraining.fixed_graphs import fixed_graph_fn  # noqa: PLC0415
  from glomo_jax.pretraining.task import PretrainingTask  # noqa: PLC0415
  del sizes
  if config.graph_source not in ("predicted", "uniform", "previous"):
    raise ValueError(f"graph_source={config.graph_source!r} reads a run's data (its export or "
                     "planted arcs): compile 'predicted', 'uniform' or 'previous'")
  model = config.model.replace(vocab_size=config.vocab_size)
  task = without_data(PretrainingTask, config=config)
  GLoMoObjective.__init__(task, model, config.bptt, config.build_optimizer(),
                          fixed_graphs=fixed_graph_fn(config.graph_source, model.num_graph_layers,
                                                      model.num_heads))
  b, t = config.batch_size, config.bptt
  batch = shapes(tokens=((b, t), jnp.int32), mask=((b, t), jnp.int32))
  predictor = ExportedGraphPredictor(model, None)
  variables = jax.eval_shape(lambda: ExportedGraphPredictor.untrained(model).variables)
  return Target("pretrain", task, batch, batch, predictor.predict,
                (variables, batch["tokens"], batch["mask"]),
                {"vocabulary": f"{config.vocab_size} (the config's vocab_size"
                               + ("; the built-in corpus's word tokenizer has its own)"
                                  if config.corpus.source == "synthetic" else ")")})


def pretrain_images(config, sizes: Sizes) -> Target:
  from glomo_jax.export.predictor import ExportedPixelGraphPredictor  # noqa: PLC0415
  from glomo_jax.models.pixel_glomo import PixelGLoMo  # noqa: PLC0415
  from glomo_jax.pretraining.pixels import PixelPretrainingTask  # noqa: PLC0415
  size = tuple(s // config.downsample for s in sizes.image)
  model = PixelGLoMo(config.model, size)
  task = without_data(PixelPretrainingTask, config=config, image_shape=size, model=model,
                      eval_model=PixelGLoMo(config.model.replace(sample_positions=0), size))
  batch = shapes(images=((config.batch_size, *size, 3), jnp.uint8))
  variables = jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0), jnp.zeros(
      (1, *size, 3), jnp.uint8), train=False))
  variables = {"params": variables["params"], "batch_stats": variables.get("batch_stats", {})}
  return Target("pretrain_images", task, batch, batch,
                ExportedPixelGraphPredictor(config.model, None).predict,
                (variables, batch["images"]), {"images": f"{size[0]}×{size[1]}"})


def classify(config, sizes: Sizes) -> Target:
  from glomo_jax.classification.run import build_model  # noqa: PLC0415
  from glomo_jax.classification.task import ClassificationTask  # noqa: PLC0415
  from glomo_jax.transfer.options import VARIANTS  # noqa: PLC0415
  from glomo_jax.text.readers import TASKS  # noqa: PLC0415
  fields = TASKS[config.task].text_fields if config.task in TASKS else ("text",)
  classes = len(TASKS[config.task].label_names) if config.task in TASKS else 2
  reads = VARIANTS[config.variant].reads_graphs
  prefix = predictor_graphs(config, sizes) if reads else None
  data = types.SimpleNamespace(num_classes=classes, text_fields=fields)
  table = np.zeros((sizes.vocab, config.model.embed_dim), np.float32)
  model = build_model(config, data, sizes.vocab, table, prefix[0] // 2 if prefix else None)
  steps = config.loop.num_steps or 10_000
  o = config.optim
  task = without_data(ClassificationTask, model=model, fields=fields, config=config,
                      graphs=types.SimpleNamespace(graph_prefix=prefix) if reads else None,
                      num_steps=steps)
  b, w = o.batch_size, config.max_words or 400
  entries = {"label": ((b,), jnp.int32), "weight": ((b,), jnp.float32)}
  for f in fields:
    entries[f], entries[f + "_mask"] = ((b, w), jnp.int32), ((b, w), jnp.bool_)
    if reads:
      entries[f + "_graphs"] = ((b, *prefix, w, w), jnp.float32)
  batch = shapes(**entries)
  assumed = {"vocabulary": sizes.vocab, "words": w}
  if reads:
    assumed["graphs (2L, K)"] = prefix
  return Target(f"classify ({config.task}, {config.variant})", task, batch,
                rows(batch, o.eval_batch_size or 2 * b), assumed=assumed)


def squad(config, sizes: Sizes) -> Target:
  from glomo_jax.squad.run import build_reader  # noqa: PLC0415
  from glomo_jax.squad.task import TEXTS, SquadTask  # noqa: PLC0415
  from glomo_jax.transfer.options import VARIANTS  # noqa: PLC0415
  reads = VARIANTS[config.variant].reads_graphs
  prefix = predictor_graphs(config, sizes) if reads else None
  model = build_reader(config, sizes.vocab, sizes.chars,
                       predictor_layers=prefix[0] // 2 if prefix else None)
  task = without_data(SquadTask, model=model, config=config, num_steps=10_000,
                      graphs=types.SimpleNamespace(graph_prefix=prefix) if reads else None)
  o = config.optim
  lengths = {"context": config.max_context_words or sizes.context_words,
             "question": config.max_question_words or sizes.question_words}
  entries = {"start": ((o.batch_size,), jnp.int32), "end": ((o.batch_size,), jnp.int32),
             "weight": ((o.batch_size,), jnp.float32)}
  if config.model.is_focused:          # the sparsity warm-up reads each batch's step
    entries["step"] = ((o.batch_size,), jnp.int32)
  for f in TEXTS:
    n = lengths[f]
    entries[f], entries[f + "_mask"] = ((o.batch_size, n), jnp.int32), ((o.batch_size, n),
                                                                        jnp.bool_)
    entries[f + "_chars"] = ((o.batch_size, n, config.max_word_chars), jnp.int32)
    if reads:
      entries[f + "_graphs"] = ((o.batch_size, *prefix, n, n), jnp.float32)
  batch = shapes(**entries)
  evals = rows({k: v for k, v in batch.items() if k != "step"},
               o.eval_batch_size or 2 * o.batch_size)
  evals["index"] = jax.ShapeDtypeStruct(evals["start"].shape, jnp.int32)
  assumed = {"vocabulary": sizes.vocab, "characters": sizes.chars, "words": lengths}
  if reads:
    assumed["graphs (2L, K)"] = prefix
  encoder = ", focused" if config.model.is_focused else ""
  return Target(f"squad ({config.variant}{encoder})", task, batch, evals, assumed=assumed)


def cifar(config, sizes: Sizes) -> Target:
  from glomo_jax.images.cifar import CifarTask  # noqa: PLC0415
  from glomo_jax.images.data import ImageSet  # noqa: PLC0415
  if config.reads_graphs:
    raise ValueError("compiling the CIFAR-10 run of a graph-reading variant needs its pixel "
                     "predictor's export: not supported by the compile check; compile "
                     "--config.variant=baseline or uniform")
  b = config.optim.batch_size
  images = ImageSet(np.zeros((b, *sizes.image, 3), np.uint8), np.zeros(b, np.int32))
  task = CifarTask(config, {"train": images})
  batch = task.batch_spec()
  return Target(f"cifar ({config.variant})", task, batch, rows(batch, task.eval_batch_size),
                assumed={"images": f"{sizes.image[0]}×{sizes.image[1]}"})


def picking(config, sizes: Sizes) -> Target:
  """The picking reader's run at the config's longest training length (the
  batches are those of a real run: a few generated examples)."""
  from glomo_jax.focused.picking import generate  # noqa: PLC0415
  from glomo_jax.focused.task import PickingTask  # noqa: PLC0415
  del sizes
  c = config
  few = generate(np.random.default_rng(0), 4, c.max_length, c.max_length, c.min_k,
                 c.trained_max_k)
  task = PickingTask(c, {"train": few, "validation": few})     # a batch pads to its size
  batch = {k: jax.ShapeDtypeStruct(v.shape, v.dtype)
           for k, v in next(iter(task.train_batches())).items()}
  evals = {k: jax.ShapeDtypeStruct(v.shape, v.dtype)
           for k, v in task._batch("validation", np.arange(4), task.eval_batch_size).items()}
  return Target(f"picking ({c.model.kind})", task, batch, evals,
                assumed={"digits": c.max_length})


def lstm_lm(config, sizes: Sizes) -> Target:
  from experiments.lstm_control import LstmLm, LstmLmTask  # noqa: PLC0415
  del sizes
  task = without_data(LstmLmTask, config=config, model=LstmLm(config.lstm, config.vocab_size))
  b, t = config.batch_size, config.bptt
  batch = shapes(tokens=((b, t), jnp.int32), mask=((b, t), jnp.int32))
  return Target("lstm_lm", task, batch, batch,
                assumed={"vocabulary": f"{config.vocab_size} (the config's vocab_size)"})


BUILDERS = {"pretrain": pretrain, "pretrain_images": pretrain_images, "classify": classify,
            "squad": squad, "cifar": cifar, "picking": picking, "lstm_lm": lstm_lm}


def target(kind: str, config, sizes: Sizes = Sizes()) -> Target:
  """The run kind's target (`BUILDERS`) for a config of that kind."""
  if kind not in BUILDERS:
    raise ValueError(f"no compile target for run kind {kind!r} (known: {sorted(BUILDERS)})")
  return BUILDERS[kind](config, sizes)
