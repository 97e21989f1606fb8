"""Task synthesis: crawl -> compose -> filter -> decontaminate -> write (``python -m data_gen``).

Builds a CUDA-Agent-Ops-style training set of KernelBench-format tasks; see docs/data_gen.md.
"""
