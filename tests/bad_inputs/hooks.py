"""Plugin faults in every hook with a structured answer: garbage, NaN, infinite, negative and
inconsistent values, and raising implementations, from small plugins written inline (registered
in-process as 'rkcase', `tryfirst` so that they answer before the built-ins).

Each is a warning case (tests/bad_inputs/case.py): the run goes on with the next implementation's
answer, exactly one warning names the plugin, and the report comes out.
"""

from __future__ import annotations

from bad_inputs.case import GQA, TINY, Case

CAT = "hooks"
IMPORTS = ("import math\nfrom dataclasses import replace\n\n"
           "from rooflinekit.plugin import (AttentionCost, AttentionShard, AttentionSpec, AttentionWindow,\n"
           "                                LeverProposal, hookimpl)\n\n"
           "NAN, INF = math.nan, math.inf\n\n\n")


def _plugin(hook: str, params: str, body: str) -> str:
    return f"{IMPORTS}@hookimpl(tryfirst=True)\ndef {hook}({params}):\n" + "".join(
        f"    {line}\n" for line in body.splitlines())


def _case(name: str, hook: str, params: str, body: str, needles: list[str], args: list[str]) -> Case:
    return Case(name, CAT, args, needles, plugin=_plugin(hook, params, body))


def _answers(prefix: str, hook: str, params: str, guard: str, values: dict[str, tuple[str, str]],
             args: list[str]) -> list[Case]:
    """One case per bad answer: `guard` picks what the plugin answers for (else None)."""
    return [_case(f"{prefix}-{name}", hook, params, f"if {guard}:\n    {answer}\nreturn None",
                  ["plugin 'rkcase'", hook, needle], args)
            for name, (answer, needle) in values.items()]


PROFILE = ["profile", GQA, *TINY]
SPEC = "AttentionSpec('gqa', {}, {}, {}, {})"
SPECS = {
    "zero-heads": (f"return {SPEC.format(0, 2, 32, 32)}", "num_heads must be a whole number"),
    "negative-heads": (f"return {SPEC.format(-8, 2, 32, 32)}", "num_heads"),
    "string-heads": (f"return {SPEC.format(repr('8'), 2, 32, 32)}", "num_heads"),
    "float-heads": (f"return {SPEC.format(8.5, 2, 32, 32)}", "num_heads"),
    "nan-head-dim": (f"return {SPEC.format(8, 2, 'NAN', 32)}", "head_dim"),
    "negative-head-dim": (f"return {SPEC.format(8, 2, -32, 32)}", "head_dim"),
    "inf-v-head-dim": (f"return {SPEC.format(8, 2, 32, 'INF')}", "v_head_dim"),
    "zero-kv-heads": (f"return {SPEC.format(8, 0, 32, 32)}", "num_kv_heads"),
    "kv-heads-above-heads": (f"return {SPEC.format(4, 64, 32, 32)}", "num_kv_heads 64 exceeds num_heads 4"),
    "heads-not-divisible": (f"return {SPEC.format(8, 3, 32, 32)}", "not a multiple of num_kv_heads 3"),
    "huge-heads": (f"return {SPEC.format(1 << 40, 1, 32, 32)}", "num_heads"),
    "bool-heads": (f"return {SPEC.format(True, 1, 32, 32)}", "num_heads"),
    "empty-arch": ("return AttentionSpec('', 8, 2, 32, 32)", "arch must be a non-empty string"),
    "arch-not-string": ("return AttentionSpec(5, 8, 2, 32, 32)", "arch"),
    "negative-window": ("return AttentionSpec('gqa', 8, 2, 32, 32, window=-5)", "window"),
    "string-window": ("return AttentionSpec('gqa', 8, 2, 32, 32, window='full')", "window"),
    "negative-chunk": ("return AttentionSpec('gqa', 8, 2, 32, 32, chunk=-1)", "chunk"),
    "notes-none": ("return AttentionSpec('gqa', 8, 2, 32, 32, notes=None)", "notes must be a tuple of strings"),
    "notes-string": ("return AttentionSpec('gqa', 8, 2, 32, 32, notes='a note')", "notes"),
    "extra-list": ("return AttentionSpec('gqa', 8, 2, 32, 32, extra=[1, 2])", "extra must be a mapping"),
    "mode-number": ("return AttentionSpec('gqa', 8, 2, 32, 32, mode=3)", "mode must be a string"),
    "fixed-state-string": ("return AttentionSpec('gqa', 8, 2, 32, 32, fixed_state='yes')", "fixed_state"),
    "a-dict": ("return {'arch': 'gqa', 'num_heads': 8}", "expected AttentionSpec"),
    "a-string": ("return 'gqa'", "expected AttentionSpec"),
    "raises": ("raise ValueError('cannot read this module')", "ValueError: cannot read this module"),
}
WINDOWS = {
    "negative": ("return -5", "the window must be a whole number from 0"),
    "string": ("return 'full'", "expected int/AttentionWindow"),
    "float": ("return 512.5", "expected int/AttentionWindow"),
    "nan": ("return NAN", "expected int/AttentionWindow"),
    "bool": ("return True", "expected int/AttentionWindow"),
    "huge": ("return 1 << 40", "the window"),
    "list": ("return [4096]", "expected int/AttentionWindow"),
    "object-negative-window": ("return AttentionWindow(window=-3)", "window must be a whole number"),
    "object-string-window": ("return AttentionWindow(window='64')", "window must be"),
    "object-negative-chunk": ("return AttentionWindow(chunk=-1)", "chunk must be"),
    "object-nan-window": ("return AttentionWindow(window=NAN)", "window must be"),
    "object-notes-none": ("return AttentionWindow(window=16, notes=None)", "notes must be a tuple of strings"),
    "object-notes-numbers": ("return AttentionWindow(window=16, notes=(1, 2))", "notes must be"),
    "raises": ("raise RuntimeError('no window here')", "RuntimeError: no window here"),
}
COST = "AttentionCost(flops_model={}, kv_bytes_min={}, bytes_min={}, cache_bytes_per_token={})"
COSTS = {
    "negative-flops": (f"return {COST.format(-1e9, 1e6, 2e6, 256)}", "flops_model must be a finite number"),
    "nan-flops": (f"return {COST.format('NAN', 1e6, 2e6, 256)}", "flops_model"),
    "inf-flops": (f"return {COST.format('INF', 1e6, 2e6, 256)}", "flops_model"),
    "string-flops": (f"return {COST.format(repr('many'), 1e6, 2e6, 256)}", "flops_model"),
    "negative-kv-bytes": (f"return {COST.format(1e9, -1e6, 2e6, 256)}", "kv_bytes_min"),
    "nan-bytes": (f"return {COST.format(1e9, 1e6, 'NAN', 256)}", "bytes_min must be"),
    "bytes-below-kv": (f"return {COST.format(1e9, 2e6, 1e6, 256)}", "bytes_min must include kv_bytes_min"),
    "negative-cache-per-token": (f"return {COST.format(1e9, 1e6, 2e6, -256)}", "cache_bytes_per_token"),
    "inf-cache-per-sequence": (
        "return AttentionCost(1e9, 1e6, 2e6, 256, cache_bytes_per_sequence=INF)", "cache_bytes_per_sequence"),
    "flops-alt-negative": ("return AttentionCost(1e9, 1e6, 2e6, 256, flops_alt={'fa': -1.0})", "flops_alt['fa']"),
    "flops-alt-list": ("return AttentionCost(1e9, 1e6, 2e6, 256, flops_alt=[1.0])", "flops_alt must be a mapping"),
    "notes-none": ("return AttentionCost(1e9, 1e6, 2e6, 256, notes=None)", "notes must be"),
    "bool-flops": (f"return {COST.format(True, 1e6, 2e6, 256)}", "flops_model"),
    "a-number": ("return 1e9", "expected AttentionCost"),
    "a-dict": ("return {'flops_model': 1e9}", "expected AttentionCost"),
    "raises": ("raise ZeroDivisionError('costed by zero')", "ZeroDivisionError"),
}
SERVING = {k: COSTS[k] for k in ("negative-flops", "nan-bytes", "bytes-below-kv", "string-flops",
                                 "negative-cache-per-token", "a-number", "raises")}
