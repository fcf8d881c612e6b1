"""Built-in plugin: load a Python model file that defines build_model() and make_inputs()."""

from rooflinekit.plugin import hookimpl

PROVIDES = ("model files",)


@hookimpl(trylast=True)
def rooflinekit_workload_loader(path, options):
    if str(path).endswith(".py"):
        # loading a model file needs torch: imported when the hook answers, not when the plugin loads
        from rooflinekit.plugin import load_model_file

        return load_model_file(path)
    return None
