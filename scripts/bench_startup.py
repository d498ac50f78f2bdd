"""How long until `harness9 chat` shows its prompt in a real terminal, next to `import litellm`.

The REPL loads litellm in a background thread while the user types, so the
prompt should appear well before litellm has finished importing. This drives
the real entry point in a pseudo-terminal, waits for the prompt, and measures
`python -c "import litellm"` in the same run for comparison.

harness9 is byte-compiled first, as an install does (see bench_process.py);
the prompt without a bytecode cache (the first run after editing the source, or
every run under PYTHONDONTWRITEBYTECODE) is measured in the same loop and shown
beside it. The 0.5 s target is for the installed case.

    .venv/bin/python -m scripts.bench_startup [--runs 7]
"""

from __future__ import annotations

import argparse
import os
import pty
import select
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from scripts.bench_process import compile_bytecode, drop_bytecode

REPO = Path(__file__).resolve().parent.parent

# The line editor draws the prompt's trailing space as a cursor move, so match the mark only.
PROMPT = "›".encode()


def time_to_prompt(home: str, timeout: float = 60.0, *, cached: bool = True) -> float:
    """Seconds until the prompt shows; ``cached=False``: from source, writing no cache."""
    env = dict(os.environ)
    if not cached:
        drop_bytecode()
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.update(
        HARNESS9_HOME=home,
        OPENAI_API_KEY="sk-bench",
        LITELLM_LOCAL_MODEL_COST_MAP="True",
        PYTHONPATH=str(REPO),
        TERM="xterm-256color",
    )
    master, slave = pty.openpty()
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness9", "chat", "--api-base", "http://127.0.0.1:9/v1"],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=env,
        cwd=home,
        close_fds=True,
    )
    os.close(slave)
    seen = b""
    elapsed = None
    try:
        while time.perf_counter() - start < timeout:
            ready, _, _ = select.select([master], [], [], 0.05)
            if not ready:
                continue
            try:
                chunk = os.read(master, 4096)
            except OSError:
                break
            seen += chunk
            if PROMPT in seen:
                elapsed = time.perf_counter() - start
                break
        os.write(master, b"\x04")  # Ctrl-D: leave the REPL
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    if elapsed is None:
        raise SystemExit(
            f"no prompt within {timeout}s; the terminal showed:\n{seen.decode(errors='replace')}"
        )
    return elapsed


def time_command(argv: list[str]) -> float:
    env = dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True")
    start = time.perf_counter()
    subprocess.run(argv, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()

    prompt_times, cold_times, litellm_times, bare_times = [], [], [], []
    with tempfile.TemporaryDirectory() as home:
        compiled = compile_bytecode()
        time_to_prompt(home)  # warm the file cache and create the store once
        for _ in range(args.runs):
            # Interleave so machine noise hits all of them alike.
            cold_times.append(time_to_prompt(home, cached=False))
            compile_bytecode()
            prompt_times.append(time_to_prompt(home))
            litellm_times.append(time_command([sys.executable, "-c", "import litellm"]))
            bare_times.append(time_command([sys.executable, "-c", "pass"]))

    def row(label: str, values: list[float]) -> str:
        return f"{label:<42} {statistics.median(values) * 1000:>9.0f} ms {min(values) * 1000:>9.0f} ms {max(values) * 1000:>9.0f} ms"

    print(
        f"{args.runs} runs each, interleaved; python {sys.version.split()[0]}, {os.cpu_count()} cores"
    )
    print(compiled)
    print(f"{'':<42} {'median':>12} {'min':>12} {'max':>12}")
    print(row("python -c pass", bare_times))
    print(row('python -c "import litellm"', litellm_times))
    print(row("harness9 chat: prompt visible in a pty", prompt_times))
    print(row("  the same with no bytecode cache", cold_times))
    med_prompt = statistics.median(prompt_times)
    ratio = med_prompt / statistics.median(litellm_times)
    verdict = "yes" if med_prompt < 0.5 else "NO"
    print(f"prompt / import litellm: {ratio:.2f}x; prompt under 0.5 s: {verdict}")


if __name__ == "__main__":
    main()
