"""pix2pix-style colorization training on synthetic HD frames (field report A's job).

One sample is 3 consecutive grayscale frames stacked as 3 channels; the generator returns their
3 colour frames (9 channels). Batch size 1, as the report's GPU memory allowed. Each step trains
the PatchGAN discriminator once and the U-Net generator once (GAN loss + 100 x L1).

    python -m gpuplan.jobs.colorize --json --epochs 1 --steps 10          # 1280x720
    python -m gpuplan.jobs.colorize --json --height 64 --width 64 --ngf 8 --levels 4 --steps 2

Throughput is in frames per second (3 per step); seconds_per_epoch = seconds / epochs (the epochs
this process trained).

Checkpoints: with --checkpoint-dir DIR (default $GPUPLAN_CHECKPOINT_DIR, set by `gpuplan run`)
it resumes from DIR/checkpoint.pt when there is one, saves every --checkpoint-every seconds
(default 600, checked at epoch ends) and, on SIGTERM, after the step it is in, then exits 143.
The JSON line says what happened (resumed_from_epoch, checkpoint_saves, checkpoint_save_s,
checkpoint_bytes; details in _common.py). An epoch here is --steps steps.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from gpuplan.jobs import _common

FRAMES = 3


def _down(cin: int, cout: int, norm: bool) -> nn.Sequential:
    layers: list[nn.Module] = [nn.Conv2d(cin, cout, 4, stride=2, padding=1, bias=not norm)]
    if norm:
        layers.append(nn.BatchNorm2d(cout))
    layers.append(nn.LeakyReLU(0.2, inplace=True))
    return nn.Sequential(*layers)


def _up(cin: int, cout: int, dropout: bool) -> nn.Sequential:
    layers: list[nn.Module] = [nn.ConvTranspose2d(cin, cout, 4, stride=2, padding=1, bias=False), nn.BatchNorm2d(cout)]
    if dropout:
        layers.append(nn.Dropout(0.5))
    layers.append(nn.ReLU(inplace=True))
    return nn.Sequential(*layers)


class UNetGenerator(nn.Module):
    """U-Net with `levels` stride-2 stages; input padded to a multiple of 2**levels, output cropped."""

    def __init__(self, cin: int, cout: int, ngf: int = 64, levels: int = 7) -> None:
        super().__init__()
        self.levels = levels
        chans = [min(ngf * 2**i, ngf * 8) for i in range(levels)]
        # No norm on the outermost and innermost stages (pix2pix: batch 1 leaves BN there nothing to normalise).
        self.downs = nn.ModuleList(
            [_down(cin, chans[0], norm=False)]
            + [_down(chans[i - 1], chans[i], norm=i != levels - 1) for i in range(1, levels)]
        )
        ups = []
        for i in range(levels - 1, 0, -1):
            cin_up = chans[i] if i == levels - 1 else chans[i] * 2
            ups.append(_up(cin_up, chans[i - 1], dropout=i >= levels - 3 and i != levels - 1))
        self.ups = nn.ModuleList(ups)
        self.out = nn.Sequential(nn.ConvTranspose2d(chans[0] * 2, cout, 4, stride=2, padding=1), nn.Tanh())

    def forward(self, x):
        h, w = x.shape[-2:]
        m = 2**self.levels
        x = F.pad(x, (0, (-w) % m, 0, (-h) % m), mode="replicate")
        skips = []
        for down in self.downs:
            x = down(x)
            skips.append(x)
        x = skips.pop()
        for up in self.ups:
            x = torch.cat([up(x), skips.pop()], dim=1)
        return self.out(x)[..., :h, :w]


class PatchDiscriminator(nn.Module):
    """The 70x70 PatchGAN: real/fake per patch for (input, output) pairs."""

    def __init__(self, cin: int, ndf: int = 64) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(cin, ndf, 4, stride=2, padding=1), nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf, ndf * 2, 4, stride=2, padding=1, bias=False), nn.BatchNorm2d(ndf * 2),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf * 2, ndf * 4, 4, stride=2, padding=1, bias=False), nn.BatchNorm2d(ndf * 4),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf * 4, ndf * 8, 4, stride=1, padding=1, bias=False), nn.BatchNorm2d(ndf * 8),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf * 8, 1, 4, stride=1, padding=1),
        )

    def forward(self, x):
        return self.net(x)


def main(argv: list[str] | None = None) -> None:
    p = _common.base_parser("colorize", "pix2pix colorization training on synthetic HD frames")
    _common.training_options(p)
    p.add_argument("--height", type=int, default=720)
    p.add_argument("--width", type=int, default=1280)
    p.add_argument("--ngf", type=int, default=64, help="generator/discriminator base channels")
    p.add_argument("--levels", type=int, default=7, help="U-Net depth (stride-2 stages)")
    p.set_defaults(steps=10)
    args = p.parse_args(argv)
    steps_per_epoch = _common.training_steps(p, args)
    if args.quick:
        args.height, args.width, args.ngf, args.levels = 64, 64, 8, 4
    if min(args.height, args.width) < 2**args.levels // 4:
        p.error(f"--height/--width {args.height}x{args.width} are too small for --levels {args.levels}")
    device = _common.setup(args)

    gen = UNetGenerator(FRAMES, FRAMES * 3, args.ngf, args.levels).to(device)
    disc = PatchDiscriminator(FRAMES + FRAMES * 3, args.ngf).to(device)
    opt_g = torch.optim.Adam(gen.parameters(), lr=2e-4, betas=(0.5, 0.999))
    opt_d = torch.optim.Adam(disc.parameters(), lr=2e-4, betas=(0.5, 0.999))
    checkpoints = _common.Checkpoints("colorize", args, {"generator": gen, "discriminator": disc, "optimizer_g": opt_g,
                                                         "optimizer_d": opt_d}, device, steps_per_epoch)
    bce = nn.BCEWithLogitsLoss()
    gray = torch.rand(1, FRAMES, args.height, args.width, device=device) * 2 - 1
    colour = torch.rand(1, FRAMES * 3, args.height, args.width, device=device) * 2 - 1

    def step() -> None:
        fake = gen(gray)
        opt_d.zero_grad(set_to_none=True)
        real_logits = disc(torch.cat([gray, colour], 1))
        fake_logits = disc(torch.cat([gray, fake.detach()], 1))
        loss_d = bce(real_logits, torch.ones_like(real_logits)) + bce(fake_logits, torch.zeros_like(fake_logits))
        loss_d.backward()
        opt_d.step()
        opt_g.zero_grad(set_to_none=True)
        fooled = disc(torch.cat([gray, fake], 1))
        loss_g = bce(fooled, torch.ones_like(fooled)) + 100 * F.l1_loss(fake, colour)
        loss_g.backward()
        opt_g.step()

    try:
        seconds = _common.timed(step, args, device, checkpoints)
    except torch.cuda.OutOfMemoryError:
        _common.fail(args, f"{args.height}x{args.width} frames do not fit this GPU's memory share"
                     f" (fraction {args.memory_fraction or 1})", _common.EXIT_NO_FIT)
    epochs_run = checkpoints.steps_run / steps_per_epoch  # all of --epochs unless resumed or stopped
    record = _common.result(
        "colorize", args, device, seconds=seconds, units_per_rank=FRAMES * checkpoints.steps_run, unit="frames",
        steps=checkpoints.steps_run,
        extra={"epochs": args.epochs, "steps_per_epoch": steps_per_epoch,
               "seconds_per_epoch": seconds / epochs_run if epochs_run else None,
               "height": args.height, "width": args.width, "ngf": args.ngf, "levels": args.levels},
    )
    _common.finish(record, args, checkpoints)


if __name__ == "__main__":
    main()
