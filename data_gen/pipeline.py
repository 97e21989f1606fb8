"""The pipeline: crawl -> compose -> filter -> decontaminate -> dedupe -> write, and the report.

Everything a run produces lands in ``output_dir``: registry.json, candidates.jsonl,
filter_results.jsonl (append-only; a rerun with the same config reuses verdicts of candidates
already judged, so a long run can be done in chunks), llm_responses.jsonl (LLM composer),
tasks.parquet, report.json / report.md / runtime_hist.png, and work/<candidate>/ with each
worker's task file, job and log.
"""
from __future__ import annotations

import hashlib
import json
import logging
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterable

from tqdm import tqdm

from .compose import Candidate, OfflineComposer, Sizing
from .crawl import Registry, crawl
from .dataset import dedupe, write_dataset
from .decontaminate import decontaminate_rows
from .filter import FilterConfig, FilterResult, filter_candidates
from .report import RunStats, write_report

log = logging.getLogger("data_gen")


def plain(node: Any) -> Any:
    """An OmegaConf node as plain Python containers (plain values pass through)."""
    try:
        from omegaconf import OmegaConf

        if OmegaConf.is_config(node):
            return OmegaConf.to_container(node, resolve=True)
    except ImportError:
        pass
    return node


def build_composer(cfg: dict[str, Any], registry: Registry, out_dir: Path):
    profile, mix = cfg["profile"], cfg["mix"]
    offline = OfflineComposer(registry, Sizing.from_dict(profile["sizing"]), seed=cfg["seed"],
                              op_count_weights=tuple(mix["op_count_weights"]),
                              transformers_weight=mix["transformers_weight"], anchor_first=mix["anchor_first"])
    composer_cfg = cfg["composer"]
    if composer_cfg["name"] == "offline":
        return offline
    if composer_cfg["name"] != "llm":
        raise ValueError(f"unknown composer {composer_cfg['name']!r} (offline or llm)")
    from src.llm import build_chat_model

    from .llm_compose import LLMComposer

    return LLMComposer(build_chat_model(composer_cfg["llm"]), offline, out_dir / "llm_responses.jsonl",
                       device=profile["device_label"], max_attempts=composer_cfg["max_attempts"],
                       sampling=composer_cfg.get("sampling") or {})


def compose_all(composer, indices: list[int], workers: int, progress: bool) -> list[Candidate]:
    """Compose in parallel: processes for the offline composer (CPU-bound), threads for the LLM
    (waiting on the network). Results keep index order."""
    bar = tqdm(total=len(indices), desc="compose", unit="task", disable=not progress)
    if workers <= 1:
        out = []
        for i in indices:
            out.append(composer.compose(i))
            bar.update()
        bar.close()
        return out
    if isinstance(composer, OfflineComposer):
        pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))
    else:
        pool = ThreadPoolExecutor(workers)
    with pool:
        out = []
        for cand in pool.map(composer.compose, indices, chunksize=1):
            out.append(cand)
            bar.update()
    bar.close()
    return out


# Filter settings that place or bound the work (how many at once, on which GPUs, how long one
# may take) but do not judge: changing them between chunks of a long run keeps the verdicts.
EXECUTION_SETTINGS = {"workers", "devices", "timeout_s", "oom_retry_workers"}


def filter_key(code: str, filter_cfg: FilterConfig) -> str:
    """Verdicts are reusable when both the program and the filter settings are unchanged."""
    judged_by = {k: v for k, v in filter_cfg.__dict__.items() if k not in EXECUTION_SETTINGS}
    settings = json.dumps(judged_by, sort_keys=True, default=str)
    return hashlib.sha256((settings + "\0" + code).encode()).hexdigest()


def load_previous(path: Path) -> dict[str, dict]:
    previous = {}
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                entry = json.loads(line)
                if entry["result"].get("worker_error"):
                    continue  # a timeout or crash can come from the machine's load: judge it again
                previous[entry["key"]] = entry["result"]
            except (ValueError, KeyError):
                continue  # a line cut short by a kill
    return previous


