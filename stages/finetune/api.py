"""The fine-tune stage's public surface for other stages: a run's inputs and the training loop. RMIA's reference
fine-tunes (``stages.reference``) train a run's recipe, with its q and T, on population rows instead of its own."""
from .inputs import Inputs, gather_inputs
from .loop import TrainConfig, train

__all__ = ["Inputs", "TrainConfig", "gather_inputs", "train"]
