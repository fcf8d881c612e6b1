"""The MoE plugin's module model: `ExpertsModel`, the expected-load stand-in for an experts
container (see rooflinekit_plugins.moe, which builds it).

Apart from the plugin's hooks because it needs torch and the capture machinery: `moe` imports it
when its `rooflinekit_module_model` hook first finds an experts container, so loading the plugin
(`rooflinekit hardware list`, `rooflinekit plugins`) imports no torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from rooflinekit.plugin import (
    Dispatch,
    ModuleModel,
    OpCounts,
    Provenance,
    emit,
    emit_collective,
    emit_dispatch,
    suppressed,
)
from rooflinekit_plugins import moe  # its expected_distinct_experts: the one formula


@dataclass
class ExpertsModel(ModuleModel):
    """Expected-load model of one experts container.

    `matrices` are the per-expert weight matrices in execution order, as (name, out, in);
    a gated MLP (`gated=True`) has its first matrix produce 2*inter (gate and up) and an
    elementwise act(gate)*up between the matrices. `biases` are per-expert bias sizes.

    Parallelism (one GPU's share; the planned-parallelism options --ep/--tp set these):

    - `ep_size` > 1 with `tp_size` 1: expert parallelism with data-parallel attention. Each of the
      ep GPUs brings its own T tokens (the workload's batch is per GPU) and holds E/ep experts;
      every token goes to k experts, so each GPU runs T*k expert applications in expectation and
      its experts are hit by ep*T tokens; an all-to-all dispatch sends each token's k copies to
      their experts and an all-to-all combine brings them back.
    - `tp_size` > 1: each expert's first matrices split by columns, its last by rows (tensor
      parallelism inside every expert); an all-reduce sums the experts' output.
    - `ep_size` == `tp_size` > 1: the tokens are the same on every GPU of the group (tensor-
      parallel attention); each GPU runs its E/ep experts on the T*k/ep rows routed to them and
      an all-reduce sums the partial outputs (no all-to-all: every GPU already has every token).
    """

    num_experts: int
    matrices: list[tuple[str, int, int]]
    itemsize: int
    dtype: str
    top_k: int | None = None
    gated: bool = True
    biases: list[tuple[str, int]] = field(default_factory=list)
    ep_size: int = 1
    tp_size: int = 1
    #: Extra expert copies over the EP group (Deployment.redundant_experts): E + R slots, an
    #: expert's tokens split evenly between its copies.
    redundant: int = 0
    #: The busiest EP rank's tokens over the mean (Deployment.ep_imbalance): its rows and
    #: all-to-all bytes scale by it.
    imbalance: float = 1.0
    #: Polynomial counts but the weights, which follow the expected distinct experts (declared on
    #: each record, rooflinekit.stages.modelled.emit's `experts`): step models fit it from few batches.
    scaling: str | None = "expected-experts"

    @property
    def assumption(self) -> str:  # type: ignore[override]
        return ("MoE experts modelled under uniform routing: T tokens choosing k of E experts "
                "touch E*(1-(1-k/E)^T) distinct experts, each expert's weights read once per step; "
                "FLOPs count T*k expert applications")

    def forward(self, module, path, args, kwargs):
        hidden = args[0] if args else kwargs.get("hidden_states")
        index = args[1] if len(args) > 1 else kwargs.get("top_k_index", kwargs.get("router_indices"))
        k = int(index.shape[-1]) if isinstance(index, torch.Tensor) else int(self.top_k or 1)
        tokens = math.prod(hidden.shape[:-1])
        self.account(path, tokens, k, hidden.shape[-1])
        with suppressed():
            return torch.zeros_like(hidden)

    @property
    def dp_tokens(self) -> bool:
        """Expert parallelism over data-parallel attention: each GPU brings its own tokens."""
        return self.ep_size > 1 and self.tp_size == 1

    def account(self, path: str, tokens: int, k: int, hidden: int) -> None:
        """Emit the modelled records for `tokens` tokens routed to `k` experts each."""
        e_total, ep, tp = self.num_experts, self.ep_size, self.tp_size
        redundant = self.redundant if ep > 1 else 0
        imbalance = self.imbalance if ep > 1 else 1.0
        local = (e_total + redundant) / ep
        split = tp if ep == 1 else 1  # with EP the experts are spread whole over the GPUs
        # tokens reaching the experts of this GPU's group, and the rows this GPU computes (the
        # busiest rank's: the stated imbalance over the mean)
        group_tokens = tokens * ep if self.dp_tokens else tokens
        rows = group_tokens * k / ep * imbalance
        # uniform routing over all E experts (and their copies); this GPU holds 1/ep of the slots
        touched = moe.expected_distinct_experts(group_tokens, k, e_total, redundant) / ep
        isz = self.itemsize
        note = self.assumption + f" (T={group_tokens}, k={k}, E={e_total}: {touched:.1f} experts" + (
            f" of {local:g} local" if ep > 1 else "") + (f", {redundant} redundant copies" if redundant else "") + (
            f", the busiest rank {imbalance:g}x the mean tokens" if imbalance != 1.0 else "") + (
            f", each split {split} ways" if split > 1 else "") + ")"
        terms = {"tokens": group_tokens, "k": k, "experts": e_total, "share": 1 / ep,
                 **({"redundant": redundant} if redundant else {})}
        at, a2a = Provenance(path, self.dtype, note), Provenance(path, self.dtype, _A2A_NOTE)
        if self.dp_tokens:
            emit_dispatch(Dispatch(tokens * imbalance, k, hidden, isz, ep, e_total + redundant), at=a2a)
        last = len(self.matrices) - 1
        kernel = self._kernel(group_tokens * imbalance, k, hidden, split)
        for i, (name, out_f, in_f) in enumerate(self.matrices):
            # tensor parallelism: the last matrix splits its input (rows), the others their output
            out_l = out_f / split if i < last or last == 0 else out_f
            in_l = in_f / split if i == last and last > 0 else in_f
            weights = touched * out_l * in_l * isz
            emit(
                f"moe.{name}",
                OpCounts(flops=2 * rows * out_l * in_l, bytes_read=weights + rows * in_l * isz,
                         bytes_written=rows * out_l * isz, param_bytes=weights),
                at=at, shapes=f"{rows:g}x{in_l:g},{touched:.1f}x{out_l:g}x{in_l:g}", experts=terms,
                kernel={**kernel, "share": out_f * in_f / sum(o * n for _, o, n in self.matrices)},
            )
            if self.gated and i == 0 and len(self.matrices) > 1:
                inter = out_l / 2
                emit("moe.act_and_mul", OpCounts(flops=0, bytes_read=rows * out_l * isz,
                                                 bytes_written=rows * inter * isz), at=at, counted=False,
                     kernel={**kernel, "share": 0.0})  # inside a fused-MoE call's measured time
        for name, size in self.biases:
            emit(f"moe.{name}", OpCounts(flops=0, bytes_read=touched * size * isz, bytes_written=0,
                                         param_bytes=touched * size * isz), at=at, experts=terms)
        if self.dp_tokens:
            emit_dispatch(Dispatch(tokens * imbalance, k, hidden, isz, ep, e_total + redundant, combine=True), at=a2a)
            rows = tokens * k  # the combine runs on this GPU's own tokens' k outputs
        # weighted combine of each token's k expert outputs
        emit("moe.combine", OpCounts(flops=0, bytes_read=rows * hidden * isz, bytes_written=tokens * hidden * isz),
             at=at, kernel={**kernel, "share": 0.0})
        if tp > 1:
            emit_collective("all_reduce", group_size=tp, message_bytes=tokens * hidden * isz,
                            at=Provenance(path, self.dtype, _AR_NOTE), shapes=f"{tokens}x{hidden}")


    def _kernel(self, tokens: float, k: int, hidden: int, split: int) -> dict:
        """The MoE layer as a database of measured kernels is asked for it (rooflinekit.stages.kernel_times,
        kind "experts": a fused-MoE call, its grouped GEMMs, the activation between them and the
        weighted combine): the tokens routed into this GPU's expert group (the busiest rank's, under a
        stated imbalance), one expert's shapes, and the split; its format is the record's, as the
        transforms leave it (fp8 weights)."""
        first = self.matrices[0][1]
        inter = first // 2 if self.gated and len(self.matrices) > 1 else first
        return {"kind": "experts", "tokens": tokens, "hidden": hidden, "inter": inter,
                "top_k": k, "experts": self.num_experts, "tp": split, "ep": self.ep_size}


_A2A_NOTE = ("expert-parallel all-to-all (dispatch, then combine): each GPU sends its T tokens' k "
             "copies, T*k*hidden*itemsize bytes, of which (N-1)/N leave the GPU under uniform routing")
_AR_NOTE = "the experts' outputs are partial sums on each GPU: one all-reduce of T*hidden*itemsize"
