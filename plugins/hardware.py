"""Built-in plugin: the packaged hardware database."""

from rooflinekit.core.hookspecs import hookimpl
from rooflinekit_hardware_db import DB_DIR


@hookimpl(trylast=True)
def rooflinekit_hardware_dirs():
    return [DB_DIR]
