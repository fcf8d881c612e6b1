"""Kernel latencies from AIConfigurator's measured database (aiconfigurator_core), one op at a time.

Each answer is the database's own per-op query (its compiled engine, as AIConfigurator's estimates
use it) at one shape: GEMMs by (M, N, K, format), context (prefill) attention by (batch, length,
heads, KV heads, head size, format), generation (decode) attention by (batch, KV length, ...), an MoE layer's experts by (tokens, hidden,
intermediate, top-k, experts, TP split, format).
Answers the database marks as formula estimates (empirical, SOL) are refused: only measured ones.
"""

from __future__ import annotations

import functools
import importlib.metadata
import logging
import warnings
from dataclasses import dataclass

BACKEND = "trtllm"
#: The database's answer kinds that rest on measured rows ("mixed": a sum of measured parts and others).
MEASURED = ("silicon", "mixed")


@dataclass(frozen=True)
class Timed:
    """One measured latency (seconds) and what the database says it rests on."""

    seconds: float
    kind: str


def aic_version() -> str:
    return importlib.metadata.version("aiconfigurator-core")


def systems_with_data() -> list[str]:
    """The systems whose database has the backend's measured kernels."""
    from aiconfigurator_core.sdk import perf_database

    with _quiet():
        found = perf_database.get_supported_databases()
    return sorted(s for s, backends in found.items() if backends.get(BACKEND))


class Database:
    """One system's database under the backend's current version, queried per op."""

    def __init__(self, system: str) -> None:
        from aiconfigurator_core.sdk import perf_database
        from aiconfigurator_core.sdk.engine import EngineHandle

        self.system = system
        with _quiet():
            self.version = perf_database.get_latest_database_version(system, BACKEND)
            self._db = perf_database.get_database(system, BACKEND, self.version)
            self._handle = EngineHandle.for_database(self._db)

    @property
    def label(self) -> str:
        return f"AIConfigurator {aic_version()} {self.system} {BACKEND} {self.version} database"

    def _time(self, op, context: bool, batch: int, s: int) -> Timed | None:
        from aiconfigurator_core.sdk.engine import build_ops_json

        try:
            with _quiet():
                (_, ms, _, kind), *_ = self._handle.evaluate_ops_json(build_ops_json([op]), is_context=context,
                                                                      batch_size=batch, s=s)
        except Exception:  # a shape or format the database cannot answer
            return None
        return Timed(ms * 1e-3, kind) if kind in MEASURED and ms > 0 else None

    def gemm(self, m: int, n: int, k: int, fmt: str) -> Timed | None:
        """An (M x K) @ (K x N) GEMM in `fmt` ("bfloat16", "fp8")."""
        from aiconfigurator_core.sdk import common, operations

        op = operations.GEMM("gemm", 1, n, k, common.GEMMQuantMode[fmt])
        return self._time(op, True, 1, m)

    def prefill_attention(self, batch: int, length: int, heads: int, kv_heads: int, head_dim: int,
                          fmt: str) -> Timed | None:
        """Causal context attention over `length` tokens; `fmt` is both the FMHA's and the KV cache's."""
        from aiconfigurator_core.sdk import common, operations

        op = operations.ContextAttention("attention", 1, heads, kv_heads, common.KVCacheQuantMode[fmt],
                                         common.FMHAQuantMode[fmt], head_size=head_dim)
        return self._time(op, True, batch, length)

    def decode_attention(self, batch: int, kv_len: int, heads: int, kv_heads: int, head_dim: int,
                         fmt: str) -> Timed | None:
        """One query token per sequence over `kv_len` cached tokens, the cache in `fmt`."""
        from aiconfigurator_core.sdk import common, operations

        op = operations.GenerationAttention("attention", 1, heads, kv_heads, common.KVCacheQuantMode[fmt],
                                            head_size=head_dim)
        return self._time(op, False, batch, kv_len)


    def moe(self, tokens: int, hidden: int, inter: int, topk: int, experts: int, tp: int, fmt: str) -> Timed | None:
        """One MoE layer's experts (gate-up, activation, down) over `tokens` tokens routed evenly
        ("balanced"), the experts split `tp` ways, weights in `fmt` ("fp8_block", "bfloat16")."""
        from aiconfigurator_core.sdk import common, operations

        op = operations.MoE("moe", 1, hidden, inter, topk, experts, tp, 1, common.MoEQuantMode[fmt], "balanced", 1)
        return self._time(op, False, tokens, 1)


@functools.lru_cache(maxsize=4)
def database(system: str) -> Database:
    return Database(system)


class _quiet:
    """AIConfigurator's loading logs and warnings kept off the report's streams."""

    def __enter__(self):
        self._warnings = warnings.catch_warnings()
        self._warnings.__enter__()
        warnings.simplefilter("ignore")
        self._level = logging.root.manager.disable
        logging.disable(logging.WARNING)
        return self

    def __exit__(self, *exc):
        logging.disable(self._level)
        self._warnings.__exit__(*exc)
        return False
