"""Pretraining GLoMo on text: `PretrainConfig`, the `PretrainingTask` of the
training loop, and `train_and_evaluate(config, workdir)`."""
from glomo_jax.pretraining.config import PretrainConfig
from glomo_jax.pretraining.objective import GLoMoObjective
from glomo_jax.pretraining.task import (CONFIG_FILE, TOKENIZER_FILE, PretrainingTask,
                                        prepare_tokenizer, train_and_evaluate)

__all__ = ["CONFIG_FILE", "GLoMoObjective", "PretrainConfig", "PretrainingTask", "TOKENIZER_FILE",
           "prepare_tokenizer", "train_and_evaluate"]
