"""Generated operators inside other frameworks: PyTorch (``torch_bridge``), JAX
(``jax_bridge``) and TVM (``tvm_bridge``). Each framework is imported only when its
bridge is used; a missing one raises an ImportError that names the extra to install."""
