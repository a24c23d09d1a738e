"""Importer throughput and resume: ``agently_vecmem.ingest.import_history`` without a model (raw turns) and
the CLI's default embedder, against the same turns written in one ``ChromaWorkspace.put`` (the batch
baseline, measured in the same run), then an import killed mid-run (SIGKILL of ``agently-vecmem ingest``)
and run again: the second run must finish the history with nothing stored twice.

The importer goes through ``VecMemory.after_turn_sync`` turn by turn (embed one document, dedup, one put),
so it is slower than the batch put by design; the ratio shows the price of the plugin's own path.

Usage: ``python benchmarks/bench_import.py [--quick] [--turns 600] [--sessions 6]``
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as c  # noqa: E402

from agently_vecmem.embedders import resolve_embedder  # noqa: E402
from agently_vecmem.filters import Scope  # noqa: E402
from agently_vecmem.ingest import import_history, pair_turns, read_history  # noqa: E402
from agently_vecmem.memory.pending import raw_turn_record  # noqa: E402
from agently_vecmem.workspace.chroma import ChromaWorkspace  # noqa: E402

MEMORY = Scope(None, None, "memory")
_TOPICS = ["a pottery class", "the marathon training plan", "a trip to Kyoto", "the broken dishwasher",
           "learning Rust", "my sister's wedding", "the quarterly budget", "vegetarian recipes", "a new road bike"]


def write_history(path: Path, turns: int, sessions: int) -> None:
    """A JSONL chat history: ``turns`` user/assistant pairs over ``sessions`` sessions, dated a day apart."""
    with open(path, "w", encoding="utf-8") as fh:
        for i in range(turns):
            sid = f"chat-{i % sessions}"
            day = 1 + (i // sessions) % 28
            month = 1 + (i // (sessions * 28)) % 12
            topic = _TOPICS[i % len(_TOPICS)]
            when = f"2023-{month:02d}-{day:02d}T{9 + i % 10:02d}:00:00Z"
            fh.write(json.dumps({"role": "user", "session_id": sid, "time": when,
                                 "content": f"Turn {i}: today I spent an hour on {topic}; it went better than "
                                            f"last time and I want to keep notes about it."}) + "\n")
            fh.write(json.dumps({"role": "assistant", "session_id": sid,
                                 "content": f"Good to hear about {topic}. What would you like to remember from "
                                            f"turn {i}?"}) + "\n")


def batch_put(path: Path, history: Path, embedder: object) -> float:
    """The same raw-turn records in one put (embedded in batches): the baseline rate, turns/s."""
    _, messages, _ = read_history(history)
    records = []
    for sid, turns in pair_turns(messages).items():
        for t in turns:
            r = raw_turn_record(session_id=sid, user_content=t.user, assistant_content=t.assistant,
                                turn_index=2 * t.index, max_chars=4000, reason="no_model")
            r.occurred_at = t.time
            records.append(r)
    with ChromaWorkspace(path, embedder=embedder) as ws:
        start = time.perf_counter()
        ws.put(records)
        return len(records) / (time.perf_counter() - start)


def cli(*args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "ANONYMIZED_TELEMETRY": "False",
           "PYTHONPATH": str(c.ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.Popen([sys.executable, "-m", "agently_vecmem.cli", "ingest", *args, "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def main() -> None:
    p = c.parser(__doc__.splitlines()[0])
    p.add_argument("--turns", type=int, default=600)
    p.add_argument("--sessions", type=int, default=6)
    args = p.parse_args()
    n = 40 if args.quick else args.turns
    print(f"bench_import: {n} turns in {args.sessions} sessions, no model; {c.load()}")
    embedder = resolve_embedder("auto")
    embedder.embed_query("warm up")
    with tempfile.TemporaryDirectory(prefix="bench-import-") as tmp:
        root = Path(tmp)
        history = root / "history.jsonl"
        write_history(history, n, args.sessions)

        with ChromaWorkspace(root / "import", embedder=embedder) as ws:
            report = import_history(ws, history)
            stored = ws.count(scope=MEMORY)
            again = import_history(ws, history)
            after = ws.count(scope=MEMORY)
        base = batch_put(root / "batch", history, embedder)
        c.row("importer (after_turn_sync per turn)", f"{report.turns_per_s:8.1f} turns/s",
              f"{report.seconds:6.1f} s", f"{stored} records")
        c.row("batch put of the same records", f"{base:8.1f} turns/s", f"ratio {report.turns_per_s / base:.2f}")
        c.row("second run of the same file", f"{again.seconds * 1000:8.0f} ms",
              f"resumed {again.resumed}, processed {again.processed}, records {after}")

        # kill an import mid-run, then run it again
        kill_after = 4.0 + 0.5 * n / max(report.turns_per_s, 1e-6)
        proc = cli(str(root / "killed"), str(history))
        start = time.monotonic()
        while proc.poll() is None and time.monotonic() - start < kill_after:
            time.sleep(0.1)
        killed = proc.poll() is None
        if killed:
            proc.send_signal(signal.SIGKILL)
        proc.communicate()
        rerun = cli(str(root / "killed"), str(history))
        out, err = rerun.communicate(timeout=3600)
        second = json.loads(out) if rerun.returncode == 0 else {}
        with ChromaWorkspace(root / "killed", embedder=embedder) as ws:
            final = ws.count(scope=MEMORY)
        c.row(f"killed after {kill_after:.1f} s ({'SIGKILL' if killed else 'finished first'}), run again",
              f"resumed {second.get('resumed')}, processed {second.get('processed')}, "
              f"duplicates dropped {second.get('duplicates')}", f"records {final} of {n}")
        if rerun.returncode != 0:
            print(err[-2000:])
    passed = stored == n and after == n and again.processed == 0 and final == n and rerun.returncode == 0
    c.summary("bench_import", passed,
              f"{report.turns_per_s:.1f} turns/s ({report.turns_per_s / base:.2f}x batch put); resume "
              f"{'after SIGKILL' if killed else '(no kill)'}: {final}/{n} records, none twice")


if __name__ == "__main__":
    main()
