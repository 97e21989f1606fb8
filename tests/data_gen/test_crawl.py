"""The crawler finds torch's operators, uses the ones it has recipes for, and says why not the rest."""
import pytest

from data_gen.crawl import crawl, crawl_torch

KNOWN_USABLE = {"Linear", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose2d", "ReLU", "GELU", "SiLU", "Softmax",
                "LayerNorm", "GroupNorm", "BatchNorm2d", "InstanceNorm2d", "MaxPool2d", "AvgPool2d",
                "AdaptiveAvgPool2d", "MultiheadAttention", "TransformerEncoderLayer", "LSTM", "GRU", "MSELoss",
                "CrossEntropyLoss", "Flatten", "Upsample", "PixelShuffle", "Hardtanh", "RMSNorm"}


@pytest.fixture(scope="module")
def torch_crawl():
    return crawl_torch()


def test_known_operators_are_usable_with_their_ranks(torch_crawl):
    usable, _ = torch_crawl
    by_name = {op.name: op for op in usable}
    assert KNOWN_USABLE <= set(by_name)
    assert by_name["Conv2d"].ranks == (4,) and by_name["Conv2d"].role == "anchor"
    assert by_name["Linear"].signature.startswith("Linear(in_features")
    assert by_name["ReLU"].source_file.endswith("activation.py")


def test_unusable_classes_are_skipped_with_reasons(torch_crawl):
    usable, skipped = torch_crawl
    reasons = {s.name: s.reason for s in skipped}
    assert "stochastic" in reasons["Dropout"]
    assert "container" in reasons["Sequential"]
    assert "lazy" in reasons["LazyLinear"]
    assert "Identity" in reasons and "Module" in reasons
    assert not {s.name for s in skipped} & {op.name for op in usable}


def test_registry_summary_counts_and_transformers_absence():
    registry = crawl(["llama"], with_transformers=True)
    summary = registry.summary()
    torch_part = summary["torch"]
    assert torch_part["found"] == torch_part["usable"] + torch_part["skipped"] >= 150
    assert torch_part["usable"] >= 100
    try:
        import transformers  # noqa: F401
    except ImportError:
        assert summary["transformers"]["usable"] == 0
        assert any("transformers is not installed" in n for n in summary["notes"])
    else:
        names = {op.name for op in registry.usable("transformers")}
        assert {"LlamaRMSNorm", "LlamaMLP"} <= names
