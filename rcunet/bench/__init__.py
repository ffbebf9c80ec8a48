"""Benchmarks: codec and table microbenchmarks, neper-compatible workloads, the seed lab."""
