"""The local backend's optimisation loop, apart from loading the model: losses, KL to the parent, early stopping.

- **Objective per sample**: SFT (mean NLL of the completion tokens) for accepted samples; a clipped
  group-relative policy-gradient term for samples with a non-zero advantage (ratio against the recorded
  sampling logprobs); and, for every sample, `kl_coef` x KL to the **parent**: the k3 estimator
  exp(d) - d - 1, d = log pi_parent - log pi_theta, per completion token. The parent's log-probabilities
  are taken once, before the first step, from the model as loaded — the parent's adapter (or, for a
  generation without one, the base: a fresh LoRA is zero) — so no second model and no extra forward per
  step is needed.
- **Batches** (`batch_size` policy turns a step): with `pack`, whole trajectories (all their turns that train)
  in a seeded shuffle, taken until the step holds at least `batch_size` turns, so a trajectory's turns meet in
  one step and share one forward (rsi.train.packing); without it, turns one by one, as before issue 36. Either
  way the step's loss is the mean of its turns' losses.
- **Scoring**: a `Scorer` splits a list of samples into forwards and returns each sample's completion
  log-probabilities; a plain per-sample function is one sample a forward.
- **Early stopping**: the mean log-probability of the validation slice's accepted completions (templates
  held out of training) is measured before the first step, every `validation_every` steps and after the last;
  `validation_patience` measurements in a row below the best by more than `validation_tolerance` stop
  training, and the trainable weights of the best measurement are put back when the last one fell below it.

Only the parameters that require a gradient are trained or restored (the adapter's); torch is imported when a
function runs, so the pure parts (EarlyStop) import anywhere.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from rsi.core.training import TrainSettings
from rsi.train.packing import trajectory_batches

Progress = Callable[[int, int, float], None]


@dataclass
class Sample:
    prompt: list[int]
    completion: list[int]
    old_logprobs: list[float] | None
    advantage: float
    accepted: bool
    trial: str
    validation: bool = False  # a validation template's completion: measured, never trained on
    template: str = ""


@runtime_checkable
class Scorer(Protocol):
    """Completion log-probabilities for samples, several per forward where it can."""

    def split(self, samples: list[Sample]) -> list[list[Sample]]:
        """`samples` in groups that each make one forward (and, in training, one backward)."""
        ...

    def __call__(self, samples: list[Sample]) -> list[Any]:
        """Each sample's completion-token log-probabilities (a 1-D tensor), in the order given."""
        ...


class PerSample:
    """A Scorer from a one-sample function: one sample a forward."""

    def __init__(self, logps: Callable[[Sample], Any]) -> None:
        self.logps = logps

    def split(self, samples: list[Sample]) -> list[list[Sample]]:
        return [[x] for x in samples]

    def __call__(self, samples: list[Sample]) -> list[Any]:
        return [self.logps(x) for x in samples]


@dataclass
class EarlyStop:
    """Tracks a curve that should not fall: stop after `patience` measurements in a row below the best by more
    than `tolerance` (a measurement within the tolerance breaks the run)."""

    patience: int
    tolerance: float = 0.0
    curve: list[tuple[int, float]] = field(default_factory=list)
    best: float | None = None
    best_step: int = 0
    below: int = 0
    stopped_at: int | None = None

    def observe(self, step: int, value: float) -> bool:
        """Record `value` at `step`; True when training should stop here."""
        self.curve.append((step, value))
        if self.best is None or value > self.best:
            self.best, self.best_step, self.below = value, step, 0
            return False
        self.below = self.below + 1 if value < self.best - self.tolerance else 0
        if self.below >= self.patience:
            self.stopped_at = step
            return True
        return False

    @property
    def fell(self) -> bool:
        """Whether the last measurement is below the best by more than the tolerance."""
        return bool(self.curve) and self.best is not None and self.curve[-1][1] < self.best - self.tolerance

    def as_json(self) -> dict[str, Any]:
        return {"curve": [[s, round(v, 6)] for s, v in self.curve], "best_step": self.best_step,
                "best": None if self.best is None else round(self.best, 6), "stopped_at": self.stopped_at,
                "patience": self.patience, "tolerance": self.tolerance}


