r"""How peaked and how local an exported predictor's graphs are, next to a
uniform graph: word graphs on a text file (glomo_jax.eval.graph_stats), or
graphs between pixels on an image file (glomo_jax.eval.pixel_stats).

  python -m experiments.graph_stats --export=runs/wiki_cpu/export \
      --data=../shared/data/mnli/mnli_train_subset_9k.jsonl.xz --field=premise
  python -m experiments.graph_stats --export=runs/images_cpu/export \
      --images=../shared/data/cifar10/cifar10_train20k_from_jpeg.npz --downsample=2

Reads the last `--num` records of a JSON-lines file (.gz / .xz too), splits
`--field` into words as the task models do (the predictor reads the raw
text, its pieces pooled to those words by characters, as in transfer; with
`--read=words` it reads the words joined by spaces), and prints one line per graph
layer (share of empty rows, entropy in nats and how far below a uniform
graph over the same allowed words it is, weight on the word itself and its
neighbours, mean distance in words against the uniform graph's). With
`--images` (an .npz of uint8 [N, H, W, 3]): `--num` images evenly spaced
through the file (files sorted by class give every class), box-averaged by `--downsample`, one line per layer (empty rows, dead heads,
entropy below uniform, mean distance in pixels and weight on the 8
neighbouring pixels, each beside the uniform graph's).
"""
from __future__ import annotations

from absl import flags

from experiments import cli

_EXPORT = flags.DEFINE_string("export", None, "Export directory of a graph predictor.")
_DATA = flags.DEFINE_string("data", None, "JSON-lines file with the texts.")
_IMAGES = flags.DEFINE_string("images", None, ".npz with uint8 'images' [N, H, W, 3] "
                              "(a pixel predictor's export).")
_DOWNSAMPLE = flags.DEFINE_integer("downsample", 1, "Box-average factor for --images.")
_FIELD = flags.DEFINE_string("field", "text", "Text field of each record.")
_NUM = flags.DEFINE_integer("num", 256, "Texts or images to read (the last ones of the file).")
_MAX_WORDS = flags.DEFINE_integer("max_words", 40, "Cut every text to this many words.")
_BATCH = flags.DEFINE_integer("batch_size", 32, "Predictor batch.")
_READ = flags.DEFINE_enum("read", "raw", ["raw", "words"],
                          "What the predictor reads: the raw text or the words.")
flags.mark_flags_as_required(["export"])


def statistics_table(export_dir: str, path: str, field: str, num: int, max_words: int,
                     batch_size: int = 32, read: str = "raw") -> str:
  import numpy as np  # noqa: PLC0415
  from glomo_jax.eval.graph_stats import graph_statistics, uniform_reference  # noqa: PLC0415
  from glomo_jax.export import ExportedPixelGraphPredictor, load_graph_predictor  # noqa: PLC0415
  from glomo_jax.text.readers import read_jsonl  # noqa: PLC0415
  from glomo_jax.text.words import plain_text, tokenize_with_offsets  # noqa: PLC0415
  from glomo_jax.graphs.unit_graphs import text_graphs, word_graphs  # noqa: PLC0415

  predictor = load_graph_predictor(export_dir)
  if isinstance(predictor, ExportedPixelGraphPredictor):
    raise ValueError(f"{export_dir} is a pixel predictor: use --images for its graphs")
  records = list(read_jsonl(path))[-num:]
  missing = next((r for r in records if field not in r), None)
  if missing is not None:
    raise ValueError(f"{path}: a record has no field {field!r} (fields: {sorted(missing)})")
  raw = [plain_text(str(r[field])) for r in records]
  tokenized = [(text, *tokenize_with_offsets(text)) for text in raw]
  tokenized = [(text, words, spans) for text, words, spans in tokenized if words]
  if not tokenized:
    raise ValueError(f"{path}: no non-empty {field!r} texts")
  texts = [words for _, words, _ in tokenized]
  graphs, masks = [], []
  for start in range(0, len(texts), batch_size):
    batch = tokenized[start:start + batch_size]
    if read == "raw":
      g, m = text_graphs(predictor, None, [t for t, _, _ in batch],
                         [s for _, _, s in batch], max_words)
    else:
      g, m = word_graphs(predictor, None, [w for _, w, _ in batch], max_words)
    graphs.append(g)
    masks.append(m)
  graphs, mask = np.concatenate(graphs), np.concatenate(masks)
  stats = graph_statistics(graphs, mask)
  reference = uniform_reference(mask)
  layers = predictor.config.num_graph_layers
  lines = [f"{len(texts)} texts of {path} ({field}), {mask.sum(1).mean():.1f} words on "
           f"average (at most {max_words}); the predictor read the "
           f"{'raw texts' if read == 'raw' else 'words'}; heads pooled",
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


def pixel_statistics_table(export_dir: str, path: str, num: int, factor: int,
                           batch_size: int = 32) -> str:
  import numpy as np  # noqa: PLC0415
  from glomo_jax.eval.pixel_stats import pixel_graph_statistics  # noqa: PLC0415
  from glomo_jax.export import ExportedPixelGraphPredictor, load_graph_predictor  # noqa: PLC0415
  from glomo_jax.images.data import downsample, read_npz_images  # noqa: PLC0415

  predictor = load_graph_predictor(export_dir)
  if not isinstance(predictor, ExportedPixelGraphPredictor):
    raise ValueError(f"{export_dir} is a text predictor: use --data for its graphs")
  stored = read_npz_images(path).images
  pick = np.unique(np.linspace(0, len(stored) - 1, min(num, len(stored))).astype(int))
  images = downsample(stored[pick], factor)
  graphs = np.concatenate([np.asarray(predictor(images[i:i + batch_size]))
                           for i in range(0, len(images), batch_size)])
  shape = images.shape[1:3]
  layers = predictor.config.num_graph_layers
  lines = [f"{len(images)} images evenly spaced through {path}, at {shape[0]}×{shape[1]}; heads pooled",
           "| layer | empty rows | dead heads | entropy (nats) | below uniform (nats) | "
           "mean distance (pixels) | uniform's | weight on the 8 neighbours | uniform's |",
           "|---|---|---|---|---|---|---|---|---|"]
  for i, s in enumerate(pixel_graph_statistics(graphs, shape)):
    lines.append(f"| {'forward' if i < layers else 'backward'} {i % layers + 1} | "
                 f"{s['empty']:.3f} | {s['dead_heads']} | {s['entropy']:.2f} | "
                 f"{s['entropy_gap']:.2f} | {s['distance']:.2f} | {s['uniform_distance']:.2f} | "
                 f"{s['neighbours']:.3f} | {s['uniform_neighbours']:.3f} |")
  return "\n".join(lines)


def main(argv):
  del argv
  if (_DATA.value is None) == (_IMAGES.value is None):
    raise ValueError("give one of --data (a JSON-lines text file) or --images (an .npz)")
  if _IMAGES.value:
    print(pixel_statistics_table(_EXPORT.value, _IMAGES.value, _NUM.value, _DOWNSAMPLE.value,
                                 _BATCH.value))
  else:
    print(statistics_table(_EXPORT.value, _DATA.value, _FIELD.value, _NUM.value,
                           _MAX_WORDS.value, _BATCH.value, _READ.value))


if __name__ == "__main__":
  cli.run(main)
