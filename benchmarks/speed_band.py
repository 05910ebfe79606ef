"""The uncertainty band of each kind of speed, per speed class (gpuplan/planning/evidence.py
BANDS), derived from the figures we have and printed with every point and its source.

Run: .venv/bin/python benchmarks/speed_band.py

A speed class is a column of catalog/gpus.csv: the published figure of one reference job per GPU,
relative to the V100 (cnn-train: ResNet-50 fp32 img/s; transformer-train: BERT-large SQuAD fp16
seq/s). Each point is one observed speed ratio divided by the ratio the planner would have used:
below 1 the figure was too fast (the job ran slower than planned), above 1 too slow. A band is the
smallest and the largest point of its group, rounded outward to 3 decimals: every figure we have
lies inside it. A new point outside widens it. No point is a figure a test checks the band against
(tests/test_speed_evidence.py checks that BANDS is what this prints, and what the bands do to
plans, not that they contain a point).

Groups, per class:
- measured (every class): the same job on the same GPU measured twice (both ways round: either
  could be the profile); a calibration is such a measurement of the planned fleet, so it shares
  the band.
- scaled: two GPUs of one architecture; how their column ratio moves when the job is another job
  of the class, or the class's job in the other precision (same suite), both ways round.
- generic: the column against other jobs of the class across architectures (every other job and
  precision of the class in the same suite), and, for cnn-train, the field report and this
  project's H100 profiles against the figures the workloads were planned from, and ResNet-50 in
  another suite (GPU-Insights) against the column: what a cross-suite figure risks.
A GPU with no figure in a class has no band there: the planner leaves its offers unplanned
(`no_speed`) rather than guess from another class.
"""

from __future__ import annotations

from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal

D = Decimal
CLASSES = ("cnn-train", "transformer-train")

