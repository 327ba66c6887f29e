"""glomo_jax: GLoMo (Yang et al., NeurIPS 2018) in JAX/Flax.

Learned relational graphs as transferable representations: pretrain a graph
predictor without labels, freeze it, and multiply its graphs into any
downstream model's features.
"""
from glomo_jax.config import ModelConfig
from glomo_jax.models.glomo import GLoMo

__version__ = "0.1.0"
__all__ = ["GLoMo", "ModelConfig", "__version__"]
