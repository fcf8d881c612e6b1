"""The aic database of measured kernels (rooflinekit.stages.kernel_times): each kernel's time at its
own shape from AIConfigurator's per-op query, as its estimates ask it.

- GEMMs by (M, N, K) in the op's format (`formats` maps rooflinekit's to the database's: fp8 is
  per-tensor fp8 unless the file says fp8_block, as DeepSeek's 128 x 128 block scales are);
- attention of the GQA family (mha, gqa, mqa) by batch, lengths and one GPU's heads: one new token per
  sequence is a generation kernel over the positions attended, more is a context kernel over the new
  tokens with the rest as its prefix; the KV cache's format as the query names it, the FMHA's bf16
  (fp8 where `fmha = "fp8"`); MLA's absorbed generation kernel by batch, positions and heads (its
  context kernel alone is not answered);
- DeepSeek-V3's MLA layer whole (`attention_layer`) as the database's MLA module, which TensorRT-LLM
  runs and AIConfigurator times as one: the projections (the absorbed ones batched), norms, rotary
  and attention kernel of one GPU's heads, in generation and in context;
- an MoE layer's experts by tokens routed into the GPU's expert group, shapes, top-k, experts and
  split, under `routing` (balanced by default, as rooflinekit's expected distinct experts assume; the
  database's power-law distributions, such as AIConfigurator's default power_law_1.2, by name), each
  record its `share` of the layer;
- all-reduces by message within one node (TensorRT-LLM's custom all-reduce, 16-bit elements);
- an expert-parallel all-to-all within one node that declares its shape, as the database's MoE
  dispatch (or combine) over attention-data-parallel ranks, in fp8 or bf16 by the bytes per element
  it sends.

Everything else (MLA's prefill kernel outside DeepSeek-V3's layer, other collectives, element-wise
kernels outside a measured layer or call) is not answered, so the fractions price it. Only answers resting on measured rows are given (measure.MEASURED).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from rooflinekit.plugin import PUBLISHED_EFFICIENCY, UserError
from rooflinekit_plugins.aic.measure import BACKEND, MEASURED, Database, _quiet, database

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

#: rooflinekit's formats -> the database's GEMM / MoE / KV cache formats.
GEMM_FORMATS = {"bf16": "bfloat16", "fp16": "bfloat16", "fp8": "fp8"}
KV_FORMATS = {"bf16": "bfloat16", "fp16": "bfloat16", "fp8": "fp8"}
#: The attention variants a GQA-family kernel serves.
GQA_FAMILY = ("mha", "gqa", "mqa")
#: The largest group the custom all-reduce spans (one NVLink node).
NODE = 8
#: The MLA layer the database's MLA module tables measure (DeepSeek-V3): its heads, and its
#: projections' weights in elements (q_a 7168 x 1536, kv_a 7168 x 576, q_b 1536 x 128 x 192, kv_b
#: 512 x 128 x 256, o 128 x 128 x 7168).
DSV3_HEADS = 128
DSV3_MLA_WEIGHTS = 7168 * 1536 + 7168 * 576 + 1536 * 128 * 192 + 512 * 128 * 256 + 128 * 128 * 7168


class AicKernels:
    """`seconds(query)`: one kernel's measured time from one system's database, or None."""

    def __init__(self, system: str, settings: dict) -> None:
        given = settings.get("formats") or {}
        if not isinstance(given, dict):
            raise UserError(f"aic kernel times: formats must be a table such as {{ fp8 = \"fp8_block\" }}, "
                            f"not {given!r}")
        self.db: Database = database(system)
        formats = dict(GEMM_FORMATS)
        formats.update({str(k): str(v) for k, v in given.items()})
        self.formats = formats
        self.routing = str(settings.get("routing", "balanced"))
        self.fmha = str(settings.get("fmha", "bfloat16"))
        self.label = f"{self.db.label} (per-op kernel times)"
        #: AIConfigurator's collectors time each op in CUDA-graph replays (benchmark_with_power's graph
        #: capture), so each time carries a graph node's launch: the published table's figure for one
        self.launch_included_s = float(tomllib.loads(Path(PUBLISHED_EFFICIENCY).read_text())["launch"]["decode_s"])
        self._asked: dict = {}
        _check_settings(self.fmha, self.formats, self.routing)

    def seconds(self, query) -> float | None:
        if query not in self._asked:
            handler = {"gemm": self._gemm, "attention": self._attention, "experts": self._experts,
                       "all_reduce": self._all_reduce, "all_to_all": self._all_to_all,
                       "attention_layer": self._attention_layer}.get(query.kind)
            self._asked[query] = None if handler is None else handler(query)
        return self._asked[query]

    def _evaluate(self, op, context: bool, batch: int, s: int, prefix: int = 0) -> float | None:
        from aiconfigurator_core.sdk.engine import build_ops_json

        try:
            with _quiet():
                (_, ms, _, kind), *_ = self.db._handle.evaluate_ops_json(build_ops_json([op]), is_context=context,
                                                                         batch_size=batch, s=s, prefix=prefix)
        except Exception:  # a shape or format the database cannot answer
            return None
        return ms * 1e-3 if kind in MEASURED and ms > 0 else None

    def _gemm(self, q) -> float | None:
        from aiconfigurator_core.sdk import common, operations

        fmt = self.formats.get(q.dtype)
        if fmt not in common.GEMMQuantMode.__members__:
            return None
        op = operations.GEMM("gemm", 1, int(q["n"]), int(q["k"]), common.GEMMQuantMode[fmt])
        return self._evaluate(op, True, 1, max(1, round(q["m"])))

    def _attention(self, q) -> float | None:
        from aiconfigurator_core.sdk import common, operations

        kv = KV_FORMATS.get(q.dtype)
        batch, q_len, kv_len = max(1, round(q["batch"])), max(1, round(q["q_len"])), max(1, round(q["kv_len"]))
        if q.variant == "mla" and q_len == 1 and kv is not None:  # the absorbed MLA kernel over the latent cache
            op = operations.GenerationMLA("attention", 1, int(q["heads"]), common.KVCacheQuantMode[kv])
            return self._evaluate(op, False, batch, kv_len)
        if q.variant not in GQA_FAMILY or kv is None:
            return None
        heads, kv_heads, head = int(q["heads"]), int(q["kv_heads"]), int(q["head_dim"])
        if q_len == 1:
            op = operations.GenerationAttention("attention", 1, heads, kv_heads, common.KVCacheQuantMode[kv],
                                                head_size=head)
            return self._evaluate(op, False, batch, kv_len)
        op = operations.ContextAttention("attention", 1, heads, kv_heads, common.KVCacheQuantMode[kv],
                                         common.FMHAQuantMode[self.fmha], head_size=head)
        return self._evaluate(op, True, batch, q_len, prefix=max(0, kv_len - q_len))

    def _attention_layer(self, q) -> float | None:
        """A DeepSeek-V3 MLA layer whole, as the database's MLA module (its projections, norms, rotary
        and attention kernel, measured together in TensorRT-LLM): only for the layer the module table
        measures (128 heads, DeepSeek-V3's projection weights), in bf16 or block-scaled fp8."""
        from aiconfigurator_core.sdk import common, operations

        gemm, kv = self.formats.get(q.dtype), {1: "fp8", 2: "bfloat16"}.get(int(q.get("kv_itemsize") or 0))
        if (q.variant != "mla" or q.get("heads_total") != DSV3_HEADS or q.get("weights") != DSV3_MLA_WEIGHTS
                or gemm not in ("bfloat16", "fp8_block") or kv is None):
            return None
        batch, q_len, kv_len = max(1, round(q["batch"])), max(1, round(q["q_len"])), max(1, round(q["kv_len"]))
        op = operations.MLAModule("mla", 1, q_len > 1, int(q["heads"]), common.KVCacheQuantMode[kv],
                                  common.FMHAQuantMode[self.fmha], common.GEMMQuantMode[gemm],
                                  native_num_heads=DSV3_HEADS)
        if q_len == 1:
            return self._evaluate(op, False, batch, kv_len)
        return self._evaluate(op, True, batch, q_len, prefix=kv_len - q_len)

    def _experts(self, q) -> float | None:
        from aiconfigurator_core.sdk import common, operations

        fmt = self.formats.get(q.dtype)
        if fmt not in common.MoEQuantMode.__members__:
            return None
        op = operations.MoE("moe", 1, int(q["hidden"]), int(q["inter"]), int(q["top_k"]), int(q["experts"]),
                            int(q["tp"]), int(q["ep"]), common.MoEQuantMode[fmt], self.routing, 1)
        return self._evaluate(op, False, max(1, round(q["tokens"])), 1)

    def _all_to_all(self, q) -> float | None:
        """An expert-parallel dispatch or combine (declared by the experts module model) as the
        database's MoE dispatch over attention-data-parallel ranks: this GPU's tokens, one per rank."""
        from aiconfigurator_core.sdk import common, operations

        ep = int(q.get("ep") or 0)
        if q.get("tokens") is None or not 1 < ep <= NODE:
            return None  # an all-to-all that declares no shape, or one across nodes (AIConfigurator's
            # estimates price wide EP with other tables)
        fmt = "fp8" if q.get("itemsize") == 1 else "bfloat16"
        op = operations.MoEDispatch("dispatch", 1, int(q["hidden"]), int(q["top_k"]), int(q["experts"]), 1, ep, ep,
                                    not q.get("combine"), quant_mode=common.MoEQuantMode[fmt], backend=BACKEND)
        return self._evaluate(op, False, max(1, round(q["tokens"])), 1)

    def _all_reduce(self, q) -> float | None:
        from aiconfigurator_core.sdk import operations

        group, elements = int(q["group_size"]), round(q["message_bytes"] / 2)
        if not 1 < group <= NODE or elements < 1:
            return None
        return self._evaluate(operations.CustomAllReduce("all_reduce", 1, elements, group), False, 1, 1)


def _check_settings(fmha: str, formats: dict[str, str], routing: str) -> None:
    """One line naming a [kernel_times] setting the database has no such format or routing for."""
    from aiconfigurator_core.sdk import common

    if not re.fullmatch(r"balanced|power_law_\d+(\.\d+)?", routing):
        raise UserError(f"aic kernel times: routing = {routing!r} is neither balanced nor a power law such as "
                        "power_law_1.2 (the MoE tables' token distributions)")
    if fmha not in common.FMHAQuantMode.__members__:
        raise UserError(f"aic kernel times: fmha = {fmha!r} is none of {', '.join(common.FMHAQuantMode.__members__)}")
    for ours, theirs in formats.items():
        if theirs not in common.GEMMQuantMode.__members__:
            raise UserError(f"aic kernel times: formats.{ours} = {theirs!r} is none of "
                            f"{', '.join(common.GEMMQuantMode.__members__)}")


#: (system, settings) -> its database of kernel times, one per process.
_KERNELS: dict[tuple, AicKernels] = {}


def kernels(system: str, settings: dict) -> AicKernels:
    """The database of `system` under the file's settings (routing, fmha, formats), one per process."""
    key = (system, repr(sorted((k, repr(v)) for k, v in settings.items())))
    if key not in _KERNELS:
        _KERNELS[key] = AicKernels(system, settings)
    return _KERNELS[key]
