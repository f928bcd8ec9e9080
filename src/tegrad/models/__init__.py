"""Whole networks built from ``tg.nn``, as one tensor-expression graph each, with
parameter names that match their PyTorch modules (so weights load by name):
``resnet`` (torchvision's ResNet-18/34/50 layout) and ``language_model`` (embedding,
stacked LSTM, linear decoder). ``tg.gradient`` of their loss is the whole backward.
"""

from .language_model import language_model, language_model_parameters, language_model_shapes
from .resnet import ARCHITECTURES, parameter_shapes, resnet, resnet_parameters

__all__ = ["ARCHITECTURES", "language_model", "language_model_parameters",
           "language_model_shapes", "parameter_shapes", "resnet", "resnet_parameters"]
