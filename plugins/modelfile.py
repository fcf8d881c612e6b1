"""Built-in plugin: load a Python model file that defines build_model() and make_inputs()."""

from rooflinekit.plugin import hookimpl
from rooflinekit.stages.workload import load_model_file

PROVIDES = ("model files",)


@hookimpl(trylast=True)
def rooflinekit_workload_loader(path, options):
    if str(path).endswith(".py"):
        return load_model_file(path)
    return None
