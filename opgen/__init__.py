"""opgen: a code-generating compiler for deep-learning kernels."""
__version__ = "0.1.0"