def run_filter(cands: list[Candidate], fcfg: FilterConfig, out_dir: Path, resume: bool, progress: bool,
               time_budget_s: float, stats: RunStats) -> list[FilterResult]:
    log_path = out_dir / "filter_results.jsonl"
    previous = load_previous(log_path) if resume else {}
    keys = {c.id: filter_key(c.code, fcfg) for c in cands}
    results, todo = [], []
    for cand in cands:
        if keys[cand.id] in previous:
            results.append(FilterResult(**{**previous[keys[cand.id]], "id": cand.id}))
        else:
            todo.append(cand)
    stats.reused = len(results)
    bar = tqdm(total=len(cands), initial=len(results), desc="filter", unit="task", disable=not progress)
    start = time.monotonic()
    deadline = start + time_budget_s if time_budget_s > 0 else None
    with open(log_path, "a") as fh:
        for res in filter_candidates(todo, fcfg, out_dir / "work", deadline=deadline):
            results.append(res)
            stats.judged_now.add(res.id)
            fh.write(json.dumps({"key": keys[res.id], "result": res.to_dict()}) + "\n")
            fh.flush()
            bar.update()
            bar.set_postfix(accepted=sum(r.accepted for r in results))
    bar.close()
    stats.filter_wall_s = time.monotonic() - start
    return results


def decontaminate_stage(rows: list[dict], dcfg: dict[str, Any], stats: RunStats) -> list[dict]:
    bench_dir = dcfg.get("benchmark_dir")
    if not bench_dir:
        stats.decontam = {"checked": 0, "dropped": 0, "note": "decontamination SKIPPED: no benchmark_dir given "
                          "(set decontaminate.benchmark_dir or KERNELBENCH_DIR to a KernelBench checkout)"}
        log.warning(stats.decontam["note"])  # on the console too, not only in report.md
        return rows
    kept, _, stats.decontam = decontaminate_rows(rows, bench_dir, dcfg["threshold"], dcfg.get("pattern", "*.py"),
                                                 dcfg.get("progress", True))
    return kept


def dataset_row(cand: Candidate, res: FilterResult) -> dict[str, Any]:
    return {"code": cand.code, "ops": cand.ops, "data_source": cand.data_source, "id": cand.id,
            "composer": cand.composer, "seed": cand.seed, "index": cand.index, "target_ms": cand.target_ms,
            "estimated_ms": cand.estimated_ms, "eager_ms": res.eager_ms, "compile_ms": res.compile_ms,
            "device": res.device, "verdicts": res.verdicts}


def run(cfg: Any) -> dict[str, Any]:
    """Run every stage for a config (a Hydra DictConfig or a plain dict); returns the report."""
    cfg = plain(cfg)
    out_dir = Path(cfg["output_dir"]).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    progress, stats = cfg.get("progress", True), RunStats()

    registry = crawl(cfg["crawl"]["transformers_families"], cfg["crawl"]["transformers"])
    registry.write(out_dir / "registry.json")
    stats.crawl = registry.summary()
    log.info("crawl: %s", json.dumps({k: {x: y for x, y in v.items() if x != "skip_reasons"}
                                      for k, v in stats.crawl.items() if k != "notes"}))
    for note in stats.crawl.get("notes", []):
        log.warning("crawl: %s", note)

    composer = build_composer(cfg, registry, out_dir)
    indices = list(range(cfg["start_index"], cfg["start_index"] + cfg["num_candidates"]))
    cands = compose_all(composer, indices, cfg["compose_workers"], progress)
    write_candidates(cands, out_dir / "candidates.jsonl")
    good = [c for c in cands if not c.error]
    for c in cands:
        (stats.compose_errors if c.error else stats.composed)[c.error[:100] if c.error else c.data_source] += 1
    stats.data_source_of = {c.id: c.data_source for c in good}

    fcfg = FilterConfig.from_dict(filter_settings(cfg))
    results = run_filter(good, fcfg, out_dir, cfg["resume"], progress, cfg["filter"]["time_budget_s"], stats)
    stats.filter_results = results
    by_id = {c.id: c for c in good}
    accepted = sorted((dataset_row(by_id[r.id], r) for r in results if r.accepted), key=lambda row: row["index"])

    rows = decontaminate_stage(accepted, {**cfg["decontaminate"], "progress": progress}, stats)
    rows, stats.dedupe_dropped = dedupe(rows)
    path = write_dataset(rows, cfg["dataset_path"])
    stats.final.update(row["data_source"] for row in rows)
    summary = write_report(stats, out_dir, fcfg.window_ms)
    summary["dataset"] = str(path)
    log.info("wrote %d tasks to %s; report in %s", len(rows), path, out_dir / "report.md")
    return summary


def filter_settings(cfg: dict[str, Any]) -> dict[str, Any]:
    """Filter config: the filter node minus pipeline-only keys, plus the profile's device values."""
    settings = {k: v for k, v in cfg["filter"].items() if k != "time_budget_s"}
    profile = cfg["profile"]
    settings.update(device=profile["device"], window_ms=profile["window_ms"], timing=profile["timing"])
    return settings


def write_candidates(cands: Iterable[Candidate], path: Path) -> None:
    with open(path, "w") as fh:
        for c in cands:
            fh.write(json.dumps(c.__dict__) + "\n")
