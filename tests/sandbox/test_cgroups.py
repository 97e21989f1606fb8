"""Where worker cgroups go, read from /proc/self/cgroup and the cgroup tree (simulated here)."""
from sandbox.cgroups import own_cgroup_paths, parent_dirs

V1 = "8:pids:/\n4:memory:/jobs/abc\n1:cpu,cpuacct:/\n0::/\n"
V2 = "0::/user.slice/sandbox\n"


def test_own_paths_split_comma_joined_controllers():
    paths = own_cgroup_paths(V1)
    assert paths["pids"] == "/" and paths["memory"] == "/jobs/abc"
    assert paths["cpu"] == paths["cpuacct"] == "/" and paths[""] == "/"


def test_v1_hierarchies_are_used_per_controller(tmp_path):
    for controller in ("pids", "memory"):
        (tmp_path / controller).mkdir()
        (tmp_path / controller / "cgroup.procs").write_text("")
    found = parent_dirs(tmp_path, V1)
    assert found == {"pids": tmp_path / "pids", "memory": tmp_path / "memory" / "jobs" / "abc"}


def test_v2_needs_the_controllers_delegated(tmp_path):
    (tmp_path / "cgroup.controllers").write_text("cpu memory pids")
    own = tmp_path / "user.slice" / "sandbox"
    own.mkdir(parents=True)
    (own / "cgroup.subtree_control").write_text("memory\n")
    assert parent_dirs(tmp_path, V2) == {"memory": own}
    (own / "cgroup.subtree_control").write_text("")
    assert parent_dirs(tmp_path, V2) == {}
