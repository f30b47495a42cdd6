"""The `local` executor: N trials at a time on threads of this process.

Trial logic runs on worker threads; results come back to the calling (driver) thread, which
alone records them, so the store has one writer. On Ctrl-C the executor cancels what has not
started, kills every sandbox in flight and waits for the workers to unwind (each removes its
containers in `finally`) before re-raising.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

from rsi.core.registry import Registry
from rsi.core.trial import TrialResult
from rsi.exec.trial import Cancelled, TrialEnv, TrialPlan, run_trial


class LocalExecutor:
    name = "local"

    def __init__(self, concurrency: int = 1) -> None:
        self.concurrency = max(1, concurrency)

    def run(
        self,
        plans: Sequence[TrialPlan],
        env: TrialEnv,
        *,
        on_start: Callable[[TrialPlan], None],
        on_result: Callable[[TrialPlan, TrialResult], None],
        trial_fn: Callable[[TrialPlan, TrialEnv], TrialResult] = run_trial,
    ) -> None:
        queue = list(plans)
        pool = ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="rsi-trial")
        running: dict[Future[TrialResult], TrialPlan] = {}
        try:
            while queue or running:
                while queue and len(running) < self.concurrency and not env.cancel.is_set():
                    plan = queue.pop(0)
                    on_start(plan)
                    running[pool.submit(trial_fn, plan, env)] = plan
                done, _ = wait(list(running), timeout=0.5, return_when=FIRST_COMPLETED)
                for fut in done:
                    plan = running.pop(fut)
                    try:
                        result = fut.result()
                    except Cancelled:
                        continue
                    on_result(plan, result)
        except BaseException:
            env.cancel.set()
            env.stop_all()
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        pool.shutdown(wait=True)


EXECUTORS: Registry[LocalExecutor] = Registry("executor")
EXECUTORS.add("local", LocalExecutor)
