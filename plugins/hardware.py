"""Built-in plugin: the packaged hardware database."""

from rooflinekit.plugin import hookimpl
from rooflinekit_hardware_db import DB_DIR

PROVIDES = ("hardware entries",)


@hookimpl(trylast=True)
def rooflinekit_hardware_dirs():
    return [DB_DIR]
