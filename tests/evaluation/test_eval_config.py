"""eval.py's Hydra config composes into the objects it configures."""
import importlib.util
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from sandbox.backend import visible_backend
from sandbox.config import SandboxConfig

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def eval_entry():
    spec = importlib.util.spec_from_file_location("eval_entry", REPO / "eval.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def compose_eval(*overrides: str):
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return compose(config_name="eval", overrides=list(overrides))


def test_defaults_are_the_sample_benchmark_replayed_on_the_default_sandbox(eval_entry):
    cfg = compose_eval()
    assert (cfg.benchmark.name, cfg.policy.name, cfg.reward.name) == ("sample", "replay", "graduated")
    assert OmegaConf.is_missing(cfg.policy, "solutions")
    assert (REPO / cfg.benchmark.root).is_dir()
    backend = visible_backend()  # the default: this machine's
    assert eval_entry.sandbox_config(cfg) == SandboxConfig(backend=backend)
    assert cfg.output_dir == f"outputs/eval/sample-replay-{backend}"


def test_an_explicit_backend_wins_over_the_machines():
    assert compose_eval("sandbox=cpu").sandbox.backend == "cpu"
    assert compose_eval("sandbox.backend=cuda").output_dir == "outputs/eval/sample-replay-cuda"


def test_kernelbench_needs_a_root():
    cfg = compose_eval("benchmark=kernelbench")
    assert OmegaConf.is_missing(cfg.benchmark, "root")
    assert list(cfg.benchmark.levels) == [1, 2, 3]


def test_per_task_timeouts_and_cpu_backend_reach_the_sandbox(eval_entry):
    cfg = compose_eval("sandbox=cpu", "sandbox.run_timeout_s=7", "sandbox.compile_timeout_s=11",
                       "sandbox.reference_timeout_s=13")
    sandbox = eval_entry.sandbox_config(cfg)
    assert (sandbox.backend, sandbox.run_timeout_s, sandbox.compile_timeout_s, sandbox.reference_timeout_s) == \
           ("cpu", 7, 11, 13)


def test_a_bad_sandbox_value_is_a_usage_error(eval_entry):
    cfg = compose_eval("sandbox.tolerance=loose")
    with pytest.raises(eval_entry.UsageError, match="sandbox config: tolerance must be one of"):
        eval_entry.sandbox_config(cfg)


def test_an_unknown_policy_is_a_usage_error(eval_entry, tmp_path):
    cfg = compose_eval("policy.name=checkpoint", f"policy.solutions={tmp_path}")
    with pytest.raises(eval_entry.UsageError, match="unknown policy 'checkpoint'; use replay, hf or api"):
        eval_entry.solution_paths(cfg, [], tmp_path, sandbox=None)


def test_a_generating_policy_without_its_endpoint_stops_before_any_episode(eval_entry, tmp_path):
    from omegaconf.errors import MissingMandatoryValue

    cfg = compose_eval("policy=api")
    with pytest.raises(MissingMandatoryValue) as missing:  # main() prints "policy.base_url must be set"
        eval_entry.solution_paths(cfg, [], tmp_path, sandbox=None)
    assert missing.value.full_key == "policy.base_url"


def test_evaluation_gets_the_papers_200_turns_and_training_keeps_150():
    from src.agent import AgentConfig

    cfg = compose_eval()
    assert AgentConfig.from_dict(OmegaConf.to_container(cfg.agent)).max_turns == 200
    assert AgentConfig.from_dict(OmegaConf.to_container(OmegaConf.load(REPO / "conf/agent/multi_turn.yaml"))) \
        == AgentConfig() and AgentConfig().max_turns == 150
    assert compose_eval("agent.max_turns=30").agent.max_turns == 30  # the command line still wins


@pytest.mark.parametrize("name", ["hf", "api", "replay"])
def test_policy_name_is_the_one_policy_kind_field(name):
    cfg = compose_eval(f"policy={name}")
    assert cfg.policy.name == name and "kind" not in cfg.policy
    assert "reward" not in compose_eval().agent  # the reward group is the one reward setting
