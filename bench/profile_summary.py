"""A py-spy profile (``py-spy record --format raw``: one collapsed stack per line, then its sample
count) summarised as Markdown: where the CPU went, by the function that was running (self) and by
the functions below which it ran (inclusive), every thread together.

    py-spy record --format raw -o /tmp/ingest.txt -- \
        .venv/bin/python bench/bench_remote_embedding.py
    .venv/bin/python bench/profile_summary.py /tmp/ingest.txt [--top 30] [--title T]

Frames are named ``function (file)``, the file shortened to what follows ``site-packages/`` or
the repository; a function counts once per stack in the inclusive column (recursion).
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^)]*?)(?::\d+)?\)$")


def frame_name(frame: str) -> str:
    m = _FRAME.match(frame.strip())
    if not m:
        return frame.strip()
    file = m["file"]
    for marker in ("site-packages/", "/citewise/", "/wt-", "/lib/python3"):
        if marker in file:
            file = file.split(marker, 1)[1]
            if marker == "/wt-":
                file = file.split("/", 1)[-1]
            break
    return f"{m['func']} ({file})"


def stacks(lines: list[str]) -> Iterator[tuple[list[str], int]]:
    """Each stack's frames (outermost first, named by ``frame_name``) and its sample count."""
    for line in lines:
        stack, _, count = line.rstrip().rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = [frame_name(f) for f in stack.split(";")]
        # py-spy starts each stack with the thread ("process ... / thread ..."): not a function.
        frames = [f for f in frames if not f.startswith(("process ", "thread "))]
        if frames:
            yield frames, int(count)


def summarise(lines: list[str]) -> tuple[int, Counter[str], Counter[str]]:
    total = 0
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    for frames, n in stacks(lines):
        total += n
        own[frames[-1]] += n
        for f in set(frames):
            inclusive[f] += n
    return total, own, inclusive


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("profile", type=Path)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--title", default="Where the CPU went")
    args = parser.parse_args()
    total, own, inclusive = summarise(args.profile.read_text().splitlines())
    print(f"# {args.title}\n\n{total} samples (py-spy, every thread).\n")
    for heading, counter in (("Inclusive (the function or anything it called)", inclusive),
                             ("Self (the function itself)", own)):
        print(f"## {heading}\n\n| share | samples | function |\n|---:|---:|---|")
        for name, n in counter.most_common(args.top):
            print(f"| {n / total:.1%} | {n} | `{name}` |")
        print()


if __name__ == "__main__":
    main()
