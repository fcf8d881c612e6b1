"""Reports for people: text, Markdown, CSV, JSON, HTML, charts and DataFrames.

Importing any module of this package registers every report kind's views (rooflinekit.outputs.views).
"""

from rooflinekit.outputs import views  # noqa: F401  (registers the views of every report kind)
