"""Traces in: a torch.profiler trace read, its ops counted from their recorded shapes by the same
formula registry and byte rules as a capture (counts), and joined to the kernels they launched."""
