"""Hook specifications: the plugin author's reference.

Implement any of these in a module or object decorated with `rooflinekit.hookimpl`, and expose it
through the `rooflinekit` entry-point group:

    [project.entry-points.rooflinekit]
    my_plugin = "my_package.my_module"

Hooks marked firstresult stop at the first non-None answer (later-registered plugins are asked
first; use `@hookimpl(tryfirst=True)` to go before the built-ins). A hook that raises, or returns
the wrong type, is named in one warning and skipped; the run goes on.
"""

from __future__ import annotations

import pluggy

hookspec = pluggy.HookspecMarker("rooflinekit")
hookimpl = pluggy.HookimplMarker("rooflinekit")


@hookspec(firstresult=True)
def rooflinekit_attention_spec(module, path, call):
    """Recognise an attention layer from its module.

    :param module: the torch.nn.Module whose forward ran the attention (or one of its two nearest
        ancestors, asked in turn from innermost).
    :param path: its dotted path in the model, e.g. ``layers.3.self_attn``.
    :param call: the `AttentionCall` seen at run time in that module (shapes of q, k, v and the
        distinct K/V heads), or None when the shapes do not show heads. Use it to fill what the
        module does not declare; an implementation may leave the argument out.
    :return: an `AttentionSpec`, or None if this plugin does not know the module.
    """


@hookspec(firstresult=True)
def rooflinekit_attention_spec_from_call(call):
    """Recognise an attention layer from an intercepted call, when no module answered.

    :param call: an `AttentionCall` (shapes of q, k, v; enable_gqa; heads after undoing a repeat).
    :return: an `AttentionSpec`, or None.
    """


@hookspec(firstresult=True)
def rooflinekit_attention_cost(spec, workload):
    """Architecture-level cost of one attention layer for one step.

    :param spec: the `AttentionSpec` a recognising hook returned.
    :param workload: an `AttentionWorkload` (batch, q_len, context, phase, itemsizes).
    :return: an `AttentionCost` (model FLOPs, minimum KV bytes, minimum bytes, cache bytes per
        token), or None if this plugin does not cost this spec's `arch`.
    """


@hookspec
def rooflinekit_op_formulas():
    """FLOP formulas for ops torch's registry lacks or gets wrong.

    :return: a dict mapping an op name (``"aten._grouped_mm"``) or OpOverloadPacket to a function
        ``f(*args, out=None, **kwargs) -> flops`` called with the op's real arguments.
    """


@hookspec
def rooflinekit_hardware_dirs():
    """Folders (or single .toml files) of hardware entries to add to the database.

    :return: a list of `pathlib.Path`. Later folders override earlier entries of the same name.
    """


@hookspec(firstresult=True)
def rooflinekit_workload_loader(path, options):
    """Turn a path given to `rooflinekit profile` into something that builds a model.

    :param path: the path as given on the command line.
    :param options: dict of ``--option KEY=VALUE`` pairs.
    :return: a `rooflinekit.stages.workload.ModelSource`, or None if this plugin does not load such paths.
    """


@hookspec(firstresult=True)
def rooflinekit_module_model(module, path, workload):
    """Replace a module's forward with an analytic model during capture (e.g. MoE routing).

    Data-dependent blocks cannot run on the meta device. A plugin that knows such a block returns
    a `rooflinekit.stages.modelled.ModuleModel`, whose `forward` computes the output shape and emits
    modelled op records with the stated assumption.

    :param module: a torch.nn.Module of the model.
    :param path: its dotted path.
    :param workload: the `rooflinekit.stages.workload.Workload`.
    :return: a ModuleModel, or None.
    """


@hookspec
def rooflinekit_tp_plan(model, workload, attention):
    """How tensor parallelism splits the model's modules (planned parallelism, `--tp N`).

    Called once per profile with `--tp`/`--ep` (not for real torch.distributed runs, whose model
    is already split). Every plugin may answer; for a module named by several, the first answer
    wins (later-registered plugins are asked first, the built-in `parallel` plugin last).

    :param model: the torch.nn.Module as built (single-GPU shapes).
    :param workload: the `rooflinekit.stages.workload.Workload` (options ``_tp``/``_ep`` hold the sizes).
    :param attention: dict of attention-site module path -> `AttentionSpec` (single-GPU heads),
        as the attention plugins recognised them in the unsplit capture.
    :return: a dict mapping a module path, or a pattern whose ``*`` matches one path component
        (``"layers.*.self_attn.q_proj"``), to a style: ``"colwise"`` (output features split:
        FLOPs, weights and output / N, input whole), ``"rowwise"`` (input features split: FLOPs,
        weights and input / N, output whole, then an all-reduce), ``"vocab"`` (an embedding or
        output head split over the vocabulary: lookups / N then an all-reduce; a head's logits /N
        then an all-gather), or ``"replicate"`` (every GPU runs it whole). transformers' style names
        (``packed_colwise``, ``colwise_gather_output``, ``embedding_rowwise``, ...) are accepted.
        None if this plugin has no plan for the model.
    """
