"""scripts/probe_family_actor.py: the chain body located token by token, and a real (tiny, random)
actor scored under teacher forcing on both splits of the committed family set."""
import json
import sys
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def probe(load_script):
    return load_script("scripts/probe_family_actor.py")


@pytest.fixture(scope="module")
def random_actor(tmp_path_factory):
    """The committed demonstrations' tokenizer and a tiny Llama with random weights over it."""
    import torch
    from transformers import AutoTokenizer, LlamaForCausalLM

    sys.path.insert(0, str(REPO))
    from src.agent.offline_model import save_policy, small_model_config

    work = tmp_path_factory.mktemp("probe")
    with tarfile.open(REPO / "data" / "family" / "demos_cpu.tar.gz") as tar:
        tar.extractall(work, members=[m for m in tar.getmembers() if m.name.startswith("tokenizer")], filter="data")
    tokenizer = AutoTokenizer.from_pretrained(work / "tokenizer")
    torch.manual_seed(0)
    return save_policy(LlamaForCausalLM(small_model_config(tokenizer, "tiny", 8192)), tokenizer, work / "actor")


def test_the_body_mask_covers_the_chain_function_and_nothing_else(probe, random_actor):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(random_actor)
    text = "int a = 1;\nstatic inline float chain(float v) {\n  v = v * 2.0f;\n  return v;\n}\nint b = 2;\n"
    ids = tokenizer(text)["input_ids"]
    mask = probe.body_mask(tokenizer, ids)
    inside = tokenizer.decode([t for t, m in zip(ids, mask) if m])
    outside = tokenizer.decode([t for t, m in zip(ids, mask) if not m])
    assert "v = v * 2.0f;" in inside and inside.rstrip().endswith("return v;")
    assert "int a = 1" in outside and "int b = 2" in outside and "2.0f" not in outside


def test_every_generated_body_of_a_demonstration_is_weighted(load_script, random_actor):
    # A multi-turn demonstration writes the kernel more than once: each body counts, and only
    # where the policy generated it (a body in an observation is not a label).
    from transformers import AutoTokenizer

    actor = load_script("scripts/make_family_actor.py")
    tokenizer = AutoTokenizer.from_pretrained(random_actor)
    body = "static inline float chain(float v) {\n  v = v * 2.0f;\n  return v;\n}\n"
    shown, written = tokenizer("observation: " + body)["input_ids"], tokenizer("reply: " + body + "done")["input_ids"]
    row = {"token_ids": shown + written, "loss_mask": [0] * len(shown) + [1] * len(written)}
    weighted = actor.weigh_bodies([row], tokenizer, 5.0)
    assert sum(actor.body_mask(tokenizer, row["token_ids"])[:len(shown)]) > 0  # the shown body is found too
    assert row["loss_mask"][:len(shown)] == [0] * len(shown)
    heavy = [t for t, w in zip(row["token_ids"], row["loss_mask"]) if w == 5.0]
    assert len(heavy) == weighted > 0 and "v = v * 2.0f;" in tokenizer.decode(heavy)
    assert "done" in tokenizer.decode([t for t, w in zip(row["token_ids"], row["loss_mask"]) if w == 1])


def test_a_random_actor_gets_chain_bodies_wrong_on_both_splits(probe, random_actor, tmp_path, capsys):
    out = tmp_path / "probe.json"
    assert probe.main(["--actor", str(random_actor), "--max-tasks", "1", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert [t["split"] for t in report["tasks"]] == ["train", "heldout"]
    for task in report["tasks"]:
        assert 0 < task["body_wrong"] <= task["body_tokens"]
        assert task["reply_nll"] > 1.0  # random weights over a 2k-token vocabulary
    assert report["splits"]["heldout"]["body_all_correct"] == 0.0
    assert "heldout: 1 tasks, chain body argmax-correct in 0%" in capsys.readouterr().out


def test_a_missing_actor_is_one_clear_error(probe, tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        probe.main(["--actor", str(tmp_path / "nope")])
    assert exc.value.code == 2 and "no such directory" in capsys.readouterr().err


@pytest.fixture(scope="module")
def committed_actor(tmp_path_factory):
    """data/family/actor_small.tar.gz: the family's starting actor (docs/family.md), unpacked."""
    work = tmp_path_factory.mktemp("committed")
    with tarfile.open(REPO / "data" / "family" / "actor_small.tar.gz") as tar:
        tar.extractall(work, filter="data")
    return work / "family_actor"


def test_the_committed_actor_writes_the_chain_bodies_of_held_out_tasks(probe, committed_actor, tmp_path):
    # Teacher-forced on the teacher's fused reply, every chain-body token of held-out tasks (op
    # sequences it never saw) is its argmax; on the H200 it was right in 37 of 38 held-out tasks.
    # Fails when the actor is lost or damaged, or when the teacher's texts or the tokenizer change
    # under it (then it must be cloned again: benchmarks/h200/family_actor.sh).
    out = tmp_path / "probe.json"
    assert probe.main(["--actor", str(committed_actor), "--max-tasks", "6", "--out", str(out)]) == 0
    splits = json.loads(out.read_text())["splits"]
    assert splits["heldout"]["body_all_correct"] >= 5 / 6 and splits["train"]["body_all_correct"] >= 5 / 6
    assert splits["heldout"]["reply_nll_mean"] < 0.05


def test_snippet_scoring_tells_a_composing_actor_from_a_random_one(load_script, committed_actor, random_actor):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    actor = load_script("scripts/make_family_actor.py")
    scores = {}
    for name, path in (("committed", committed_actor), ("random", random_actor)):
        model = AutoModelForCausalLM.from_pretrained(path).float()
        scores[name] = actor.snippet_bodies_right(model, AutoTokenizer.from_pretrained(path), "cpu", "cpu", count=4)
    assert scores["random"] == {"train": 0.0, "heldout": 0.0}
    assert scores["committed"]["heldout"] >= 0.75 and scores["committed"]["train"] >= 0.75