# shared/refdata/gpus.csv: rel_v100_fp32, rel_v100_mixed (Lambda PyTorch, V100 = 1; L40S is the RTX
# 6000 Ada's figure there). T4's pair is left out: it is an inference figure, not training.
REL = {  # gpu: (architecture, fp32, mixed)
    "GTX 1080 Ti": ("Pascal", D("0.533"), D("0.278")),
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

SUITE = "lambdal/deeplearning-benchmark pytorch/pytorch-train-throughput-{fp32,fp16}.csv @0551cb70 (NGC 22.10, one GPU)"
JOBS = ("ssd", "bert_base_squad", "bert_large_squad", "resnet50", "transformerxllarge")
# SUITE's figures per GPU, JOBS order (img/s or seq/s): (architecture, fp32, fp16)
LAMBDA = {
    "V100": ("Volta", (104, 42, 12, 369, 2081), (229, 189, 57, 833, 6071)),
    "Quadro RTX 8000": ("Turing", (81, 41, 12, 274, 2515), (182, 146, 50, 651, 7853)),
    "A10": ("Ampere", (98, 70, 19, 349, 3031), (174, 135, 42, 638, 5614)),
    "A100 40GB PCIe": ("Ampere", (256, 179, 53, 882, 10388), (395, 368, 117, 1396, 16034)),
    "A100 80GB PCIe": ("Ampere", (288, 224, 70, 1014, 12455), (437, 415, 140, 1527, 17082)),
    "A100 80GB SXM4": ("Ampere", (304, 239, 75, 1066, 13353), (458, 443, 152, 1582, 17918)),
    "RTX 3090": ("Ampere", (144, 85, 24, 513, 4165), (236, 172, 52, 905, 7821)),
    "RTX A6000": ("Ampere", (153, 101, 33, 514, 6143), (260, 198, 68, 916, 11126)),
    "RTX 4090": ("Ada", (224, 137, 44, 721, 7905), (379, 297, 93, 1301, 14509)),
    "RTX 6000 Ada": ("Ada", (196, 136, 44, 647, 8641), (341, 255, 79, 1146, 16049)),
    "H100 PCIe": ("Hopper", (355, 292, 97, 1197, 15459), (566, 567, 203, 1866, 22586)),
    "H100 SXM": ("Hopper", (524, 408, 141, 1753, 22251), (782, 812, 301, 2616, 30841)),
}
# xiaoran007/GPU-Insights docs/data/benchmark-data.json @f4f228e0: a ResNet-50 training score (higher is
# faster), fp32, one GPU, against the Tesla V100S-PCIE of the same release (ver1 11577, ver2 11032);
# the T4's cnn-train figure is its ver2 ratio. gpu: (release, score, the cnn-train column's figure)
INSIGHTS_V100S = {"ver1": 11577, "ver2": 11032}
INSIGHTS = [
    ("RTX 3090", "ver1", 16311, D("1.390")), ("RTX 3090", "ver2", 19614, D("1.390")),
    ("RTX 3090", "ver2", 20166, D("1.390")), ("RTX 4090", "ver1", 24046, D("1.954")),
    ("A100 40GB PCIe", "ver1", 27478, D("2.39")), ("TITAN X (Pascal)", "ver1", 5792, D("0.52")),
]

# each class: its column (job, precision) and the other jobs of the class in SUITE
COLUMN = {"cnn-train": ("resnet50", "fp32"), "transformer-train": ("bert_large_squad", "fp16")}
CLASS_JOBS = {"cnn-train": ("resnet50", "ssd"), "transformer-train": ("bert_large_squad", "bert_base_squad",
                                                                       "transformerxllarge")}


def _figure(gpu: str, job: str, precision: str) -> Decimal:
    _, fp32, fp16 = LAMBDA[gpu]
    return D((fp32 if precision == "fp32" else fp16)[JOBS.index(job)])


def _ratio(gpu: str, job: str, precision: str) -> Decimal:
    return _figure(gpu, job, precision) / _figure("V100", job, precision)


def _others(klass: str) -> list[tuple[str, str]]:
    return [(j, p) for j in CLASS_JOBS[klass] for p in ("fp32", "fp16") if (j, p) != COLUMN[klass]]


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


def scaled_points(klass: str = "cnn-train") -> list[tuple[str, Decimal]]:
    out = []
    if klass == "cnn-train":
        for a, (arch_a, f_a, m_a) in REL.items():
            for b, (arch_b, f_b, m_b) in REL.items():
                if a != b and arch_a == arch_b:
                    out.append((f"{a} / {b} ({arch_a}): RN50 mixed precision over the fp32 column (shared/refdata/gpus.csv)",
                                (m_a / m_b) / (f_a / f_b)))
    job, precision = COLUMN[klass]
    for a, (arch_a, _, _) in LAMBDA.items():
        for b, (arch_b, _, _) in LAMBDA.items():
            if a == b or arch_a != arch_b:
                continue
            column = _ratio(a, job, precision) / _ratio(b, job, precision)
            for j, p in _others(klass):
                if klass == "cnn-train" and j == "resnet50":
                    continue  # RN50 mixed precision within one architecture: the REL pairs above
                out.append((f"{a} / {b} ({arch_a}): {j} {p} over the {klass} column (Lambda NGC 22.10)",
                            (_ratio(a, j, p) / _ratio(b, j, p)) / column))
    return out


def generic_points(klass: str = "cnn-train") -> list[tuple[str, Decimal]]:
    out = []
    if klass == "cnn-train":
        out += [
            # shared/domain.md A: 1 epoch about 8 s on the GTX 1080 Ti and on the K80 half; table 0.533 / 0.13
            ("report A: GTX 1080 Ti vs K80 half, colorize (observed 1.0, table 4.1)", D(1) / (D("0.533") / D("0.13"))),
            # catalog/profiles colorize-h100-sxm-2026-11-22 (0.187079 s/epoch) vs report A's 7.2 s on a K80
            ("H100 SXM profile vs report A's K80, colorize", (D("7.2") / D("0.187079")) / (D("5.14") / D("0.13"))),
            # catalog/profiles resnet50-h100-sxm-2026-11-22 (821.87 s/epoch) vs resnet50's 3472 s on a V100
            ("H100 SXM profile vs resnet50's V100 figure", (D(3472) / D("821.870596")) / D("5.14")),
        ]
        for gpu, (_, f, m) in REL.items():
            out.append((f"{gpu} vs V100, RN50 mixed precision over the fp32 column (shared/refdata/gpus.csv)", m / f))
        for gpu, release, score, column in INSIGHTS:  # the same job in another suite: what a cross-suite figure risks
            out.append((f"{gpu} vs V100S, GPU-Insights ResNet-50 {release} ({score} / {INSIGHTS_V100S[release]}) over"
                        f" the cnn-train column {column}", D(score) / INSIGHTS_V100S[release] / column))
    job, precision = COLUMN[klass]
    for gpu in LAMBDA:
        if gpu == "V100":
            continue
        column = _ratio(gpu, job, precision)
        for j, p in _others(klass):
            out.append((f"{gpu} vs V100, {j} {p} over the {klass} column (Lambda NGC 22.10)", _ratio(gpu, j, p) / column))
    return out


def band(points: list[tuple[str, Decimal]]) -> tuple[Decimal, Decimal]:
    values = [v for _, v in points]
    return (min(values).quantize(D("0.001"), rounding=ROUND_FLOOR),
            max(values).quantize(D("0.001"), rounding=ROUND_CEILING))


def bands() -> dict[str, dict[str, tuple[Decimal, Decimal]]]:
    """class -> kind -> (low, high)."""
    measured = band(measured_points())
    return {k: {"measured": measured, "calibrated": measured, "scaled": band(scaled_points(k)),
                "generic": band(generic_points(k))} for k in CLASSES}


def main() -> None:
    derived = bands()
    print(f"sources: {SUITE}; xiaoran007/GPU-Insights docs/data/benchmark-data.json @f4f228e0;"
          " shared/refdata/gpus.csv and rn50_measurements.csv; shared/domain.md A; catalog/profiles;"
          " shared/measurements/h100-2026-11-22")
    for klass in CLASSES:
        job, precision = COLUMN[klass]
        print(f"\n== {klass} (column: {job} {precision} relative to V100)")
        for name, points in (("measured", measured_points()), ("scaled", scaled_points(klass)),
                             ("generic", generic_points(klass))):
            low, high = derived[klass][name]
            print(f"{name}: x{low}-{high}, {len(points)} points")
            for what, v in sorted(points, key=lambda x: x[1]):
                print(f"  {v:.3f}  {what}")
    print()
    for klass in CLASSES:
        for kind, (low, high) in derived[klass].items():
            print(f"{klass:<18} {kind:<10} band x{low}-{high}: wall and job yen up to {1 / low:.2f}x, down to {1 / high:.2f}x")


if __name__ == "__main__":
    main()
