"""Model transforms: restatements of a counted capture between attribution and placement, each a
`Transform` (rooflinekit.transforms.base) -- formats, the serving view, the parallel shard and its
TP plan, the options and levers plugins restate (one adapter: rooflinekit.transforms.adapter) and
the mixed step's merge of its segments."""
