"""A VGG-11-style network on 32x32 CIFAR-shaped synthetic batches: the small-input case.

Field report E: 32x32 images could not saturate the GPUs, so per-GPU throughput and
data-parallel scaling of this job are worth measuring rather than assuming, and so is the CPU
its input pipeline needs (`--measure-feed`: CPU seconds per image of CIFAR-10's crop, flip and
normalise, run alone after the timed steps).

    python -m gpuplan.jobs.vgg_cifar --json --batch-size 128 --steps 50

Checkpoints: with --checkpoint-dir DIR (default $GPUPLAN_CHECKPOINT_DIR, set by `gpuplan run`)
it resumes from DIR/checkpoint.pt when there is one, saves every --checkpoint-every seconds
(default 600, checked at epoch ends) and, on SIGTERM, after the step it is in, then exits 143.
The JSON line says what happened (resumed_from_epoch, checkpoint_saves, checkpoint_save_s,
checkpoint_bytes; details in _common.py). An epoch here is --steps steps.
"""

from __future__ import annotations

from torch import nn

from gpuplan.jobs import _common

VGG11 = (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M")


class VGG(nn.Module):
    def __init__(self, classes: int = 10, width: float = 1.0) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        cin = 3
        for v in VGG11:
            if v == "M":
                layers.append(nn.MaxPool2d(2))
            else:
                cout = max(4, int(v * width))
                layers += [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True)]
                cin = cout
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(cin, classes)

    def forward(self, x):
        return self.classifier(self.features(x).flatten(1))


def main(argv: list[str] | None = None) -> None:
    p = _common.base_parser("vgg_cifar", "VGG-11 training on synthetic 32x32 batches")
    p.add_argument("--batch-size", type=int, default=128, help="per process")
    p.add_argument("--width", type=float, default=1.0, help="channel multiplier")
    p.add_argument("--feed-recipe", default="torchvision", choices=sorted(_common.CIFAR_FEED_RECIPES),
                   help="the input pipeline --measure-feed times: torchvision's CIFAR recipe or TensorFlow's tutorial one")
    _common.training_options(p)
    args = p.parse_args(argv)
    steps_per_epoch = _common.training_steps(p, args)
    if args.quick:
        args.batch_size, args.width = min(args.batch_size, 8), min(args.width, 0.25)
    device = _common.setup(args)
    record, checkpoints = _common.classifier_training(
        "vgg_cifar", VGG(10, args.width), args, device, image_size=32, classes=10, batch_size=args.batch_size,
        steps_per_epoch=steps_per_epoch,
    )
    if args.measure_feed and _common.dist_env()[0] == 0 and not checkpoints.stopped:
        record.update(_common.cifar_feed(max(args.batch_size * args.steps, _common.FEED_MIN_IMAGES), args.seed,
                                            args.feed_recipe))
    _common.finish(record, args, checkpoints)


if __name__ == "__main__":
    main()
