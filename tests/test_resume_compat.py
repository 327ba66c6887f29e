"""What a resumed run reads must stay readable: the optimiser state's tree
layout is part of every checkpoint (pretraining keeps the bare optimiser
when nothing comes before it, a chain after clipping; downstream runs always
chain), and the fields a resumed run may change."""
import jax
import jax.numpy as jnp
import optax

from glomo_jax.downstream.options import OptimOptions
from glomo_jax.pretraining import PretrainConfig

PARAMS = {"w": jnp.zeros((2, 3)), "b": jnp.zeros(3)}


def structure(tx):
  return jax.tree_util.tree_structure(tx.init(PARAMS))


def test_checkpointed_optimizer_layouts_stay_as_they_were():
  sgd = optax.sgd(8.0, momentum=0.2)
  clip = optax.clip_by_global_norm(0.25)
  assert structure(PretrainConfig().build_optimizer()) == structure(optax.chain(clip, sgd))
  assert structure(PretrainConfig(clip_norm=0.0).build_optimizer()) == structure(sgd)
  adam = optax.adam(1e-3)
  assert structure(PretrainConfig(optimizer="adam", learning_rate=1e-3,
                                  clip_norm=0.0).build_optimizer()) == structure(adam)
  downstream = OptimOptions(clip_norm=None).optimizer_for(10)
  assert structure(downstream) == structure(optax.chain(optax.adam(1e-3)))


def test_a_resumed_run_may_change_how_the_transfer_applies_its_graphs():
  """`apply_as` computes the same numbers in another order: every task's
  path to it is among the fields a resumed run may change."""
  import dataclasses  # noqa: PLC0415
  from glomo_jax.images.cifar import CifarConfig  # noqa: PLC0415
  from glomo_jax.classification import ClassificationConfig  # noqa: PLC0415
  from glomo_jax.train.run_config import changed_fields  # noqa: PLC0415
  cifar = CifarConfig()
  other = dataclasses.replace(cifar, transfer=dataclasses.replace(cifar.transfer,
                                                                  apply_as="candidates"))
  changed = changed_fields(cifar.to_dict(), other.to_dict())
  assert changed == ["transfer.apply_as"] and set(changed) <= set(other.resumable())
  text = ClassificationConfig()
  other = dataclasses.replace(text, model=dataclasses.replace(
      text.model, transfer=dataclasses.replace(text.model.transfer, apply_as="candidates")))
  changed = changed_fields(text.to_dict(), other.to_dict())
  assert changed == ["model.transfer.apply_as"] and set(changed) <= set(other.resumable())


OLD_TRANSFER_NAMES = {"num_layers": "transfer_layers", "num_mixtures": "num_mixtures",
                      "conditioned": "conditioned", "features": "transfer_features",
                      "apply_as": "graph_apply"}


def flat_transfer(group: dict) -> dict:
  """A model group as config.json held it before the `transfer` group."""
  out = {k: v for k, v in group.items() if k != "transfer"}
  out.update({OLD_TRANSFER_NAMES[k]: v for k, v in group["transfer"].items()})
  return out


