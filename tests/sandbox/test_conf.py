"""The Hydra config files agree with the code they configure."""
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from sandbox.config import SandboxConfig
from sandbox.reward import REWARDS

CONF = Path(__file__).resolve().parents[2] / "conf"


def load_plain(path: Path) -> dict:
    data = OmegaConf.to_container(OmegaConf.load(path))
    data.pop("defaults", None)
    return data


def test_default_sandbox_yaml_equals_dataclass_defaults_but_for_the_machines_backend():
    from sandbox.backend import visible_backend

    plain = load_plain(CONF / "sandbox" / "default.yaml")
    assert plain["backend"] == "${visible_backend:}"  # the resolver src.entry registers
    resolved = OmegaConf.to_container(OmegaConf.create(plain), resolve=True)
    assert resolved["backend"] == visible_backend()
    assert SandboxConfig.from_dict(resolved) == SandboxConfig(backend=visible_backend())


def test_cpu_sandbox_yaml_only_switches_backend():
    assert load_plain(CONF / "sandbox" / "cpu.yaml") == {"backend": "cpu"}


@pytest.mark.parametrize("path", sorted((CONF / "reward").glob("*.yaml")), ids=lambda p: p.stem)
def test_reward_configs_name_real_functions(path):
    assert load_plain(path)["name"] == path.stem
    assert path.stem in REWARDS


@pytest.mark.parametrize("path", sorted(CONF.rglob("*.yaml")), ids=lambda p: p.name)
def test_every_config_field_has_a_comment_above(path):
    lines = path.read_text().splitlines()
    for i, line in enumerate(lines):
        stripped = line.strip()
        if not stripped or stripped.startswith(("#", "-")) or ":" not in stripped:
            continue
        above = lines[i - 1].strip() if i else ""
        assert above.startswith("#"), f"{path.name}:{i + 1} '{stripped}' has no comment above it"
