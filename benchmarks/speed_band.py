"""The uncertainty band of each kind of speed (gpuplan/planning/evidence.py BANDS), derived from
the figures we have and printed.

Run: .venv/bin/python benchmarks/speed_band.py

Each point is one observed speed ratio divided by the ratio the planner would have used: below 1
the figure was too fast (the job ran slower than planned), above 1 too slow. A kind's band is the
smallest and the largest point of its group, rounded outward to 3 decimals: every figure we have
lies inside it. A new point outside widens it. No point is a figure a test checks the band
against (tests/test_speed_evidence.py checks that BANDS is what this prints, and what the bands
do to plans, not that they contain a point).

Groups:
- measured: the same job on the same GPU measured twice (both ways round: either could be the
  profile); a calibration is such a measurement of the planned fleet, so it shares the band.
- scaled: two GPUs of one architecture; how their table ratio moves when the job changes
  (ResNet-50 fp32 -> mixed precision, one suite), both ways round.
- generic: the table (fp32 ResNet-50 relative to V100) against measured jobs across
  architectures: field report A, this project's H100 profiles against the workloads' reference
  figures, the same suite's mixed-precision and transformer jobs.
"""

from __future__ import annotations

from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal

D = Decimal

# shared/refdata/gpus.csv: rel_v100_fp32, rel_v100_mixed (Lambda PyTorch NGC, V100 = 1; T4 and
# L40S are proxies there, kept as the table keeps them)
REL = {  # gpu: (architecture, fp32, mixed)
    "GTX 1080 Ti": ("Pascal", D("0.533"), D("0.278")),
    "T4": ("Turing", D("0.34"), D("0.35")),
    "A10": ("Ampere", D("0.946"), D("0.766")),
    "A100 40GB PCIe": ("Ampere", D("2.39"), D("1.68")),
    "A100 40GB SXM4": ("Ampere", D("2.17"), D("1.46")),
    "A100 80GB PCIe": ("Ampere", D("2.75"), D("1.83")),
    "A100 80GB SXM4": ("Ampere", D("2.89"), D("1.9")),
    "L40S": ("Ada", D("1.75"), D("1.38")),
    "H100 PCIe": ("Hopper", D("3.38"), D("2.37")),
    "H100 SXM": ("Hopper", D("5.14"), D("3.35")),
    "H200": ("Hopper", D("6.12"), D("3.7")),
}

# lambdal/deeplearning-benchmark pytorch/pytorch-train-throughput-fp16.csv @0551cb70 (NGC 22.10):
# one GPU, fp16 (mixed precision); resnet50 img/s, then three transformer jobs (bert_base_squad,
# bert_large_squad, transformerxllarge)
LAMBDA_FP16 = {
    "V100": (833, 189, 57, 6071),
    "A10": (638, 135, 42, 5614),
    "A100 40GB PCIe": (1396, 368, 117, 16034),
    "A100 80GB PCIe": (1527, 415, 140, 17082),
    "A100 80GB SXM4": (1582, 443, 152, 17918),
    "RTX 3090": (905, 172, 52, 7821),
    "RTX A6000": (916, 198, 68, 11126),
    "RTX 4090": (1301, 297, 93, 14509),
    "RTX 6000 Ada": (1146, 255, 79, 16049),
    "H100 PCIe": (1866, 567, 203, 22586),
    "H100 SXM": (2616, 812, 301, 30841),
}
# the fp32 table's ResNet-50 figures for the same GPUs (same file, fp32; V100 369)
LAMBDA_FP32_RN50 = {"V100": 369, "A10": 349, "A100 40GB PCIe": 882, "A100 80GB PCIe": 1014, "A100 80GB SXM4": 1066,
                    "RTX 3090": 513, "RTX A6000": 514, "RTX 4090": 721, "RTX 6000 Ada": 647, "H100 PCIe": 1197,
                    "H100 SXM": 1753}


