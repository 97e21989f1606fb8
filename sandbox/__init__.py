"""The kernel sandbox: judge a kernel solution against a KernelBench-format task.

    from sandbox import SandboxConfig, evaluate, reward_fn
    m = evaluate("task.py", "solution.py", SandboxConfig(backend="cpu"))
    r = reward_fn("graduated")(m)
"""
from .config import SandboxConfig, TimingConfig, TOLERANCE_PRESETS
from .errors import TaskError
from .judge import evaluate
from .measurement import ErrorKind, Measurement, TimingStats
from .reward import REWARDS, reward_fn

__all__ = ["SandboxConfig", "TimingConfig", "TOLERANCE_PRESETS", "TaskError", "evaluate",
           "ErrorKind", "Measurement", "TimingStats", "REWARDS", "reward_fn"]
