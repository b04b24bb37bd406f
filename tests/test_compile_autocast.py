"""torch.compile captures bmm/einops/sdpa without graph breaks; autocast runs in reduced precision."""

import pytest
import torch
from conftest import rel_err

from vit import VisionTransformer, ViTConfig

CFG = ViTConfig(img_size=16, patch_size=4, in_chans=3, num_classes=5, embed_dim=32, depth=2, num_heads=4)


@pytest.mark.parametrize("backend", ["bmm", "einops", "sdpa"])
@pytest.mark.slow
def test_compiles_as_one_graph(backend):
    torch._dynamo.reset()
    model = VisionTransformer(CFG.replace(attn=backend)).eval()
    images = torch.randn(2, 3, 16, 16)
    explanation = torch._dynamo.explain(model)(images)
    assert explanation.graph_break_count == 0, explanation.break_reasons
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    assert rel_err(compiled(images), model(images)) < 1e-6


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_autocast_cpu(dtype):
    model = VisionTransformer(CFG).eval()
    images = torch.randn(2, 3, 16, 16)
    with torch.autocast("cpu", dtype=dtype):
        out = model(images)
    assert out.dtype == dtype
    assert rel_err(out.float(), model(images)) < 0.05
