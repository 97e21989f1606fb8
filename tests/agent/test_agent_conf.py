"""conf/agent/*.yaml agree with AgentConfig."""
from pathlib import Path

from omegaconf import OmegaConf

from src.agent import AgentConfig

CONF = Path(__file__).resolve().parents[2] / "conf" / "agent"


def load(name: str) -> dict:
    data = OmegaConf.to_container(OmegaConf.load(CONF / f"{name}.yaml"))
    parents = data.pop("defaults", [])
    merged: dict = {}
    for parent in parents:
        if parent != "_self_":
            merged.update(load(parent))
    merged.update(data)
    return merged


def test_multi_turn_yaml_is_the_dataclass_default():
    assert AgentConfig.from_dict(load("multi_turn")) == AgentConfig()


def test_single_turn_yaml_overrides_only_what_differs():
    cfg = AgentConfig.from_dict(load("single_turn"))
    assert (cfg.mode, cfg.max_turns, cfg.max_context_tokens, cfg.tools) == ("single_turn", 1, 32768, ("write_file",))
    assert cfg.max_new_tokens_per_turn == AgentConfig().max_new_tokens_per_turn
