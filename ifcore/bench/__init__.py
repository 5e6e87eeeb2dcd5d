"""Benchmarks: IFEval, IFBench and ScopeIF-Test evaluation, and speed benchmarks."""
