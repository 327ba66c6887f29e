"""One process of a jax.distributed job, started by test_train_multihost:
reads its rows of one epoch of pretraining batches, as PretrainingTask does,
and saves them. Process 0 also saves the batches of the same data read by a
single process, for comparison.

  python tests/multihost_data_worker.py PORT PROCESS_ID NUM_PROCESSES WORKDIR OUT.npz
"""
import sys

import jax
import numpy as np

port, process_id, num_processes, workdir, out = sys.argv[1:6]
jax.distributed.initialize(f"127.0.0.1:{port}", int(num_processes), int(process_id))

from experiments.configs import demo  # noqa: E402
from glomo_jax.data.windows import pretraining_data  # noqa: E402
from glomo_jax.pretraining import PretrainConfig, PretrainingTask  # noqa: E402

config = PretrainConfig.from_dict(demo.get_config("tiny").to_dict())
task = PretrainingTask(config, workdir)
windows = task.train_batches().windows
batches = [next(windows) for _ in range(windows.batches_per_epoch)]
arrays = {"window_index": np.stack([b["window_index"] for b in batches]),
          "tokens": np.stack([b["tokens"] for b in batches]),
          "num_windows": windows.num_windows}
if jax.process_index() == 0:
  single = pretraining_data(config.corpus, task.tokenizer, batch_size=config.batch_size,
                            bptt=config.bptt, shift=config.shift, seed=config.seed,
                            heldout_fraction=config.heldout_fraction).train
  reference = [next(single) for _ in range(single.batches_per_epoch)]
  arrays["single_window_index"] = np.stack([b["window_index"] for b in reference])
  arrays["single_tokens"] = np.stack([b["tokens"] for b in reference])
np.savez(out, **arrays)
