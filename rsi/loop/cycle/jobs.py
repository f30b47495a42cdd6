"""Opening a cycle job (its budget split, seed and number, recorded in its params) and ending one that stopped."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rsi.core.errors import ConfigError, InputError
from rsi.loop.context import WorkspaceContext
from rsi.loop.cycle.split import plan_split
from rsi.loop.discover.generators import GENERATORS, load_generators
from rsi.loop.discover.phase import next_seed
from rsi.loop.run import new_job_id

if TYPE_CHECKING:
    from rsi.loop.cycle.request import CycleRequest


def _open_job(ctx: WorkspaceContext, req: CycleRequest) -> tuple[str, str, dict[str, float]]:
    store = ctx.store
    if req.resume:
        job = store.get_job(req.resume)
        if job.kind != "cycle":
            raise ConfigError(f"--resume {job.id}: that is a {job.kind} job, not a cycle job")
        split = {k: float(v) for k, v in job.params["split"].items()}
        store.acquire_driver()
        try:
            store.claim_job(job.id)  # refuses while another process runs this cycle
        finally:
            store.release_driver()
        return job.id, str(job.generation), split
    if req.budget <= 0:
        raise InputError("--budget", None, "must be more than 0")
    if req.concurrency < 1:
        raise InputError("--concurrency", None, "must be at least 1")
    gen = ctx.generation(req.generation).id
    load_generators()
    for g in req.generators:  # an unknown name is refused before any job exists (it lists the known ones)
        GENERATORS.get(g)
    if req.attempts is not None and req.attempts < 1:
        raise InputError("--attempts", None, "must be at least 1")
    if req.expand_attempts < 1:
        raise InputError("--expand-attempts", None, "must be at least 1")
    if req.n < 1:
        raise InputError("--n", None, "must be at least 1")
    for lv in req.levels:
        if not 1 <= lv <= ctx.contract.discovery.max_difficulty:
            raise InputError("--level", None, f"{lv} does not lie in 1..{ctx.contract.discovery.max_difficulty}")
    number = len(store.jobs_of(kind="cycle")) + 1  # this workspace's cycles so far, this one included
    split = plan_split(ctx, req.budget, req.discover_share, req.holdout_target, req.in_skill_target, number)
    # discover's seed: a second cycle with the first one's seed would draw the same candidates (all refused as
    # taken), so by default each cycle takes a seed above every earlier discover or cycle seed
    seed = req.seed if req.seed is not None else next_seed(store)
    job_id = new_job_id().replace("job-", "cyc-")
    store.acquire_driver()
    try:
        store.create_job(job_id, agent="harness", generation=gen, harness_config_digest=None, attempts=1,
                         concurrency=req.concurrency, task_paths=[], tasks_fingerprint="", trials=[],
                         kind="cycle", phase="cycle",
                         params={"budget": req.budget, "split": split, "phases": {}, "generation": gen, "seed": seed,
                                 "cycle": number})
        store.claim_job(job_id)
    finally:
        store.release_driver()
    return job_id, gen, split


def _end(store: Any, job_id: str, reason: str) -> None:
    store.acquire_driver()
    try:
        if store.get_job(job_id).status != "done":
            store.mark_job_interrupted(job_id, reason)
    finally:
        store.release_driver()



__all__ = ["_end", "_open_job"]
