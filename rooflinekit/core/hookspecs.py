"""Hook specifications: the plugin author's reference.

Implement any of these in a module or object, each function decorated with `hookimpl` from
`rooflinekit.plugin` (the plugin author's one import: the marker, the data types and the helpers),
and expose it through the `rooflinekit` entry-point group:

    [project.entry-points.rooflinekit]
    my_plugin = "my_package.my_module"

Hooks marked firstresult stop at the first non-None answer (later-registered plugins are asked
first; use `@hookimpl(tryfirst=True)` to go before the built-ins). A hook that raises, or returns
the wrong type, is named in one warning and skipped; the run goes on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:  # annotations only (never evaluated): no import at run time, no cycle
    from collections.abc import Callable, Iterable, Mapping
    from pathlib import Path

    import torch

    from rooflinekit.core.levers import LeverProposal
    from rooflinekit.core.report import Report
    from rooflinekit.core.request import Deployment, ModelSource, Workload
    from rooflinekit.core.specs import (
        AttentionCall,
        AttentionCost,
        AttentionShard,
        AttentionSpec,
        AttentionWindow,
        AttentionWorkload,
        ModuleModel,
    )

hookspec = pluggy.HookspecMarker("rooflinekit")
hookimpl = pluggy.HookimplMarker("rooflinekit")


@hookspec(firstresult=True)
def rooflinekit_attention_spec(
    module: torch.nn.Module, path: str, call: AttentionCall | None
) -> AttentionSpec | None:
    """firstresult: stops at the first non-None answer.

    Recognise an attention layer from its module. The core sets the answer's `plugin` to this
    plugin's name. The built-in `mla` plugin answers in the ordinary order; `mha` and `gqa` are
    `trylast`, so any plain implementation goes before them.

    :param module: the torch.nn.Module whose forward ran the attention (or one of its two nearest
        ancestors, asked in turn from innermost).
    :param path: its dotted path in the model, e.g. ``layers.3.self_attn``.
    :param call: the `AttentionCall` seen at run time in that module (shapes of q, k, v and the
        distinct K/V heads), or None when the shapes do not show heads. Use it to fill what the
        module does not declare; an implementation may leave the argument out.
    :return: an `AttentionSpec`, or None if this plugin does not know the module.
    """


@hookspec
def rooflinekit_mixer_sites(model: torch.nn.Module) -> Iterable[str] | None:
    """every plugin's answer is collected.

    Modules of the model that mix tokens through a state rather than through attention products
    (SSM, linear attention, RNN, short convolution layers), for the core to treat as sites like
    attention layers even when their ops include no product of two activations. Each site is then
    recognised through `rooflinekit_attention_spec` as any other; answer there with a spec whose
    `fixed_state` is True (`rooflinekit.plugin.state_spec`) and cost it with
    `rooflinekit.plugin.state_cost`.

    Asked once per model in a sweep (the model does not change between its captures).

    :param model: the torch.nn.Module as built.
    :return: module paths (as `model.named_modules()` gives them), or None.
    """


@hookspec(firstresult=True)
def rooflinekit_attention_spec_from_call(call: AttentionCall) -> AttentionSpec | None:
    """firstresult: stops at the first non-None answer.

    Recognise an attention layer from an intercepted call, when no module answered.

    :param call: an `AttentionCall` (shapes of q, k, v; enable_gqa; heads after undoing a repeat).
    :return: an `AttentionSpec`, or None.
    """


@hookspec(firstresult=True)
def rooflinekit_attention_window(
    module: torch.nn.Module, path: str, call: AttentionCall | None, spec: AttentionSpec
) -> int | AttentionWindow | None:
    """firstresult: stops at the first non-None answer.

    Which keys a recognised attention layer's queries see: a sliding window, or chunks.

    Asked after a layer is recognised, whatever plugin recognised it (MHA, GQA, MLA or another
    plugin's arch), when its spec has neither `window` nor `chunk` set: windows are independent of
    the architecture. The core applies the answer with ``dataclasses.replace(spec, window=...)``
    and the arch's cost caps the positions read and the pairs scored (`rooflinekit.core.keys`).
    The built-in `sliding_window` plugin answers from module attributes, a transformers `config`
    and banded masks; a plugin with ``@hookimpl(tryfirst=True)`` goes before it (an override).

    :param module: the module asked for the spec (the attention site or one of its two nearest
        ancestors, innermost first; asked in the same order until one answers).
    :param path: its dotted path in the model, e.g. ``model.layers.3.self_attn``.
    :param call: the site's `AttentionCall` (shapes; `mask_keys` when the mask held values), or None.
    :param spec: the `AttentionSpec` a recognising plugin returned.
    :return: the window as an int (positions each query attends, itself included); an
        `AttentionWindow` (window and/or chunk, with notes saying where it came from); 0 for full
        attention (stops the asking: nothing is applied); or None if this plugin does not know.
        A window at or above the context changes no number.
    """


@hookspec(firstresult=True)
def rooflinekit_attention_cost(spec: AttentionSpec, workload: AttentionWorkload) -> AttentionCost | None:
    """firstresult: stops at the first non-None answer.

    Architecture-level cost of one attention layer for one step.

    :param spec: the `AttentionSpec` a recognising hook returned.
    :param workload: an `AttentionWorkload` (batch, q_len, context, phase, itemsizes).
    :return: an `AttentionCost` (model FLOPs, minimum KV bytes, minimum bytes, cache bytes per
        token), or None if this plugin does not cost this spec's `arch`.
    """


@hookspec(firstresult=True)
def rooflinekit_serving_attention(spec: AttentionSpec, workload: AttentionWorkload) -> AttentionCost | None:
    """firstresult: stops at the first non-None answer.

    The serving kernel of one attention (or state) layer for one step, in the serving view
    (`--kernels serving`, rooflinekit.transforms.serving): what a production engine's kernel for this
    spec's `arch` computes and moves. The built-ins answer FlashAttention / paged attention for
    `mha`, `gqa` and `mqa` (`heads_cost`: q read, the K/V cache at its format read once per step
    whatever the q_len, the output written once; causal, window and chunk pairs), FlashMLA-style
    absorbed MLA for `mla` (the latent read once, W_UK/W_UV absorbed), and the scan / recurrent-step
    kernel of every fixed-state spec (the state read and written once). The layer's attention ops
    (products, masks, softmax, repeated or re-expanded K/V) are replaced by one record at this cost;
    a layer no plugin answers for stays as written, with a note. Under `--tp` it is asked again
    with one GPU's spec (`rooflinekit_attention_shard`'s).

    :param spec: the layer's `AttentionSpec` as recognised (its `mode` as the code runs it).
    :param workload: an `AttentionWorkload` (batch, q_len, context, phase, cache and activation
        itemsizes: the cache at the deployment's KV format).
    :return: an `AttentionCost` (`flops_model`: the kernel's FLOPs; `bytes_min`: what it moves;
        `kv_bytes_min`: its cache or state traffic), or None if this plugin has no serving kernel
        for this spec's `arch`.
    """


@hookspec(firstresult=True)
def rooflinekit_attention_shard(spec: AttentionSpec, tp: int) -> AttentionShard | None:
    """firstresult: stops at the first non-None answer.

    How an attention layer of this spec's `arch` splits under planned tensor parallelism
    (`--tp N`): what one GPU holds, which of the layer's projections stay whole, what the
    output projection reads. Asked once per layer for the plan (with N, and with N = 1 by
    `structural_tp_plan`, whose rules do not depend on N) and once per layer to re-cost it.
    `rooflinekit.plugin.split_heads(spec, tp)` answers for heads split N ways with K/V heads
    split or replicated; without any answer the core uses it and says so in a note.

    :param spec: the layer's single-GPU `AttentionSpec`.
    :param tp: the tensor-parallel size N (the core has checked that N divides the heads).
    :return: an `AttentionShard` (one GPU's spec, how the cache splits, the projections kept
        whole, the output projection's per-head width, colwise shares that are not 1/N, a note),
        or None if this plugin does not know this spec's `arch`. Raise
        `rooflinekit.core.errors.UserError` for a split the architecture cannot make.
    """


@hookspec
def rooflinekit_op_formulas() -> Mapping[object, Callable[..., float]] | None:
    """every plugin's answer is collected.

    FLOP formulas for ops torch's registry lacks or gets wrong. A plugin's formula wins over
    rooflinekit's and torch's; when two plugins give one for the same op, the first asked wins
    (later-registered first, `tryfirst` before plain) and one warning names both.

    :return: a dict mapping an op name (``"aten._grouped_mm"``) or OpOverloadPacket to a function
        ``f(*args, out=None, **kwargs) -> flops`` called with the op's real arguments.
    """


@hookspec
def rooflinekit_hardware_dirs() -> list[Path] | None:
    """every plugin's answer is collected.

    Folders (or single .toml files) of hardware entries to add to the database.

    :return: a list of `pathlib.Path`. Later folders override earlier entries of the same name.
    """


@hookspec(firstresult=True)
def rooflinekit_efficiency_source(source: str, hardware: Any) -> str | None:
    """firstresult: stops at the first non-None answer.

    The efficiency source named by `--efficiency SOURCE` (the expected time's achievable
    fractions per kernel class: rooflinekit.stages.expected). The built-in answer knows
    ``published`` (the committed table, from public kernel measurements) and the path of an
    efficiency file such as `rooflinekit calibrate --trace` writes; a plugin adds a named source
    (a vendor's measured database, a team's own calibration) by answering its name.

    :param source: the name or path as given.
    :param hardware: the hardware entry the source will price (`rooflinekit.stages.hardware.HardwareSpec`:
        its name, aliases and peaks; a source may answer per GPU).
    :return: the path of an efficiency file in the layout of ``rooflinekit/stages/efficiency.toml``
        (every fraction with its source), or None if this plugin does not know `source`.
    """


@hookspec(firstresult=True)
def rooflinekit_kernel_times(source: str, settings: dict[str, Any]) -> Any:
    """firstresult: stops at the first non-None answer.

    A database of measured kernels that an efficiency file names in its ``[kernel_times]`` table
    (``source = NAME`` and the settings beside it). Where the database answers a kernel's time at
    its shape, that time prices the kernel in the expected step instead of its class's fractions
    (rooflinekit.stages.kernel_times: GEMMs by M, N and K, attention, an MoE layer's experts,
    all-reduces by message size); where it answers None, the fractions do.

    :param source: the ``source`` the file names.
    :param settings: the table's other keys (the built-in ``aic`` source: ``system``).
    :return: an object with a ``label`` (str) and ``seconds(query)`` (a
        `rooflinekit.stages.kernel_times.KernelQuery` -> measured seconds, or None), or None if
        this plugin does not serve `source`.
    """


@hookspec(firstresult=True)
def rooflinekit_workload_loader(path: str, options: dict[str, Any]) -> ModelSource | None:
    """firstresult: stops at the first non-None answer.

    Turn a path given to `rooflinekit profile` into something that builds a model.

    :param path: the path as given on the command line.
    :param options: dict of ``--option KEY=VALUE`` pairs.
    :return: a `ModelSource` (`rooflinekit.plugin.ModelSource`), or None if this plugin does not load such paths.
    """


@hookspec(firstresult=True)
def rooflinekit_module_model(module: torch.nn.Module, path: str, workload: Workload,
                             deployment: Deployment) -> ModuleModel | None:
    """firstresult: stops at the first non-None answer.

    Replace a module's forward with an analytic model during capture (e.g. MoE routing).

    Data-dependent blocks cannot run on the meta device. A plugin that knows such a block returns
    a `ModuleModel` (`rooflinekit.plugin.ModuleModel`), whose `forward` computes the output shape and emits
    modelled op records with the stated assumption.

    A sweep asks once per module for all its batches and contexts (the workload it passes is the
    first one's): the answer may depend on the workload's options and formats, not on its batch
    or context; the ModuleModel sees each step's own tensors in `forward`.

    :param module: a torch.nn.Module of the model.
    :param path: its dotted path.
    :param workload: the `Workload` (what runs: phase, batch, context, dtype, the model's options).
    :param deployment: the `Deployment` (how it runs: ``tp``, ``ep``, formats, ...): a module model
        of experts emits one GPU's share under ``deployment.ep``/``deployment.tp``.
    :return: a ModuleModel, or None.
    """


@hookspec
def rooflinekit_tp_plan(
    model: torch.nn.Module, workload: Workload, deployment: Deployment, attention: dict[str, AttentionSpec],
    shards: dict[str, AttentionShard],
) -> dict[str, str] | None:
    """every plugin's answer is collected.

    How tensor parallelism splits the model's modules (planned parallelism, `--tp N`).

    Called once per profile with `--tp`/`--ep` (not for real torch.distributed runs, whose model
    is already split). Every plugin may answer; for a module named by several, the first answer
    wins (later-registered plugins are asked first, the built-in `parallel` plugin last).

    :param model: the torch.nn.Module as built (single-GPU shapes).
    :param workload: the `Workload` (what runs).
    :param deployment: the `Deployment`: ``deployment.tp`` and ``deployment.ep`` are the sizes. The
        answer is kept per model, workload shape and (tp, ep) and reused for the other formats of
        that layout (a sweep, a plan), so it must not depend on the other fields.
    :param attention: dict of attention-site module path -> `AttentionSpec` (single-GPU heads),
        as the attention plugins recognised them in the unsplit capture.
    :param shards: dict of the same paths -> `AttentionShard`: how each layer splits N ways, as
        its architecture's plugin answered `rooflinekit_attention_shard` (the projections it keeps
        whole, the output projection's width). Pass it to `structural_tp_plan` to follow it.
    :return: a dict mapping a module path, or a pattern whose ``*`` matches one path component
        (``"layers.*.self_attn.q_proj"``), to a style: ``"colwise"`` (output features split:
        FLOPs, weights and output / N, input whole), ``"rowwise"`` (input features split: FLOPs,
        weights and input / N, output whole, then an all-reduce), ``"vocab"`` (an embedding or
        output head split over the vocabulary: lookups / N then an all-reduce; a head's logits /N
        then an all-gather), or ``"replicate"`` (every GPU runs it whole). transformers' style names
        (``packed_colwise``, ``colwise_gather_output``, ``embedding_rowwise``, ...) are accepted.
        None if this plugin has no plan for the model.
    """


@hookspec
def rooflinekit_advise_levers(workload: Workload, deployment: Deployment, report: Report,
                              source: ModelSource) -> list[LeverProposal] | None:
    """every plugin's answer is collected.

    Propose levers for `rooflinekit advise`: changes of the workload that might speed the step up.
    Each proposal's workload is re-profiled with the model built once, placed on the same hardware
    by the same code as the built-in levers (batch, weight and KV formats, fusion, TP, multi-token
    decode), and ranked with them. The MLA plugin's absorbed form is one.

    :param workload: the `Workload` being advised on (frozen: propose
        `dataclasses.replace(workload, ...)` for a change of what runs).
    :param deployment: its `Deployment` (frozen: propose `dataclasses.replace(deployment, ...)` for
        a change of how it runs: formats, parallel degrees).
    :param report: its profile `rooflinekit.core.report.Report` (the baseline), with `memory`.
    :param source: the `ModelSource` the model is built from (which
        -O options its build_model and make_inputs take).
    :return: a list of `LeverProposal` (`rooflinekit.plugin.LeverProposal`): a name, the changed
        workload and the assumption in one sentence; or `skip="why"` for a lever that does not
        apply here. None: no levers.
    """


@hookspec(firstresult=True)
def rooflinekit_option_transform(name: str, value: Any) -> Any:
    """firstresult: stops at the first non-None answer.

    A model option (`-O NAME=VALUE`) that a plugin states on the captured counts rather than the
    model's code running it: e.g. the MLA plugin's `-O mode=absorbed` on code with only the naive
    form (transformers' DeepSeek code), the capture restated in the absorbed form. A restated
    option is withheld from the loader and from the model's build_model/make_inputs where they do
    not take it (a model file taking the option runs it itself); the transform runs after the
    built-in transforms (formats, the parallel shard) and before an advise lever's, on every
    request whose workload carries the option. It must pass counts through unchanged where there
    is nothing to restate (the model already runs that form).

    :param name: the option's name, as given after -O.
    :param value: its value (parsed: int, float, bool or str).
    :return: a `Transform` (`rooflinekit.plugin.Transform`: `name`, `applies(ctx)`,
        `apply(counted, ctx)`), or None if this plugin does not
        restate that option and value.
    """
