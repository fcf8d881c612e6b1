"""Plugin code the core runs after a hook answered: advise levers (their requests, names and
transforms), mixer-site generators and the sites they name, FLOP formula tables, TP plans,
hardware folders and option transforms. Each is a warning case (tests/bad_inputs/case.py): the
plugin at fault named in one warning, its answer (or that lever) dropped, the report out.
"""

from __future__ import annotations

from bad_inputs.case import GQA, TINY, Case
from bad_inputs.hooks import IMPORTS

CAT = "hook-calls"
ADVISE = ["advise", GQA, *TINY]
PROFILE = ["profile", GQA, *TINY]


def _plugin(name: str, args: list[str], code: str, needles: list[str]) -> Case:
    return Case(name, CAT, args, ["plugin 'rkcase'", *needles], plugin=IMPORTS + code)


def _lever(name: str, proposals: str, needles: list[str], helpers: str = "") -> Case:
    code = (f"{helpers}\n@hookimpl\ndef rooflinekit_advise_levers(workload, deployment, report, source):\n"
            f"    return [{proposals}]\n")
    return _plugin(f"lever-{name}", ADVISE, code, needles)


RAISING = "def boom(capture, rows, workload, host):\n    raise RuntimeError('lost the capture')\n"
GARBAGE = "def garbage(capture, rows, workload, host):\n    return None, None, None\n"
TWO = "def two(capture, rows, workload, host):\n    return capture\n"


BROKEN_TRANSFORM = """
class Half:
    name = "half"

    def applies(self, ctx):
        raise ValueError("cannot tell")

    def apply(self, counted, ctx):
        return counted


class Garbage:
    name = "garbage"

    def applies(self, ctx):
        return True

    def apply(self, counted, ctx):
        return {"flops": 1}
"""

LEVERS = [
    _lever("phase-train", "LeverProposal('train', workload=replace(workload, phase='train'))",
           ["lever 'train'", "unknown phase 'train'"]),
    _lever("batch-over-limit", "LeverProposal('huge batch', workload=replace(workload, batch=1 << 30))",
           ["lever 'huge batch'", "batch must be at most"]),
    _lever("batch-zero", "LeverProposal('no batch', workload=replace(workload, batch=0))",
           ["batch must be at least 1"]),
    _lever("batch-string", "LeverProposal('str batch', workload=replace(workload, batch='4'))",
           ["batch must be a whole number", "'4'"]),
    _lever("batch-float", "LeverProposal('float batch', workload=replace(workload, batch=2.5))",
           ["batch must be a whole number"]),
    _lever("context-negative", "LeverProposal('neg context', workload=replace(workload, context=-1))",
           ["context must be at least 1"]),
    _lever("context-over-limit", "LeverProposal('long', workload=replace(workload, context=1 << 30))",
           ["context must be at most"]),
    _lever("context-nan", "LeverProposal('nan context', workload=replace(workload, context=NAN))",
           ["context must be a whole number"]),
    _lever("dtype-unknown", "LeverProposal('fp4 acts', workload=replace(workload, dtype='fp4'))",
           ["unknown dtype 'fp4'"]),
    _lever("q-len-zero", "LeverProposal('q0', workload=replace(workload, decode_q_len=0))", ["--q-len must be"]),
    _lever("q-len-over-context", "LeverProposal('q big', workload=replace(workload, decode_q_len=64, context=8))",
           ["exceeds the context"]),
    _lever("options-garbage", "LeverProposal('opts', workload=replace(workload, options='mode=fast'))",
           ["options must be (name, value) pairs"]),
    _lever("kv-dtype-unknown", "LeverProposal('kv4', deployment=replace(deployment, kv_dtype='fp4'))",
           ["unknown --kv-dtype 'fp4'"]),
    _lever("tp-zero", "LeverProposal('tp0', deployment=replace(deployment, tp=0))", ["--tp must be"]),
    _lever("tp-string", "LeverProposal('tp str', deployment=replace(deployment, tp='2'))", ["--tp must be"]),
    _lever("fraction-nan", "LeverProposal('mem', deployment=replace(deployment, memory_fraction=NAN))",
           ["--memory-fraction"]),
    _lever("workload-dict", "LeverProposal('dict', workload={'batch': 2})", ["expected a Workload"]),
    _lever("deployment-string", "LeverProposal('dep', deployment='fp8')", ["expected a Deployment"]),
    _lever("not-a-proposal", "{'name': 'x'}", ["expected a LeverProposal, got dict"]),
    _lever("a-string", "'batch 8'", ["expected a LeverProposal, got str"]),
    _lever("name-empty", "LeverProposal('', workload=workload)", ["name must be a non-empty string"]),
    _lever("name-none", "LeverProposal(None, workload=workload)", ["name must be a non-empty string"]),
    _lever("name-number", "LeverProposal(5, workload=workload)", ["name must be a non-empty string"]),
    _lever("assumption-number", "LeverProposal('a', assumption=5, workload=replace(workload, batch=2))",
           ["assumption and skip must be strings"]),
    _lever("skip-number", "LeverProposal('s', skip=5)", ["assumption and skip must be strings"]),
    _lever("rebuild-string", "LeverProposal('r', workload=replace(workload, batch=2), rebuild='yes')",
           ["rebuild must be True or False"]),
    _lever("same-name-twice", "LeverProposal('twice', workload=replace(workload, batch=2)), "
                              "LeverProposal('twice', workload=replace(workload, batch=4))",
           ["lever 'twice'", "already listed"]),
    _lever("builtin-name", "LeverProposal('fused kernels', workload=replace(workload, batch=2))",
           ["lever 'fused kernels'", "already listed"]),
    _lever("transform-not-callable", "LeverProposal('t5', transform=5)", ["a transform must be", "got int"]),
    _lever("transform-string", "LeverProposal('tstr', transform='absorb')", ["a transform must be", "got str"]),
    _lever("transform-class", "LeverProposal('tcls', transform=int)", ["a transform must be"]),
    _lever("transform-no-apply", "LeverProposal('tbroken', transform=Broken())", ["a transform must be"],
           helpers="class Broken:\n    name = 'broken'\n"),
    _lever("transform-raises", "LeverProposal('boom', transform=boom)",
           ["lever 'boom'", "RuntimeError: lost the capture"], helpers=RAISING),
    _lever("transform-returns-garbage", "LeverProposal('garbage', transform=garbage)",
           ["in its lever 'garbage'", "failed"], helpers=GARBAGE),
    _lever("transform-returns-one-value", "LeverProposal('two', transform=two)",
           ["lever 'two'", "failed"], helpers=TWO),
    _lever("transform-applies-raises", "LeverProposal('half', transform=Half())",
           ["lever 'half'", "ValueError: cannot tell"], helpers=BROKEN_TRANSFORM),
    _lever("transform-apply-garbage", "LeverProposal('gar', transform=Garbage())",
           ["lever 'gar'", "returned dict"], helpers=BROKEN_TRANSFORM),
    _plugin("levers-a-dict", ADVISE, "@hookimpl\ndef rooflinekit_advise_levers(workload, deployment, report, source):\n"
            "    return {'batch 8': replace(workload, batch=8)}\n", ["returned dict", "expected list"]),
    _plugin("levers-raise", ADVISE, "@hookimpl\ndef rooflinekit_advise_levers(workload, deployment, report, source):\n"
            "    raise RuntimeError('no levers today')\n", ["failed in rooflinekit_advise_levers", "no levers today"]),
]


