"""rooflinekit-swa: an example third-party rooflinekit plugin distribution.

Four plugins, one per entry point in the ``rooflinekit`` group (see pyproject.toml):

- ``swa_attention`` (rooflinekit_swa.attention): a what-if sliding window (``ROOFLINEKIT_SWA_WINDOW``)
  that overrides rooflinekit's built-in window recognition (``tryfirst``)
- ``swa_grouped_mm`` (rooflinekit_swa.grouped_mm): FLOPs of ``aten._grouped_mm`` (MoE experts)
- ``swa_hardware`` (rooflinekit_swa.hardware): H100 NVL and GH200 hardware entries
- ``swa_card`` (rooflinekit_swa.card): a loader for ``*.swa.toml`` model cards

``rooflinekit_swa.model`` is the Mistral-style model those cards build (also usable as a model file).
"""

__version__ = "0.1.0"
