"""ResNet-50 training on synthetic ImageNet-shaped batches; data-parallel under torchrun.

    python -m gpuplan.jobs.resnet50 --json --batch-size 32 --steps 20
    torchrun --nnodes 2 --nproc-per-node 4 ... -m gpuplan.jobs.resnet50 --json

A compact ResNet-50 v1.5 (stride on the 3x3 convolution, as torchvision's): with 1000 classes
it has 25,557,032 parameters, so its fp32 gradients are the 102 MB that field report B
all-reduced. Under torchrun it trains with DistributedDataParallel (NCCL on GPU, gloo on CPU)
and reports the throughput of all ranks together.

Checkpoints: with --checkpoint-dir DIR (default $GPUPLAN_CHECKPOINT_DIR, set by `gpuplan run`)
it resumes from DIR/checkpoint.pt when there is one, saves every --checkpoint-every seconds
(default 600, checked at epoch ends) and, on SIGTERM, after the step it is in, then exits 143.
The JSON line says what happened (resumed_from_epoch, checkpoint_saves, checkpoint_save_s,
checkpoint_bytes; details in _common.py). An epoch here is --steps steps.
"""

from __future__ import annotations

from torch import nn

from gpuplan.jobs import _common


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        cout = width * self.expansion
        self.body = nn.Sequential(
            nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
            nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False), nn.BatchNorm2d(width),
            nn.ReLU(inplace=True),
            nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout),
        )
        self.shortcut = (
            nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))
            if stride != 1 or cin != cout
            else nn.Identity()
        )
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        return self.relu(self.body(x) + self.shortcut(x))


class ResNet50(nn.Module):
    def __init__(self, classes: int = 1000, base: int = 64) -> None:
        super().__init__()
        layers: list[nn.Module] = [
            nn.Conv2d(3, base, 7, stride=2, padding=3, bias=False), nn.BatchNorm2d(base), nn.ReLU(inplace=True),
            nn.MaxPool2d(3, stride=2, padding=1),
        ]
        cin = base
        for i, blocks in enumerate((3, 4, 6, 3)):
            width = base * 2**i
            for b in range(blocks):
                layers.append(Bottleneck(cin, width, stride=2 if (b == 0 and i > 0) else 1))
                cin = width * Bottleneck.expansion
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        return self.fc(self.pool(self.features(x)).flatten(1))


def main(argv: list[str] | None = None) -> None:
    p = _common.base_parser("resnet50", "ResNet-50 training on synthetic ImageNet-shaped batches")
    p.add_argument("--batch-size", type=int, default=32, help="per process")
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--classes", type=int, default=1000)
    _common.training_options(p)
    args = p.parse_args(argv)
    steps_per_epoch = _common.training_steps(p, args)
    if args.quick:
        args.batch_size, args.image_size, args.classes = min(args.batch_size, 2), min(args.image_size, 32), 10
    device = _common.setup(args)
    record, checkpoints = _common.classifier_training(
        "resnet50", ResNet50(args.classes), args, device,
        image_size=args.image_size, classes=args.classes, batch_size=args.batch_size, steps_per_epoch=steps_per_epoch,
    )
    _common.finish(record, args, checkpoints)


if __name__ == "__main__":
    main()
