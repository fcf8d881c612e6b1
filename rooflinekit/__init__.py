"""rooflinekit: roofline profiling for PyTorch LLMs.

Counts FLOPs and bytes per aten op and per module of the user's own model, attributes attention
and KV-cache traffic per architecture through plugins, and places every part on the roofline of a
real accelerator.
"""

__version__ = "0.1.0"
SCHEMA_VERSION = "1.0"
