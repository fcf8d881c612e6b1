"""Model transforms: restatements of a counted capture between attribution and placement, each a
`Transform` (rooflinekit.transforms.base) -- formats, the serving view, the parallel shard and its
TP plan, the options and levers plugins restate (one adapter: rooflinekit.transforms.adapter), the
mixed step's merge of its segments (MixedStep) and a pipeline stage's share of a step (PipelineStage)."""
