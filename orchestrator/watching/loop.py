"""The watch loop: a sample every interval until one shows a problem (exit 1) or the user stops it; across
samples it keeps the run of live decode below the release's capacity figure (capacity.py) and the supervisor's
count of recoveries (recovery.py)."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from . import textfile
from .capacity import Streak, below_capacity, live_decode
from .model import Sample
from .recovery import since
from .sample import take


def watch(inventory_path: Path, recipe: str | None, *, interval: float, once: bool, textfile_path: str | None,
          show: Callable[[Sample], None], reserve_gib: float | None = None, stop: Callable[[], bool] = lambda: False,
          capacity_samples: int = 3, **seams) -> Sample:
    """Returns the last sample: the first with a problem, or (`once`) the only one."""
    streak = Streak()
    supervisor = None  # the supervisor's state at the previous sample that read it
    while True:
        started = time.monotonic()
        sample = take(inventory_path, recipe, reserve_gib, window=min(1.0, interval), **seams)
        streak, warning = below_capacity(streak, sample.capacity, live_decode(sample.engine), capacity_samples)
        sample.below_capacity = streak.samples
        sample.recovered = since(supervisor, sample.supervisor)
        supervisor = sample.supervisor or supervisor
        if warning:
            sample.warnings.append(warning)
        if textfile_path:
            textfile.write(textfile_path, sample)
        show(sample)
        if once or sample.problems or stop():
            return sample
        time.sleep(max(0.0, interval - (time.monotonic() - started)))  # the sampling period itself
