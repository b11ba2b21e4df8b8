"""Measuring tools: the layer benchmark (bench.layers, `make bench`), whole models against
torch (bench.models, torch's side in bench.peers), LLM decoding token by token
(bench.decode), single products and attention (bench.micro), their records and
docs/PERFORMANCE.md's tables (bench.record, bench.report, `make perf-tables`; peaks and FLOPs
in bench.peaks), `make grade`'s estimate
(bench.estimate), the baselines they compare with (bench.baselines) over the shapes of
bench.shapes, and the tuners (bench.tune, `make tune`; bench.clblast_tune, `make
clblast-tune`) and the device's profiler (bench.profile_device). They use the library and the
course's cases; nothing below imports them."""
