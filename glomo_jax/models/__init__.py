"""Flax linen modules of GLoMo."""
from glomo_jax.models.causal_conv import CausalConvBlock, CausalConvStack, TorchBatchNorm
from glomo_jax.models.context_decoder import ContextDecoder, context_inputs, context_targets
from glomo_jax.models.feature_predictor import FeaturePredictor, mix_heads
from glomo_jax.models.glomo import GLoMo
from glomo_jax.models.graph_predictor import GraphPredictor
from glomo_jax.models.gru import GRUCell, GRUStack
from glomo_jax.models.sentence_objective import sentence_targets