SHARD = "AttentionShard(spec=replace(spec, num_heads=spec.num_heads // tp, num_kv_heads=1){})"
SHARDS = {
    "spec-string": ("return AttentionShard(spec='half the heads')", "its spec must be an AttentionSpec"),
    "spec-zero-heads": ("return AttentionShard(spec=replace(spec, num_heads=0))", "its spec: num_heads"),
    "spec-kv-above-heads": ("return AttentionShard(spec=replace(spec, num_heads=4, num_kv_heads=64))",
                            "num_kv_heads 64 exceeds"),
    "kv-empty": (f"return {SHARD.format(', kv=' + repr(''))}", "kv must be a non-empty string"),
    "replicated-string": (f"return {SHARD.format(', replicated=' + repr('q_proj'))}", "replicated must be a tuple"),
    "replicated-below-negative": (f"return {SHARD.format(', replicated_below=-1')}", "replicated_below"),
    "out-head-dim-zero": (f"return {SHARD.format(', out_head_dim=0')}", "out_head_dim"),
    "share-above-one": (f"return {SHARD.format(', colwise_shares={64: 2.0}')}", "colwise_shares"),
    "share-nan": (f"return {SHARD.format(', colwise_shares={64: NAN}')}", "colwise_shares"),
    "note-number": (f"return {SHARD.format(', note=5')}", "note must be a string"),
    "a-tuple": ("return (spec, 'split')", "expected AttentionShard"),
    "raises": ("raise KeyError('heads')", "KeyError"),
}

#: A model whose attention module declares no heads: recognised from its call alone.
CALL_MODEL = """
import torch
import torch.nn.functional as F


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Linear(64, 192)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, 4, 16).permute(2, 0, 3, 1, 4)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, 64)


def build_model(**options):
    return Block()


def make_inputs(batch, context, phase, **options):
    return (torch.randn(batch, context, 64),)
"""


def _with_files(cases: list[Case], files: dict[str, str]) -> list[Case]:
    for case in cases:
        case.files = dict(files)
    return cases


CASES = [
    *_answers("spec", "rooflinekit_attention_spec", "module, path, call", "path.endswith('self_attn')", SPECS,
              PROFILE),
    *_with_files(_answers("spec-from-call", "rooflinekit_attention_spec_from_call", "call", "True",
              {k: SPECS[k] for k in ("zero-heads", "kv-heads-above-heads", "nan-head-dim", "a-string", "raises")},
              ["profile", "block.py", "--phase", "prefill", "-s", "16"]), {"block.py": CALL_MODEL}),
    *_answers("window", "rooflinekit_attention_window", "module, path, call, spec", "True", WINDOWS, PROFILE),
    *_answers("cost", "rooflinekit_attention_cost", "spec, workload", "True", COSTS, PROFILE),
    *_answers("serving", "rooflinekit_serving_attention", "spec, workload", "True", SERVING,
              [*PROFILE, "--kernels", "serving"]),
    *_answers("shard", "rooflinekit_attention_shard", "spec, tp", "True", SHARDS, [*PROFILE, "--tp", "2"]),
]
