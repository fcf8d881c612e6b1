"""The package version and the JSON report schema version (bumped when the schema changes shape)."""

__version__ = "0.3.0"
SCHEMA_VERSION = "3.0"
#: Older report schemas that `plot` and `compare` still read.
READABLE_SCHEMAS = ("1.0", "2.0", "3.0")
