"""The run report: worker errors are not verdicts, and the counts say so."""
from data_gen.filter import FilterResult
from data_gen.filter_worker import RUBRICS
from data_gen.report import RunStats, markdown


def result(cid: str, failed: str | None = None, worker_error: str = "") -> FilterResult:
    verdicts = {r: {"passed": True, "reason": ""} for r in RUBRICS}
    if failed:
        verdicts[failed] = {"passed": False, "reason": worker_error or "output 0 is constant (all 9 elements)"}
        for later in RUBRICS[RUBRICS.index(failed) + 1:]:
            verdicts[later] = {"passed": None, "reason": "not run"}
    # 7 s of rubrics in a 10 s worker, except for worker errors (cut short: 2 s)
    stage_s = {"eager": 2.0} if worker_error else {"eager": 1.0, "compile": 6.0}
    return FilterResult(cid, verdicts, failed is None, worker_error=worker_error, wall_s=10.0, stage_s=stage_s)


def test_worker_errors_are_counted_apart_from_rubric_failures():
    oom = "filter harness error: out of device memory, shared with concurrent candidates: 2.00 GiB"
    stats = RunStats(filter_results=[result("a"), result("b", "nontrivial"), result("c", "eager", oom),
                                     result("d", "compile", "timeout after 300 s")],
                     judged_now={"a", "b", "c", "d"}, filter_wall_s=3600.0)
    stats.composed.update({"torch#2": 5})  # one of them not reached
    f = stats.summary()["filter"]
    assert f["judged"] == 2 and f["accepted"] == 1
    assert f["rubrics"]["eager"] == {"passed": 2, "failed": 0, "not_run": 0}  # the OOM is no eager failure
    assert f["rubrics"]["nontrivial"]["failed"] == 1 and f["rubrics"]["compile"]["failed"] == 0
    assert f["worker_errors"] == {"filter harness error: out of device memory, shared with concurrent candidates: "
                                  "2.00 GiB": 1, "timeout after 300 s": 1}
    assert f["rejection_reasons"] == {"nontrivial": {"output 0 is constant": 1}}
    assert f["candidates_per_hour"] == 4.0 and f["accepted_per_hour"] == 1.0
    assert f["stage_s_median"]["worker_startup"] == 3.0  # 10 s wall - 7 s of rubrics; the errors' 8 s left out
    text = markdown({**stats.summary(), "dataset": ""})
    assert "| left for a rerun (worker error: timeout, crash, device memory) | 2 |" in text
    assert f["not_reached"] == 1 and "| left for a rerun (not reached within the time budget) | 1 |" in text


def test_a_run_that_only_reuses_verdicts_says_so():
    stats = RunStats(filter_results=[result("a")], reused=1, filter_wall_s=0.5)
    assert "every verdict was reused" in markdown(stats.summary())


def test_rejection_reasons_keep_their_numbers_fixed_ones_as_is_varying_ones_as_a_range():
    reasons = ["eager runtime 0.41 ms outside [0.5, 100] ms", "eager runtime 0.0123 ms outside [0.5, 100] ms",
               "eager runtime 0.2 ms outside [0.5, 100] ms", "eager runtime 0.3 ms outside [1, 100] ms"]
    rejected = []
    for i, reason in enumerate(reasons):
        rejected.append(result(str(i), "runtime"))
        rejected[-1].verdicts["runtime"]["reason"] = reason
    stats = RunStats(filter_results=rejected)
    assert stats.summary()["filter"]["rejection_reasons"] == {"runtime": {
        "eager runtime 0.0123 to 0.41 ms outside [0.5 to 1, 100] ms": 4}}
    text = markdown(stats.summary())
    assert "| runtime | eager runtime 0.0123 to 0.41 ms outside [0.5 to 1, 100] ms | 4 |" in text
