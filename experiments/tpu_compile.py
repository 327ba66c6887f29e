r"""Compiles a run's programs for a TPU slice on any x86 Linux machine, with
the real TPU compiler (libtpu: `pip install "jax[tpu]"`), no TPU needed.

  python -m experiments.tpu_compile --config=experiments/configs/paper.py --topology=v5e-8
  python -m experiments.tpu_compile --config=experiments/configs/paper.py --topology=v4-8 \
      --config.model.kernels=fused --config.loop.mesh_fsdp=2 --find_batch
  python -m experiments.tpu_compile --config=experiments/configs/imdb.py --topology=v5e-256 \
      --config.optim.batch_size=256 --programs=train,eval

The programs are those the training loop would run on that slice, built by
the loop's own code (`glomo_jax.train.programs.RunPrograms`: the same jit,
shardings, donation of the state, and the kernels' form for the slice's
devices) from the run kind's task at the config's sizes
(`experiments.compile_targets`; what a run reads from its data is assumed
and printed): the train step, the eval step and, for pretraining, the
export's `predict`. Per program and device it prints the bytes of the
arguments, the outputs, the outputs that reuse the donated state ('alias'),
the temporaries, the compiler's peak and the code, what the program needs
(`glomo_jax.train.memory.ProgramMemory.needed`: peak + outputs − alias +
code) against the chip's HBM, the Pallas (Mosaic) calls, the compiler's
FLOP count and the compile seconds. A program that the compiler refuses,
or that needs more than the chip's HBM (or `--hbm_gib`), exits 1 with one
line naming it, the bytes and the flags to change.

--topology takes a slice as Cloud TPU names it (v4-8, v5e-8 or
v5litepod-8, v5p-8, v6e-8, v5e-256, ...; `glomo_jax.train.tpu_slices`: v4
and v5p are megacore, a v4-8 is 4 devices) or a topology ('v5e:2x4');
--num_slices joins several over the data-centre network. --find_batch
searches, by compiling the train step, the largest global batch (a
multiple of the device count, or of --batch_step) whose step fits, as
MaxText's estimator does (`compile_report.Checker.find_batch`: the line
through the bytes of the two largest batches that fit predicts the next). The config's overrides are a run's (`--config.x.y=...`). Nothing
here says how fast a step runs.
"""
from __future__ import annotations

import json

from absl import flags
from ml_collections import config_flags

from experiments import cli

_CONFIG = config_flags.DEFINE_config_file("config", None, "A run's config file "
                                          "(experiments/configs/*.py[:preset]).",
                                          lock_config=True)
_TOPOLOGY = flags.DEFINE_string("topology", "v5e-8", "TPU slice: v4-8, v5e-8, v5p-8, v6e-8, "
                                "v5e-256, ... or a topology such as v5e:2x4.")
_NUM_SLICES = flags.DEFINE_integer("num_slices", 1, "Slices joined over the network.")
_PROGRAMS = flags.DEFINE_list("programs", ["train", "eval", "predict"],
                              "Programs to compile: train, eval, predict (pretraining).")
_FIND_BATCH = flags.DEFINE_bool("find_batch", False, "Search the largest global batch whose "
                                "train step fits.")
_MAX_BATCH = flags.DEFINE_integer("max_batch", 1 << 16, "--find_batch: stop searching here.")
_BATCH_STEP = flags.DEFINE_integer("batch_step", None, "--find_batch: the batches tried are "
                                   "multiples of this (default: the device count).")
_HBM_GIB = flags.DEFINE_float("hbm_gib", None, "Count a program as fitting only within this "
                              "many GiB a device (default: the chip's HBM; less leaves room).")
_VOCAB = flags.DEFINE_integer("vocab", 30_000, "Downstream text tasks: the vocabulary "
                              "assumed (a run's comes from its data).")
_JSON = flags.DEFINE_string("json", None, "Also write the report as JSON here.")
flags.mark_flags_as_required(["config"])


def main(argv):
  del argv
  from experiments.kinds import KINDS, kind_of_file  # noqa: PLC0415
  from experiments import compile_targets, compile_report  # noqa: PLC0415
  from glomo_jax.train.tpu_slices import compile_devices, parse_slice  # noqa: PLC0415

  kind = kind_of_file(config_flags.get_config_filename(flags.FLAGS["config"]))
  config = KINDS[kind]()[0].from_dict(_CONFIG.value.to_dict())
  tpu = parse_slice(_TOPOLOGY.value, _NUM_SLICES.value)
  devices = compile_devices(tpu)
  sizes = compile_targets.Sizes(vocab=_VOCAB.value)
  limit = int(_HBM_GIB.value * 2 ** 30) if _HBM_GIB.value else None
  checker = compile_report.Checker(kind, tpu, devices, sizes, limit)
  fsdp = config.loop.mesh_fsdp
  data = config.loop.mesh_data if config.loop.mesh_data > 0 else len(devices) // fsdp
  print(f"{tpu.describe()}, HBM {checker.hbm / 2 ** 30:.2f} GiB a device; mesh data {data} × "
        f"fsdp {fsdp}")
  report = {"slice": tpu.name, "num_slices": tpu.num_slices, "kind": kind,
            "device_kind": tpu.generation.device_kind, "hbm_bytes": checker.hbm}
  if _FIND_BATCH.value:
    report["find_batch"] = found = checker.find_batch(config, _MAX_BATCH.value, print,
                                                      _BATCH_STEP.value)
    print(f"largest batch that fits: {found['batch']}" + (
        f" ({found['bytes'] / 2 ** 30:.2f} GiB a device); {found['next']} does not"
        if found["batch"] else ""))
  else:
    rows = checker.compile_all(config, _PROGRAMS.value)
    report["programs"] = rows
    print(compile_report.table(rows, checker.hbm))
    report["assumed"] = rows[0]["assumed"] if rows else {}
    print("assumed of the data: " + json.dumps(report["assumed"]))
  if _JSON.value:
    from glomo_jax.io import write_json  # noqa: PLC0415
    write_json(_JSON.value, report, indent=2)


if __name__ == "__main__":
  cli.run(main)