def test_a_config_json_of_the_earlier_layout_reads_and_resumes(tmp_path):
  """config.json written before the loop fields moved under `loop` and the
  graph-transfer fields into `transfer` reads as the same config (export,
  the answer command), and a resumed run compares it field by field."""
  import json  # noqa: PLC0415
  import pytest  # noqa: PLC0415
  from glomo_jax.images.cifar import CifarConfig  # noqa: PLC0415
  from glomo_jax.squad import SquadConfig  # noqa: PLC0415
  from glomo_jax.classification import ClassificationConfig  # noqa: PLC0415
  from glomo_jax.train.run_config import check_run_config  # noqa: PLC0415
  config = PretrainConfig(loop=PretrainConfig().loop.__class__(num_steps=77, eval_every=5))
  from glomo_jax.train.config import LOOP_MOVED_FIELDS  # noqa: PLC0415
  flat = {k: v for k, v in config.to_dict().items() if k != "loop"} | {
      k: v for k, v in config.to_dict()["loop"].items() if k in LOOP_MOVED_FIELDS}
  assert PretrainConfig.from_dict(flat) == config
  text = ClassificationConfig()
  old = text.to_dict() | {"model": flat_transfer(text.to_dict()["model"])}
  old["model"]["graph_apply"] = "mixtures"
  assert ClassificationConfig.from_dict(old).model.transfer.apply_as == "mixtures"
  squad = SquadConfig()
  assert SquadConfig.from_dict(squad.to_dict() | {
      "model": flat_transfer(squad.to_dict()["model"])}) == squad
  cifar = CifarConfig()
  old_cifar = {k: v for k, v in cifar.to_dict().items() if k != "transfer"}
  old_cifar |= {"num_mixtures": 2, "conditioned": True, "transfer_features": None}
  assert CifarConfig.from_dict(old_cifar) == cifar
  # a resumed text run: the recorded earlier layout is the same config
  (tmp_path / "config.json").write_text(json.dumps(old))
  same = ClassificationConfig.from_dict(old)
  check_run_config(str(tmp_path), same.to_dict(), same.resumable(), ClassificationConfig)
  with pytest.raises(ValueError, match=r"changed: model\.transfer\.num_mixtures"):
    other = same.replace(model=same.model.__class__(**{
        **vars(same.model), "transfer": same.model.transfer.__class__(num_mixtures=3,
                                                                      apply_as="mixtures")}))
    check_run_config(str(tmp_path), other.to_dict(), other.resumable(), ClassificationConfig)


# config.json's top-level keys before the text fields became one group
# (`text.fields.TextFields`), in the order they were written then (since
# then the loop's settings became one `loop` group, after `optim`)
CLASSIFICATION_KEYS = [
    "variant", "predictor_export", "optim", "loop", "seed", "data_seed",
    "task", "source", "files", "tfds", "synthetic", "val_fraction", "test_fraction",
    "max_train_examples", "max_eval_examples", "vocab", "glove_path", "max_words",
    "length_multiple", "bucket_batches", "model", "graph_cache_dir", "graph_cache_dtype",
    "graph_cache_topk", "graph_batch_size", "graph_self_loops", "graph_source", "graph_text",
    "oracle_arcs", "lowercase"]
SQUAD_KEYS = [
    "variant", "predictor_export", "optim", "loop", "seed", "data_seed",
    "source", "files", "tfds", "val_questions", "max_train_questions", "max_dev_questions",
    "glove_path", "min_count", "char_min_count", "max_word_chars", "max_context_words",
    "max_question_words", "length_multiple", "bucket_batches", "max_span", "model",
    "graph_cache_dir", "graph_cache_dtype", "graph_batch_size", "graph_self_loops",
    "graph_text", "graphs_on_the_fly"]


def test_the_text_configs_keep_their_flat_fields_and_defaults(tmp_path):
  """The shared text fields live once (`TextFields`, a base of both configs):
  config.json keeps the same flat keys (only their order moved) and
  defaults, and a config.json in the old order resumes."""
  import json  # noqa: PLC0415
  from glomo_jax.classification import ClassificationConfig  # noqa: PLC0415
  from glomo_jax.squad import SquadConfig  # noqa: PLC0415
  from glomo_jax.train.run_config import check_run_config  # noqa: PLC0415
  for cls, keys in ((ClassificationConfig, CLASSIFICATION_KEYS), (SquadConfig, SQUAD_KEYS)):
    config = cls()
    assert sorted(config.to_dict()) == sorted(keys)
    old = {k: config.to_dict()[k] for k in keys}          # written in the old order
    (tmp_path / "config.json").write_text(json.dumps(old))
    assert cls.from_dict(old) == config
    check_run_config(str(tmp_path), config.to_dict(), config.resumable(), cls)
  for config, defaults in ((ClassificationConfig(), (8, 32)), (SquadConfig(), (16, 8))):
    assert (config.length_multiple, config.graph_batch_size) == defaults