def measured_points() -> list[tuple[str, Decimal]]:
    pairs = [
        # shared/measurements/h100-2026-11-22/README.md: colorize s/epoch on one H100 at six memory caps
        ("colorize on one H100, fastest vs slowest of six caps (s/epoch 0.1871, 0.1935)", D("0.1871"), D("0.1935")),
        # shared/refdata/rn50_measurements.csv: Lambda RN50 fp32, two software releases
        ("H100 SXM RN50 fp32, Lambda NGC 22.10 vs v2 (img/s 1753, 1895)", D(1753), D(1895)),
        ("H100 PCIe RN50 fp32, Lambda NGC 22.10 vs v2 (img/s 1197, 1248)", D(1197), D(1248)),
    ]
    out = []
    for what, a, b in pairs:
        out += [(what, a / b), (what + ", reversed", b / a)]
    # README benchmarks table (benchmarks/estimate_vs_measured.py): the committed colorize profile
    # predicted 270.0 s for 4 jobs x 268 epochs on one H100, the run took 261.8 s
    out.append(("colorize profile's prediction vs the measured run on one H100 (270.0 s, 261.8 s)",
                D("270.0") / D("261.8")))
    return out


def scaled_points() -> list[tuple[str, Decimal]]:
    out = []
    for a, (arch_a, f_a, m_a) in REL.items():
        for b, (arch_b, f_b, m_b) in REL.items():
            if a != b and arch_a == arch_b:
                out.append((f"{a} / {b} ({arch_a}): mixed-precision ratio over the fp32 table's", (m_a / m_b) / (f_a / f_b)))
    return out


def generic_points() -> list[tuple[str, Decimal]]:
    out = [
        # shared/domain.md A: 1 epoch about 8 s on the GTX 1080 Ti and on the K80 half; table 0.533 / 0.13
        ("report A: GTX 1080 Ti vs K80 half, colorize (observed 1.0, table 4.1)", D(1) / (D("0.533") / D("0.13"))),
        # catalog/profiles colorize-h100-sxm-2026-11-22 (0.187079 s/epoch) vs report A's 7.2 s on a K80
        ("H100 SXM profile vs report A's K80, colorize", (D("7.2") / D("0.187079")) / (D("5.14") / D("0.13"))),
        # catalog/profiles resnet50-h100-sxm-2026-11-22 (821.87 s/epoch) vs resnet50's 3472 s on a V100
        ("H100 SXM profile vs resnet50's V100 figure", (D(3472) / D("821.870596")) / D("5.14")),
    ]
    for gpu, (arch, f, m) in REL.items():
        if arch != "Volta":
            out.append((f"{gpu} vs V100, RN50 mixed precision over the fp32 table", m / f))
    v = LAMBDA_FP16["V100"]
    for gpu, figures in LAMBDA_FP16.items():
        if gpu == "V100":
            continue
        table = D(LAMBDA_FP32_RN50[gpu]) / LAMBDA_FP32_RN50["V100"]
        for job, i in (("bert_base_squad", 1), ("transformerxllarge", 3)):
            # a transformer job against the transformer class's own column (bert_large fp16)
            column = D(figures[2]) / v[2]
            out.append((f"{gpu} vs V100, {job} fp16 over the transformer-train column", (D(figures[i]) / v[i]) / column))
        out.append((f"{gpu} vs V100, RN50 fp16 over the cnn-train table", (D(figures[0]) / v[0]) / table))
    return out


def band(points: list[tuple[str, Decimal]]) -> tuple[Decimal, Decimal]:
    values = [v for _, v in points]
    return (min(values).quantize(D("0.001"), rounding=ROUND_FLOOR),
            max(values).quantize(D("0.001"), rounding=ROUND_CEILING))


def bands() -> dict[str, tuple[Decimal, Decimal]]:
    measured = band(measured_points())
    return {"measured": measured, "calibrated": measured, "scaled": band(scaled_points()),
            "generic": band(generic_points())}


def main() -> None:
    for name, points in (("measured", measured_points()), ("scaled", scaled_points()), ("generic", generic_points())):
        print(f"{name}: {len(points)} points")
        for what, v in sorted(points, key=lambda x: x[1]):
            print(f"  {v:.3f}  {what}")
    print()
    for kind, (low, high) in bands().items():
        print(f"{kind:<10} band x{low}-{high}: wall and job yen up to {1 / low:.2f}x, down to {1 / high:.2f}x")


if __name__ == "__main__":
    main()
