"""The agent environment: an episode workspace, tools over it and the sandbox pool, the ReAct
loop with limits, policies (HF causal LM, OpenAI-compatible API, scripted) and the trajectory
record that training reads, and the rule that picks rows for rejection fine-tuning. See
docs/agent.md.

    from src.agent import AgentConfig, ScriptedPolicy, run_episode
    with make_pool(sandbox_cfg) as pool:
        traj = asyncio.run(run_episode(task_path, policy, pool, AgentConfig(), backend="cpu",
                                     reward="graduated"))
"""
from .episode import AgentConfig, Episode, run_episode, run_episodes
from .filters import FilterRules, exclusion_reasons, filter_rows
from .policies import APIPolicy, Generation, HFPolicy, PolicyError, ScriptedPolicy, build_policy
from .sampling import SamplingParams
from .toolcall import ToolCall, parse_tool_calls
from .trajectory import (TemplateDrift, Trajectory, TrajectoryWriter, read_trajectories, render_transcript,
                         resume_trajectories, trajectory_lines)
from .workspace import Workspace, WorkspaceError

__all__ = ["AgentConfig", "Episode", "run_episode", "run_episodes", "FilterRules", "exclusion_reasons",
           "filter_rows", "APIPolicy", "Generation", "HFPolicy", "PolicyError", "ScriptedPolicy", "build_policy",
           "SamplingParams", "ToolCall", "parse_tool_calls", "TemplateDrift", "Trajectory", "TrajectoryWriter",
           "read_trajectories", "render_transcript", "resume_trajectories", "trajectory_lines", "Workspace",
           "WorkspaceError"]