# The optim group and top-level loop fields a downstream config.json held
# before the loop's settings became one `loop` group: the `sst2.py:tiny` run's
OLD_OPTIM = {"optimizer": "adam", "learning_rate": 0.001, "clip_norm": 10.0, "batch_size": 8,
             "eval_batch_size": None, "epochs": 3.0, "steps": 6, "eval_every": 3,
             "patience": None, "log_every": 3, "checkpoint_every": None, "momentum": 0.9,
             "weight_decay": 0.0, "schedule": "constant"}


def old_loop_layout(config: dict, optim: dict) -> dict:
  """A downstream config dict as config.json held it before the `loop`
  group: `optim` with the length, evaluation and checkpoint fields,
  mesh_data and compile_fast at the top level."""
  out = {k: v for k, v in config.items() if k != "loop"}
  loop = config["loop"]
  out["optim"] = optim
  out["mesh_data"], out["compile_fast"] = loop["mesh_data"], loop["compile_fast"]
  return out


def test_a_downstream_config_json_of_the_optim_layout_reads_and_resumes(tmp_path):
  """config.json written when `optim` held the training length, evaluations,
  patience, progress lines and checkpoints (and mesh_data, compile_fast were
  top-level fields) reads into `loop` with the downstream defaults for the
  rest, and a resumed run may change only its length and reporting."""
  import dataclasses  # noqa: PLC0415
  import json  # noqa: PLC0415
  import pytest  # noqa: PLC0415
  from glomo_jax.classification import ClassificationConfig  # noqa: PLC0415
  from glomo_jax.images.cifar import CifarConfig  # noqa: PLC0415
  from glomo_jax.squad import SquadConfig  # noqa: PLC0415
  from glomo_jax.train.config import DOWNSTREAM_LOOP  # noqa: PLC0415
  from glomo_jax.train.run_config import check_run_config  # noqa: PLC0415
  loop = dataclasses.replace(DOWNSTREAM_LOOP, num_steps=6, epochs=3.0, eval_every=3,
                             log_every=3, compile_fast=True)
  text = ClassificationConfig(optim=OptimOptions(clip_norm=10.0, batch_size=8), loop=loop)
  old = old_loop_layout(text.to_dict(), OLD_OPTIM)
  assert "loop" not in old and old["compile_fast"] is True
  assert ClassificationConfig.from_dict(old) == text
  assert ClassificationConfig.from_dict(old).loop.keep_checkpoints == 2   # not LoopOptions'
  lengths = {"steps": 6, "epochs": 3.0, "eval_every": 3, "patience": None, "log_every": 3,
             "checkpoint_every": None}
  optim = {k: v for k, v in OLD_OPTIM.items() if k not in lengths}
  for cls in (SquadConfig, CifarConfig):
    config = cls(optim=OptimOptions(**optim), loop=loop)
    assert cls.from_dict(old_loop_layout(config.to_dict(), OLD_OPTIM)) == config
  (tmp_path / "config.json").write_text(json.dumps(old))
  check_run_config(str(tmp_path), text.to_dict(), text.resumable(), ClassificationConfig)
  longer = text.replace(loop=dataclasses.replace(loop, num_steps=12, log_every=2))
  check_run_config(str(tmp_path), longer.to_dict(), longer.resumable(), ClassificationConfig)
  with pytest.raises(ValueError, match=r"changed: loop\.patience\)"):
    other = text.replace(loop=dataclasses.replace(loop, patience=3))
    check_run_config(str(tmp_path), other.to_dict(), other.resumable(), ClassificationConfig)
  cosine = CifarConfig(optim=OptimOptions(**{**optim, "schedule": "cosine"}), loop=loop)
  (tmp_path / "config.json").write_text(json.dumps(old_loop_layout(
      cosine.to_dict(), {**OLD_OPTIM, "schedule": "cosine"})))
  with pytest.raises(ValueError, match=r"changed: loop\.num_steps\)"):
    other = cosine.replace(loop=dataclasses.replace(loop, num_steps=12))
    check_run_config(str(tmp_path), other.to_dict(), other.resumable(), CifarConfig)
