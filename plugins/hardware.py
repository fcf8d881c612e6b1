"""Built-in plugin: the packaged hardware database, and the efficiency sources every install has."""

from pathlib import Path

from rooflinekit.plugin import hookimpl
from rooflinekit_hardware_db import DB_DIR

PROVIDES = ("hardware entries", "efficiency sources: published, a file")


@hookimpl(trylast=True)
def rooflinekit_hardware_dirs():
    return [DB_DIR]


@hookimpl(trylast=True)
def rooflinekit_efficiency_source(source):
    """`published`: the committed table; a path to an existing file: that file (checked by the caller)."""
    if source == "published":
        from rooflinekit.plugin import PUBLISHED_EFFICIENCY

        return str(PUBLISHED_EFFICIENCY)
    path = Path(source).expanduser()
    return str(path) if path.is_file() else None
