"""`make bench`: run every benchmark (or those named) and print where the JSON went."""

from __future__ import annotations

import json
import sys

from bench import (
    app_adapter_bench,
    flow_bench,
    forwarding_bench,
    heartbeat_bench,
    jobs_bench,
    payloads_bench,
    peers_bench,
    redrive_bench,
    scheduler_bench,
    worker_bench,
)

BENCHMARKS = {"worker": worker_bench.run, "scheduler": scheduler_bench.run, "heartbeat": heartbeat_bench.run, "peers": peers_bench.run,
              "app_adapter": app_adapter_bench.run, "redrive": redrive_bench.run, "payloads": payloads_bench.run,
              "forwarding": forwarding_bench.run, "flow": flow_bench.run, "jobs": jobs_bench.run}


def main(argv: list[str]) -> int:
    names = argv or list(BENCHMARKS)
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        print(f"unknown benchmark {unknown[0]!r}; choose from {', '.join(BENCHMARKS)}", file=sys.stderr)
        return 2
    for name in names:
        path = BENCHMARKS[name]()
        document = json.loads(path.read_text())
        print(f"{name}: {path}")
        for key, value in document["figures"].items():
            goal = document["goals"].get(key)
            verdict = f"  goal {goal}: {'met' if document['met'][key] else 'NOT met'}" if goal else ""
            print(f"  {key} = {value}{verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