def _sites(name: str, body: str, needles: list[str], args: list[str] | None = None) -> Case:
    code = "@hookimpl\ndef rooflinekit_mixer_sites(model):\n" + "".join(f"    {x}\n" for x in body.splitlines())
    return _plugin(f"mixer-sites-{name}", args or PROFILE, code, needles)


MIXERS = [
    _sites("generator-raises", "yield 'layers.0'\nraise RuntimeError('lost count')",
           ["failed in rooflinekit_mixer_sites", "RuntimeError: lost count"]),
    _sites("every-module", "return [path for path, _ in model.named_modules()]",
           ["no layer of their own", "(root)"]),
    _sites("projections", "return ['layers.0.self_attn.q_proj', 'layers.0.self_attn.k_proj']",
           ["2 module(s)", "layers.0.self_attn.k_proj"]),
    _sites("the-block", "return ['layers.0']", ["no layer of their own", "layers.0"]),
    _sites("unknown-path", "return ['layers.9.mixer']", ["no layer of their own", "layers.9.mixer"]),
    _sites("a-leaf-not-a-mixer", "return ['lm_head']", ["module 'lm_head'", "recognised by no plugin"]),
    _sites("mlp-not-a-mixer", "return ['layers.0.mlp']", ["module 'layers.0.mlp'"]),
    _sites("numbers", "return [1, 2]", ["every site must be a module path"]),
    _sites("none-inside", "return ['lm_head', None]", ["every site must be a module path"]),
    _sites("generator-numbers", "yield from (1, 2)", ["every site must be a module path"]),
    _sites("a-dict", "return {'layers.0': 'mamba'}", ["expected str/list of module paths"]),
    _sites("a-number", "return 42", ["expected str/list of module paths"]),
    _sites("raises", "raise KeyError('layers')", ["failed in rooflinekit_mixer_sites", "KeyError"]),
]


def _hook(name: str, hook: str, params: str, body: str, needles: list[str], args: list[str] | None = None) -> Case:
    code = f"@hookimpl\ndef {hook}({params}):\n" + "".join(f"    {x}\n" for x in body.splitlines())
    return _plugin(name, args or PROFILE, code, [hook, *needles])


