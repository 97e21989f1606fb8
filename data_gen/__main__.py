r"""Synthesize a CUDA-Agent-Ops-style training set: ``python -m data_gen [overrides]``.

Stages: crawl torch/transformers operators -> compose candidate tasks (offline composer by
default; an LLM with composer=llm) -> filter each candidate in its own worker process (eager and
torch.compile run, deterministic, non-trivial, eager runtime window) -> decontaminate against a
benchmark directory (AST similarity <= 0.9) -> dedupe -> tasks.parquet + report (docs/data_gen.md).

Launch lines:
  CPU (small tasks, CPU runtime window):
    python -m data_gen num_candidates=64 filter.workers=2
  1 GPU (paper's 1-100 ms window on the GPU):
    python -m data_gen profile=gpu num_candidates=1200 filter.workers=12 compose_workers=8 \
        decontaminate.benchmark_dir=/path/to/KernelBench/KernelBench output_dir=outputs/data_gen_h200
  N GPUs (workers spread over the listed GPUs; one timing lock per GPU):
    python -m data_gen profile=gpu filter.devices=[0,1,2,3] filter.workers=32 num_candidates=4000
  LLM composer (any OpenAI-compatible endpoint; key read from the env variable, never logged):
    OPENAI_API_KEY=... python -m data_gen composer=llm composer.llm.base_url=http://host:8000/v1 \
        composer.llm.model=Qwen/Qwen3-32B
  Resume / chunk a long run (verdicts already in output_dir/filter_results.jsonl are reused):
    python -m data_gen profile=gpu num_candidates=1200 filter.time_budget_s=540   # repeat until done
"""
from __future__ import annotations

import sys
from pathlib import Path

CONF_DIR = str(Path(__file__).resolve().parent.parent / "conf" / "data_gen")


def main() -> None:
    import hydra
    from omegaconf import DictConfig

    from src.entry import register_resolvers

    register_resolvers()  # --help from this docstring

    @hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="pipeline")
    def entry(cfg: DictConfig) -> None:
        from src.llm import LLMError

        from .pipeline import run

        try:
            summary = run(cfg)
        except (LLMError, ValueError, FileNotFoundError) as exc:
            print(f"data_gen: error: {exc}", file=sys.stderr)
            sys.exit(2)
        print(f"accepted {summary['filter']['accepted']} of {summary['filter']['judged']} judged; "
              f"{summary['final']['rows']} tasks in {summary['dataset']}")

    entry()


if __name__ == "__main__":
    main()
