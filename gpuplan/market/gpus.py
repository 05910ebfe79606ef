"""Which GPUs a user asks for (`--gpus V100:4`, a batch file's `gpus:`, a SkyPilot task's
`accelerators`, a dstack task's `resources.gpu`), and the catalog's offers that have them; and,
for a task that names no workload, its offers by yen per hour with their setup counted (as
SkyPilot's optimizer ranks a task's resources by their hourly price).

A GPU ask is colon-separated words in any order: a GPU model (`V100`, `A100`, `H100-SXM`), a count
per machine (`4`) and a memory per GPU (`24GB`: at least that much). `V100:4` is four V100s in each
machine; `A100` any A100 machine (40 GB or 80 GB); `24GB` any GPU with at least 24 GB.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal

from gpuplan.errors import UsageError
from gpuplan.planning.types import Offer

_COUNT = re.compile(r"[0-9]{1,3}\Z")
_MEMORY = re.compile(r"([0-9]{1,4})\s*(GB|GIB|G)\Z", re.IGNORECASE)
_MODEL = re.compile(r"[A-Za-z][A-Za-z0-9 ._-]{0,39}\Z")
FORMS = "MODEL[:N] such as V100:4, A100 or H100:8 (or a memory per GPU: 24GB, A100:40GB:2)"


@dataclass(frozen=True)
class GpuAsk:
    """GPUs each machine must have: `model` ("" any; matched as the catalog's GPU name or its
    first words: A100 is A100 40GB and A100 80GB), `count` per machine (None: any), `memory_gib`
    per GPU at least (None: any)."""

    model: str = ""
    count: int | None = None
    memory_gib: int | None = None

    def text(self) -> str:
        """As a user writes it: "V100:4", "A100:40GB:2", "24GB"."""
        parts = [self.model] if self.model else []
        if self.memory_gib is not None:
            parts.append(f"{self.memory_gib}GB")
        if self.count is not None:
            parts.append(str(self.count))
        return ":".join(parts)

    def fits(self, offer: Offer) -> bool:
        if self.count is not None and offer.gpu_count != self.count:
            return False
        if self.memory_gib is not None and offer.gpu_memory_gib < self.memory_gib:
            return False
        return not self.model or model_matches(self.model, offer.gpu)


def _words(name: str) -> list[str]:
    return [w for w in re.split(r"[\s_-]+", name.lower()) if w]


def model_matches(model: str, gpu: str) -> bool:
    """Whether the catalog's GPU `gpu` is the `model` asked for: the same words, or `model`'s words
    its first ones (A100 is "A100 80GB"; A100-80GB is "A100 80GB"; H100 is H100 PCIe, NVL and SXM)."""
    want, have = _words(model), _words(gpu)
    return bool(want) and have[:len(want)] == want


def parse(text: str, what: str = "--gpus") -> GpuAsk:
    """A GPU ask as typed; one line naming the forms where it is not one."""
    raw = str(text).strip()
    if not raw or len(raw) > 60:
        raise UsageError(f"{what} {raw[:60]!r}: write {FORMS}")
    model, count, memory = "", None, None
    for part in (p.strip() for p in raw.split(":")):
        m = _MEMORY.match(part)
        if _COUNT.match(part) and count is None:
            count = int(part)
            if not 1 <= count <= 16:
                raise UsageError(f"{what} {raw!r}: {count} GPUs per machine; gpuplan's catalog has 1 to 16")
        elif m and memory is None:
            memory = int(m.group(1))
        elif part and _MODEL.match(part) and not model:
            model = part
        else:
            raise UsageError(f"{what} {raw!r}: {part!r} is not a GPU model, a count or a memory; write {FORMS}")
    if not (model or count or memory):
        raise UsageError(f"{what} {raw!r}: write {FORMS}")
    return GpuAsk(model, count, memory)


def offers_for(ask: GpuAsk, offers: Iterable[Offer], what: str = "--gpus") -> tuple[Offer, ...]:
    """The offers with the GPUs asked for; one line naming the catalog's GPUs where none has them."""
    every = tuple(offers)
    kept = tuple(o for o in every if ask.fits(o))
    if not kept:
        models = sorted({o.gpu for o in every if not ask.model or model_matches(ask.model, o.gpu)})
        if ask.model and models:  # the model is there, not in that count or memory
            counts = sorted({o.gpu_count for o in every if model_matches(ask.model, o.gpu)})
            raise UsageError(f"{what} {ask.text()}: no offer has that; {ask.model} comes"
                             f" {', '.join(f'{n}' for n in counts)} to a machine ({', '.join(models)})")
        known = sorted({o.gpu for o in every})
        raise UsageError(f"{what} {ask.text()}: no offer has that GPU; the catalog's GPUs are {', '.join(known)}")
    return kept


@dataclass(frozen=True)
class HourlyRow:
    """One offer for a task whose length nobody knows: `nodes` machines of `offer`, what they cost
    an hour together (yen, on the catalog's tax basis), and the setup each machine needs before
    the task starts (`setup_s`, from the catalog's provider facts) and its billed yen for all of them."""

    offer: Offer
    nodes: int
    yen_per_hour: Decimal
    setup_s: int
    setup_yen: Decimal
    setup_source: str


def by_the_hour(offers: Iterable[Offer], ask: GpuAsk | None, nodes: int, setup: dict[str, tuple[int, str]], *,
                spot: bool, region: str | None = None, providers: Sequence[str] = (),
                what: str = "--gpus") -> list[HourlyRow]:
    """`offers` (on-demand, and spot rows with `spot`; in `region` and of `providers` where given)
    with the GPUs `ask` asks for (None: any), cheapest an hour first: `provision --gpus`'s pick
    and a task with no workload planned by the hour."""
    kept = [o for o in offers if (o.market == "on-demand" or spot)
            and (region is None or o.region.lower() == region.lower())
            and (not providers or o.provider.lower() in providers)]
    if ask is not None:
        kept = list(offers_for(ask, kept, what))
    return hourly(kept, nodes, setup)


def hourly(offers: Sequence[Offer], nodes: int, setup: dict[str, tuple[int, str]]) -> list[HourlyRow]:
    """`offers` with a price, cheapest an hour first (`setup`: provider -> (seconds, source))."""
    from gpuplan.market import billing

    rows = []
    for o in offers:
        if o.price_jpy_per_hour is None or o.kind in ("owned", "monthly"):
            continue
        seconds, source = setup.get(o.provider, (0, "no provider facts in the catalog: 0 assumed"))
        if o.kind == "task":
            seconds = 0  # a container task has nothing to set up (its image pull is not billed)
        per = o.price_jpy_per_hour * nodes
        billed = billing.billed_seconds(seconds, o.billing_granularity_s, o.billing_minimum_s) if seconds else 0
        rows.append(HourlyRow(o, nodes, per, seconds, per * billed / 3600, source))
    return sorted(rows, key=lambda r: (r.yen_per_hour, r.offer.key))