TP = [*PROFILE, "--tp", "2"]
#: An efficiency file that names a database of measured kernels (rooflinekit.stages.kernel_times).
MEASURED = ("version = 1\nsmall_gemm_max_rows = 128\n"
            + "".join(f"[classes.{c}]\ncompute = 0.5\nbandwidth = 0.5\n" for c in (
                "gemm_large", "gemm_small", "attention_decode", "attention_prefill", "elementwise"))
            + '[launch]\ndecode_s = 1e-6\nprefill_s = 2e-5\n[kernel_times]\nsource = "rkcase-db"\n')
OTHERS = [
    _hook("formulas-not-callable", "rooflinekit_op_formulas", "", "return {'aten.mm': 5}",
          ["the formula for 'aten.mm' must be callable"]),
    _hook("formulas-empty-name", "rooflinekit_op_formulas", "", "return {'': len}", ["an op name must not be empty"]),
    _hook("formulas-a-list", "rooflinekit_op_formulas", "", "return ['aten.mm']", ["expected dict"]),
    _hook("formulas-raise", "rooflinekit_op_formulas", "", "raise ImportError('no table')", ["ImportError"]),
    _hook("tp-plan-a-string", "rooflinekit_tp_plan", "model, workload, deployment, attention, shards",
          "return 'colwise'", ["expected dict"], TP),
    _hook("tp-plan-a-list", "rooflinekit_tp_plan", "model, workload, deployment, attention, shards",
          "return [('layers.0.mlp', 'colwise')]", ["expected dict"], TP),
    _hook("tp-plan-raises", "rooflinekit_tp_plan", "model, workload, deployment, attention, shards",
          "raise RuntimeError('no plan')", ["RuntimeError: no plan"], TP),
    _hook("hardware-dirs-a-string", "rooflinekit_hardware_dirs", "", "return '/tmp/hw'", ["expected list/tuple"]),
    _hook("hardware-dirs-a-number", "rooflinekit_hardware_dirs", "", "return 5", ["expected list/tuple"]),
    _hook("hardware-dirs-raise", "rooflinekit_hardware_dirs", "", "raise OSError('no folder')", ["OSError"]),
    _hook("option-transform-a-number", "rooflinekit_option_transform", "name, value",
          "return 5 if name == 'layers' else None", ["expected a Transform"]),
    _hook("option-transform-a-string", "rooflinekit_option_transform", "name, value",
          "return 'absorb' if name == 'layers' else None", ["expected a Transform"]),
    _hook("option-transform-an-object", "rooflinekit_option_transform", "name, value",
          "return object() if name == 'layers' else None", ["expected a Transform"]),
    _hook("option-transform-raises", "rooflinekit_option_transform", "name, value",
          "raise RuntimeError('cannot restate')", ["RuntimeError: cannot restate"]),
    _hook("efficiency-source-a-number", "rooflinekit_efficiency_source", "source, hardware", "return 5",
          ["expected str"], [*PROFILE, "--efficiency", "published"]),
    _hook("efficiency-source-empty", "rooflinekit_efficiency_source", "source, hardware", "return '  '",
          ["an empty path"], [*PROFILE, "--efficiency", "published"]),
    _hook("workload-loader-a-string", "rooflinekit_workload_loader", "path, options", "return 'a model'",
          ["expected ModelSource"]),
    # a database answer that is not one is named and dropped; the file's source is then served by no
    # plugin: one error line, after the warning
    Case("kernel-times-a-number", CAT, [*PROFILE, "--efficiency", "{dir}/measured.toml"],
         ["[kernel_times] names 'rkcase-db'", "no installed plugin serves"],
         plugin=IMPORTS + "@hookimpl\ndef rooflinekit_kernel_times(source, settings):\n    return 5\n",
         files={"measured.toml": MEASURED}, exit_code=2),
]

RESTATE = """
class Restate:
    name = "restate"

    def applies(self, ctx):
        return True

    def apply(self, counted, ctx):
        raise RuntimeError("restated nothing")


@hookimpl
def rooflinekit_option_transform(name, value):
    return Restate() if name == "layers" else None
"""
FAILING_MODEL = """
from rooflinekit.plugin import ModuleModel


class Broken(ModuleModel):
    assumption = "an MLP costs nothing"

    def forward(self, module, path, args, kwargs):
        raise IndexError("expert 9 of 8")


@hookimpl
def rooflinekit_module_model(module, path, workload, deployment):
    return Broken() if path.endswith(".mlp") else None
"""
#: Plugin code that fails where the run cannot go on without it: one error line naming the plugin.
STOPS = [
    Case("option-transform-apply-raises", CAT, PROFILE, ["plugin 'rkcase'", "-O layers=1", "restated nothing"],
         plugin=IMPORTS + RESTATE, exit_code=2),
    Case("module-model-forward-raises", CAT, PROFILE, ["Broken (plugin 'rkcase')", "layers.0.mlp", "expert 9 of 8"],
         plugin=IMPORTS + FAILING_MODEL, exit_code=2),
]

CASES = [*LEVERS, *MIXERS, *OTHERS, *STOPS]