def pick_validation(samples: list[Sample], limit: int) -> list[Sample]:
    """At most `limit` of `samples`, round-robin across their templates (each in trajectory order): the validation
    slice, and the completions the before/after mean log-probability is measured on."""
    by_tpl: dict[str, list[Sample]] = {}
    for x in samples:
        by_tpl.setdefault(x.template, []).append(x)
    queues = [by_tpl[k] for k in sorted(by_tpl)]
    out: list[Sample] = []
    while len(out) < limit and any(queues):
        for q in queues:
            if q and len(out) < limit:
                out.append(q.pop(0))
    return out


def sample_loss(lp: Any, ref: Any | None, x: Sample, *, sft: bool, pg: bool, s: TrainSettings,
                kl_coef: float, old: Any | None = None) -> tuple[Any, float]:
    """One sample's loss from its completion tokens' log-probabilities `lp` (and the parent's, `ref`), and the
    mean k3 KL estimate that went into it (0.0 when none did)."""
    import torch

    loss = lp.new_zeros(())
    if sft:
        loss = loss - lp.mean()
    if pg:
        if old is None:  # `old`: the trainer's own scoring of the rollout as loaded (pg_old_logprobs: trainer)
            old = torch.tensor(x.old_logprobs, device=lp.device) if x.old_logprobs else lp.detach()
        ratio = torch.exp(lp - old)
        a = float(x.advantage)
        surr = torch.minimum(ratio * a, torch.clamp(ratio, 1 - s.clip_eps, 1 + s.clip_eps) * a)
        loss = loss + s.pg_coef * (-surr.mean())
    kl = 0.0
    if kl_coef > 0 and ref is not None:
        d = ref - lp
        k3 = (torch.exp(d) - d - 1).mean()
        loss = loss + kl_coef * k3
        kl = float(k3.detach())
    return loss, kl


@dataclass
class FitResult:
    steps: int
    losses: list[float]
    kl_curve: list[float]
    logprob_before: float
    logprob_after: float
    validation: dict[str, Any]
    train_sec: float = 0.0  # inside the optimisation steps (no measurement before, between or after)
    trained_samples: int = 0  # policy turns over all steps (a turn drawn twice counts twice)
    trained_tokens: int = 0  # their prompt + completion tokens (what one forward per turn would compute)
    # train_sec split (the cycle profile): the forwards with their losses, the backwards, the optimiser's step
    # (with zero_grad); on a GPU without a synchronise, so only the CPU's figures are exact
    forward_sec: float = 0.0
    backward_sec: float = 0.0
    optimizer_sec: float = 0.0


class Batches:
    """The samples of each step: `batch_size` turns one by one, or (`pack`) whole trajectories until the step has
    at least `batch_size` turns; a seeded shuffle, reshuffled when the pool runs out."""

    def __init__(self, pool: list[Sample], s: TrainSettings) -> None:
        self.pool, self.size, self.rng = pool, s.batch_size, random.Random(s.seed)
        self.units = trajectory_batches(pool) if s.pack else [[i] for i in range(len(pool))]
        self.order: list[list[int]] = []

    def next(self) -> list[Sample]:
        out: list[Sample] = []
        while len(out) < min(self.size, len(self.pool)):
            if not self.order:
                self.order = list(self.units)
                self.rng.shuffle(self.order)
            out += [self.pool[i] for i in self.order.pop()]
        return out


