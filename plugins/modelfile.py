"""Built-in plugin: load a Python model file that defines build_model() and make_inputs()."""

import importlib

from rooflinekit.plugin import hookimpl

PROVIDES = ("model files",)
#: Loading a model file needs torch: imported when the hook answers, not when the plugin loads.
WORKLOAD = "rooflinekit.stages.workload"


@hookimpl(trylast=True)
def rooflinekit_workload_loader(path, options):
    if str(path).endswith(".py"):
        return importlib.import_module(WORKLOAD).load_model_file(path)
    return None
