r"""CIFAR-10 with graphs between pixels: a ResNet with or without the GLoMo
transfer (`glomo_jax.images.cifar.run_cifar`).

  python -m experiments.cifar --config=experiments/configs/cifar.py:cpu \
      --config.train.location=../shared/data/cifar10/cifar10_train20k_from_jpeg.npz \
      --workdir=runs/cifar_baseline [--config.variant=glomo \
      --config.predictor_export=runs/images_cpu/export] [--config.seed=1]

Writes <workdir>/results.json (best validation accuracy, test accuracy of
those variables when there is a test split, the curve, times). Rerunning
the same command resumes the run.

Flags, --distributed and the printed summary: `experiments.entry`.
"""
from experiments import entry

if __name__ == "__main__":
  entry.run_kind("cifar")
