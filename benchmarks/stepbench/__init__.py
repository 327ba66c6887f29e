"""The pretraining-step benchmark behind benchmarks/pretrain_step.py.

Modules, one job each:

* `configs`: the peer's named configs mirrored, paths, the run's ModelConfig.
* `flops`: matmul/conv FLOPs of a training step counted from the shapes.
* `machine`: facts about the machine and the running process (RSS, JAX).
* `hlo`: XLA's cost and memory analyses and what the optimised HLO holds.
* `step`: the training step as the benchmark compiles and times it.
* `workers`, `pipeline_worker`: the jobs run in fresh subprocesses
  (``pretrain_step.py --worker JOB``), each printing one JSON line.
* `driver`: the subprocess protocol (command lines, environments, JSON).
* `report`: results files, markdown tables and the sweep plot.
* `modes`: what each mode of the command line runs and reports.

Only `step`, `hlo` (given compiled programs), `machine.jax_info`,
`machine.device_memory` and the workers import JAX; the driver side never
does.
"""
