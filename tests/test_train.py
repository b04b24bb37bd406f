"""The trainer: the same seed gives the same run on the CPU, another seed another run."""

import torch

from ablations.training.data import load_dataset
from ablations.training.train import train
from bench.training.recipe import TrainConfig
from vit import VisionTransformer, ViTConfig

TINY = ViTConfig(img_size=8, patch_size=2, in_chans=1, num_classes=10, embed_dim=16, depth=1, num_heads=2,
                 mlp_ratio=1.0)


def test_same_seed_gives_identical_accuracy_on_cpu():
    data = load_dataset("digits")
    accs = []
    for _ in range(2):
        torch.manual_seed(3)
        result = train(VisionTransformer(TINY), data, TrainConfig(epochs=2, batch_size=64), 3, torch.device("cpu"),
                       progress=False)
        accs.append((result.test_acc, result.train_loss))
    assert accs[0] == accs[1]
    torch.manual_seed(4)
    other = train(VisionTransformer(TINY), data, TrainConfig(epochs=2, batch_size=64), 4, torch.device("cpu"),
                  progress=False)
    assert (other.test_acc, other.train_loss) != accs[0]
