"""Benchmark evaluation (eval.py): KernelBench-layout problems, replayed or generated solutions,
the sandbox pool, the paper's metrics, and the reports and plots.

    kernelbench.py  problems from ROOT/level{L}/{id}_{name}.py
    replay.py       solutions from a benchmark-shaped directory or a JSONL release
    runner.py       judge every (problem, solution) through sandbox.pool, resumably
    metrics.py      pass rate, faster-than rates, geometric-mean speedups, fast_p (pure)
    report.py       results.jsonl, summary.json / summary.md, fast_p.png, speedups.png
"""
