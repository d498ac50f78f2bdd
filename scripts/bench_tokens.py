"""Token counts: how wrong bytes/4 is, what calibration recovers, what the cache saves.

Ground truth is litellm's count with the model's own tokenizer (default
openai/gpt-4o-mini, o200k_base). Text is generated here, deterministically:
English prose, Python code and Chinese prose.

Accuracy: a session of 40 messages of one kind; the counter is calibrated on the
requests of earlier turns (history after 10, 20, 30 messages; "1 turn" uses only
the last of them) with the true count as the server's reported input tokens, then
measured on the 40-message request. "cl100k stand-in" counts with gpt-4's
tokenizer against o200k truth: the situation of a model whose real tokenizer is
not shipped (Claude 3+), where calibration is what closes the gap.

Per-turn cost: a 2,000-message mixed session is counted once, then each run
appends 2 new messages and times one count() (median of --runs runs), with the
per-message cache and without it (cache_size=0), beside litellm.token_counter on
the whole list and bytes/4.

    python -m scripts.bench_tokens [--runs N] [--model openai/gpt-4o-mini]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable

from harness9.provider.llm import load_litellm
from harness9.provider.tokenizer import ByteCounter, TokenCounter, TokenizerCounter
from harness9.schema import Message
from harness9.tokens import ServerCount, estimate_tokens

# -- deterministic text ---------------------------------------------------------------------


def words(text: str) -> list[str]:
    return text.split()


NOUNS = words(
    "agent session window summary message tool result budget threshold model history "
    "checkpoint store user request reply table index cache counter file directory process "
    "server client error retry stream token boundary policy estimate report"
)
VERBS = words(
    "compacts reads writes folds keeps drops measures counts sends receives repairs retries "
    "stores loads streams checks limits replaces appends trims records"
)
ADJECTIVES = words(
    "recent older careful large small stale fresh noisy exact rough shared local remote "
    "orphaned pending visible hidden partial complete"
)
ADVERBS = words("quickly rarely always never carefully silently eventually twice again")

CHINESE_WORDS = words(
    "上下文 工程 智能体 会话 历史 记录 模型 窗口 摘要 消息 工具 调用 结果 预算 阈值 压缩 "
    "检查点 存储 用户 请求 回复 缓存 计数 文件 目录 进程 服务器 错误 重试 流式 边界 策略 估算 "
    "报告 系统 保留 最近 较早 精确 粗略 共享 本地 远程 完整 部分 可见 隐藏 终端 命令 输出"
)
CHINESE_LINKS = ("会", "把", "并", "在", "对", "将", "需要", "可以", "已经", "仍然", "并且")


def english(rng: random.Random, sentences: int) -> str:
    out = []
    for _ in range(sentences):
        subject = f"The {rng.choice(ADJECTIVES)} {rng.choice(NOUNS)}"
        obj = f"the {rng.choice(ADJECTIVES)} {rng.choice(NOUNS)}"
        tail = rng.choice(
            (
                "",
                f" {rng.choice(ADVERBS)}",
                f" after {rng.randint(2, 900)} turns",
                f", then {rng.choice(VERBS)} {rng.choice(NOUNS)}s",
            )
        )
        out.append(f"{subject} {rng.choice(VERBS)} {obj}{tail}.")
    return " ".join(out)


def python_code(rng: random.Random, functions: int) -> str:
    out = []
    for _ in range(functions):
        name = f"{rng.choice(VERBS).rstrip('s')}_{rng.choice(NOUNS)}"
        args = ", ".join(rng.sample(NOUNS, rng.randint(1, 3)))
        var = rng.choice(NOUNS)
        attr = rng.choice(NOUNS)
        out.append(
            f"def {name}({args}) -> int:\n"
            f'    """{rng.choice(VERBS).capitalize()} the {rng.choice(ADJECTIVES)} {var}."""\n'
            f"    total = 0\n"
            f"    for item in {var}_list:\n"
            f"        if item.{attr} > {rng.randint(0, 4096)}:\n"
            f"            total += len(item.{rng.choice(NOUNS)}) * {rng.randint(2, 64)}\n"
            f"        elif item.{attr} is None:\n"
            f'            raise ValueError(f"no {attr} in {{item!r}}")\n'
            f"    return total // {rng.randint(2, 16)}\n"
        )
    return "\n\n".join(out)


def chinese(rng: random.Random, sentences: int) -> str:
    out = []
    for _ in range(sentences):
        clauses = []
        for _ in range(rng.randint(1, 3)):
            a, b, c = rng.sample(CHINESE_WORDS, 3)
            clauses.append(f"{a}{rng.choice(CHINESE_LINKS)}{b}的{c}")
        out.append("，".join(clauses) + "。")
    return "".join(out)


KINDS: dict[str, Callable[[random.Random], str]] = {
    "English prose": lambda rng: english(rng, rng.randint(4, 12)),
    "Python code": lambda rng: python_code(rng, rng.randint(1, 3)),
    "Chinese text": lambda rng: chinese(rng, rng.randint(4, 12)),
}


def session(kind: str, n: int, seed: int) -> list[Message]:
    rng = random.Random(seed)
    make = KINDS[kind]
    return [Message("user" if i % 2 == 0 else "assistant", make(rng)) for i in range(n)]


# -- accuracy -------------------------------------------------------------------------------


def calibrated_error(
    counter: TokenCounter, msgs: list[Message], turns: list[int], truth: Callable
) -> float:
    model = ServerCount()  # the context policy's model of the server's count
    for n in turns:
        model.observe(counter.count(msgs[:n]), truth(msgs[:n]))
    return error(model.count(counter.count(msgs)), truth(msgs))


def error(estimate: int, exact: int) -> float:
    return 100.0 * (estimate - exact) / exact


def accuracy_table(model: str) -> None:
    litellm = load_litellm()

    def truth(msgs: list[Message]) -> int:
        return litellm.token_counter(model=model, messages=[m.to_dict() for m in msgs])

    header = (
        f"{'text':14s} {'tokens':>7s} {'bytes/4':>8s} {'+cal 1':>7s} {'+cal 3':>7s} "
        f"{'counter':>8s} {'cl100k':>7s} {'+cal 3':>7s}"
    )
    print(f"Error against {model}'s tokenizer (signed %, 40-message request):")
    print(header)
    print("-" * len(header))
    for i, kind in enumerate(KINDS):
        msgs = session(kind, 40, seed=100 + i)
        exact = truth(msgs)
        stand_in = TokenizerCounter("gpt-4")
        row = (
            exact,
            error(ByteCounter().count(msgs), exact),
            calibrated_error(ByteCounter(), msgs, [30], truth),
            calibrated_error(ByteCounter(), msgs, [10, 20, 30], truth),
            error(TokenizerCounter(model).count(msgs), exact),
            error(stand_in.count(msgs), exact),
            calibrated_error(TokenizerCounter("gpt-4"), msgs, [10, 20, 30], truth),
        )
        print(
            f"{kind:14s} {row[0]:7d} {row[1]:+7.1f}% {row[2]:+6.1f}% {row[3]:+6.1f}% "
            f"{row[4]:+7.1f}% {row[5]:+6.1f}% {row[6]:+6.1f}%"
        )
    print(
        "bytes/4 = estimate_tokens; +cal N = calibrated on N earlier turns; counter = "
        "TokenizerCounter; cl100k = gpt-4's tokenizer standing in"
    )


# -- per-turn cost --------------------------------------------------------------------------


def mixed_session(n: int, seed: int) -> list[Message]:
    rng = random.Random(seed)
    makers = list(KINDS.values())
    return [
        Message("user" if i % 2 == 0 else "assistant", makers[i % len(makers)](rng))
        for i in range(n)
    ]


def per_turn_ms(count: Callable[[list[Message]], int], runs: int) -> float:
    msgs = mixed_session(2000, seed=7)
    count(msgs)  # warm: loads the tokenizer and, when cached, every message
    fresh = mixed_session(2 * runs, seed=8)
    times = []
    for r in range(runs):
        msgs = msgs + fresh[2 * r : 2 * r + 2]
        start = time.perf_counter()
        count(msgs)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def cost_table(model: str, runs: int) -> None:
    litellm = load_litellm()
    cached = TokenizerCounter(model)
    uncached = TokenizerCounter(model, cache_size=0)

    def whole_list(msgs: list[Message]) -> int:
        return litellm.token_counter(model=model, messages=[m.to_dict() for m in msgs])

    variants = {
        "TokenizerCounter, no cache (baseline)": uncached.count,
        "TokenizerCounter, per-message cache": cached.count,
        "litellm.token_counter on the whole list": whole_list,
        "bytes/4 (estimate_tokens)": estimate_tokens,
    }
    medians = {label: per_turn_ms(fn, runs) for label, fn in variants.items()}
    sample = mixed_session(2000, seed=7)
    print(
        f"\nPer-turn count of a 2,000-message session ({sum(len(m.content) for m in sample):,} "
        f"characters) after appending 2 messages, median of {runs} runs:"
    )
    for label, ms in medians.items():
        print(f"{label:42s} {ms:9.2f} ms")
    base = medians["TokenizerCounter, no cache (baseline)"]
    ours = medians["TokenizerCounter, per-message cache"]
    whole = medians["litellm.token_counter on the whole list"]
    print(
        f"cache speed-up vs no cache: {base / ours:.0f}x; vs whole-list litellm: {whole / ours:.0f}x"
    )
    print(f"messages tokenized: cached {cached.tokenized:,}, uncached {uncached.tokenized:,}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--model", default="openai/gpt-4o-mini")
    args = parser.parse_args()
    accuracy_table(args.model)
    cost_table(args.model, args.runs)


if __name__ == "__main__":
    main()
