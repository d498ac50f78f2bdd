"""How long a cold process takes to learn a model's window: our JSON read vs litellm.

Each variant runs in a fresh interpreter (that is what `harness9 compact --dry-run`
pays), several times; the baseline is ``import litellm; litellm.get_model_info``.

    python -m scripts.bench_limits [--runs N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MODEL = "openrouter/openai/gpt-4o"

VARIANTS = {
    "baseline: import litellm + get_model_info": (
        "import litellm; litellm.suppress_debug_info = True; "
        "print(litellm.get_model_info('openai/gpt-4o')['max_input_tokens'])"
    ),
    "harness9: get_model_limits (JSON map, no litellm)": (
        f"from harness9.provider import get_model_limits; "
        f"print(get_model_limits({MODEL!r}).context_tokens)"
    ),
    "empty interpreter (floor)": "print(128000)",
}


def time_once(code: str) -> tuple[float, str]:
    env = dict(os.environ, PYTHONPATH=str(REPO), LITELLM_LOCAL_MODEL_COST_MAP="True")
    start = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    return time.perf_counter() - start, out.stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    medians: dict[str, float] = {}
    for label, code in VARIANTS.items():
        times, answers = [], set()
        for _ in range(runs):
            seconds, answer = time_once(code)
            times.append(seconds)
            answers.add(answer)
        medians[label] = statistics.median(times)
        print(f"{label:52s} median {medians[label] * 1000:8.1f} ms  answer {sorted(answers)}")
    base = medians["baseline: import litellm + get_model_info"]
    ours = medians["harness9: get_model_limits (JSON map, no litellm)"]
    print(f"speed-up vs baseline: {base / ours:.1f}x ({runs} runs each, same machine, same run)")


if __name__ == "__main__":
    main()