def fit(model: Any, logps: Scorer | Callable[[Sample], Any], *, sft: list[Sample], pg: list[Sample],
        validation: list[Sample], s: TrainSettings, kl_coef: float, evaluate: list[Sample],
        progress: Progress | None = None) -> FitResult:
    """Train `model` (its parameters that require a gradient) for up to `s.steps` steps on `sft` + `pg`."""
    import torch

    scorer: Scorer = logps if isinstance(logps, Scorer) else PerSample(logps)
    want_sft = bool(sft)
    pool = sft + [x for x in pg if not (want_sft and x.accepted)]
    sft_ids, pg_ids = {id(x) for x in sft}, {id(x) for x in pg}
    params = [p for p in model.parameters() if p.requires_grad]

    def measure(xs: list[Sample]) -> list[Any]:
        """Each sample's log-probabilities, in the order of `xs` (the scorer may group and reorder them)."""
        model.eval()
        got: dict[int, Any] = {}
        with torch.no_grad():
            for group in scorer.split(xs):
                got.update((id(x), v.detach()) for x, v in zip(group, scorer(group), strict=True))
        model.train()
        return [got[id(x)] for x in xs]

    # the parent's log-probabilities: the model as loaded, before any step (for the KL, and as the policy-gradient
    # ratio's denominator when the rollouts are re-scored in the trainer)
    rescore = s.pg_old_logprobs == "trainer"
    first = pool if kl_coef > 0 else [x for x in pool if rescore and id(x) in pg_ids]
    refs = dict(zip((id(x) for x in first), measure(first), strict=True))
    missing = [x for x in evaluate if id(x) not in refs]
    start = {**refs, **dict(zip((id(x) for x in missing), measure(missing), strict=True))}
    before = _mean([float(start[id(x)].mean()) for x in evaluate])
    stop = EarlyStop(patience=s.validation_patience, tolerance=s.validation_tolerance)
    best_state: list[Any] | None = None

    def check(step: int) -> bool:
        nonlocal best_state
        if not validation:
            return False
        value = _mean([float(v.mean()) for v in measure(validation)])
        halt = stop.observe(step, value)
        if stop.best_step == step:
            best_state = [p.detach().clone() for p in params]
        return halt

    check(0)
    opt = torch.optim.AdamW(params, lr=s.learning_rate, weight_decay=0.0)
    batches = Batches(pool, s)
    losses: list[float] = []
    kls: list[float] = []
    model.train()
    step = 0
    train_sec, n_samples, n_tokens = 0.0, 0, 0
    fwd_sec, bwd_sec, opt_sec = 0.0, 0.0, 0.0
    while step < s.steps:
        batch = batches.next()
        t_step = time.perf_counter()
        opt.zero_grad()
        total, kl_total = 0.0, 0.0
        opt_sec += time.perf_counter() - t_step
        for group in scorer.split(batch):
            t_fwd = time.perf_counter()
            group_loss = None
            for x, lp in zip(group, scorer(group), strict=True):
                loss, kl = sample_loss(lp, refs.get(id(x)), x, sft=id(x) in sft_ids, pg=id(x) in pg_ids, s=s,
                                       kl_coef=kl_coef, old=refs.get(id(x)) if rescore else None)
                group_loss = loss if group_loss is None else group_loss + loss
                total += float(loss.detach()) / len(batch)
                kl_total += kl / len(batch)
            t_bwd = time.perf_counter()
            fwd_sec += t_bwd - t_fwd
            if group_loss is not None:
                (group_loss / len(batch)).backward()
            bwd_sec += time.perf_counter() - t_bwd
        t_opt = time.perf_counter()
        opt.step()
        opt_sec += time.perf_counter() - t_opt
        train_sec += time.perf_counter() - t_step
        n_samples += len(batch)
        n_tokens += sum(len(x.prompt) + len(x.completion) for x in batch)
        step += 1
        losses.append(total)
        kls.append(kl_total)
        if progress is not None:
            progress(step, s.steps, total)
        if (step % s.validation_every == 0 or step == s.steps) and check(step):
            break
    restored = None
    if validation and stop.fell and best_state is not None:
        with torch.no_grad():
            for p, v in zip(params, best_state, strict=True):
                p.copy_(v)
        restored = stop.best_step
    after = _mean([float(v.mean()) for v in measure(evaluate)])
    vjson: dict[str, Any] = {"samples": len(validation), "templates": sorted({x.template for x in validation}),
                             "every": s.validation_every}
    if validation:
        vjson.update(stop.as_json(), restored_step=restored)
    return FitResult(steps=step, losses=losses, kl_curve=kls, logprob_before=before, logprob_after=after,
                     validation=vjson, train_sec=train_sec, trained_samples=n_samples, trained_tokens=n_tokens,
                     forward_sec=fwd_sec, backward_sec=bwd_sec, optimizer_sec=opt_sec)


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


__all__ = ["Batches", "EarlyStop", "FitResult", "PerSample", "Sample", "Scorer", "fit", "pick_validation",
           "sample_loss"]
