"""``agently-vecmem eval locomo DATA.json [--audit AUDIT.json] [--k 1,5,10,20] [--json OUT.json] [--limit N]
[--model NAME [--base-url URL] [--api-key KEY]]`` and ``agently-vecmem [--embedder NAME] eval probe [FILE]
[--split all|tune|holdout] [--lang en,zh] [--filler N[,N...] [--filler-seed S]] [--json OUT.json]``.

Every path runs the global ``--embedder`` and its result JSON records ``embedder`` (the model id that ran) and
``spaces`` (the store's extra vector spaces). ``eval probe --filler`` is the growth probe
(:mod:`agently_vecmem.eval.filler`): the facts among N filler sentences per language, a growth table per size.

``--path plugin`` measures the user's path instead of the harness: the conversations are imported with
``agently-vecmem ingest``'s importer and every question is asked through the plugin's ``prepare_request``
in a fresh session (``--no-dates`` imports without the session dates; ``--questions N`` asks only the
first N questions of each conversation).

``--path agent`` asks every question through agently 4.1.4.2+ AgentExecution runs (``agent.input(q).start()``)
beside plain requests and AgentlyMemory's own context source on the same store (:mod:`agently_vecmem.eval.agent_path`).

``--model`` adds the plan + rerank mode (the memory plugin's model stages through an OpenAI-compatible
endpoint; ``--base-url`` / ``--api-key`` default to ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY``).

:func:`add_eval_parser` adds it to the main CLI (built only when the command is ``eval``: its imports are
heavy).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from ..errors import ConfigurationError
from .options import model_from_args

__all__ = ["add_eval_parser", "handle_eval", "handle_probe", "format_report"]


def _int_list(flag: str, minimum: int, too_small: str) -> Callable[[str], tuple[int, ...]]:
    """An argparse ``type`` for a comma-separated list of integers, each at least ``minimum``."""

    def parse(text: str) -> tuple[int, ...]:
        try:
            values = tuple(int(x) for x in text.split(",") if x.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} expects comma-separated integers, got {text!r}") from None
        if not values or min(values) < minimum:
            raise argparse.ArgumentTypeError(too_small)
        return values

    return parse


_ks = _int_list("--k", 1, "--k values must be positive integers")
_sizes = _int_list("--filler", 0, "--filler sizes must be integers >= 0")


def _names(text: str) -> tuple[str, ...]:
    """``--spaces``: comma-separated names of known vector spaces ('' for none)."""
    from ..search.spaces import KNOWN_SPACES

    names = tuple(dict.fromkeys(x.strip() for x in text.split(",") if x.strip()))
    unknown = [n for n in names if n not in KNOWN_SPACES]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown vector space(s) {unknown}; known: {', '.join(sorted(KNOWN_SPACES))}")
    return names


def add_eval_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``eval`` command (with its ``locomo`` subcommand) to an argparse subparsers object."""
    parser = subparsers.add_parser("eval", help="evaluate retrieval quality")
    sub = parser.add_subparsers(dest="eval_command", required=True)
    loc = sub.add_parser("locomo", help="evidence recall on a LoCoMo-shaped conversations file")
    loc.add_argument("data", help="conversations file (locomo10.json schema)")
    loc.add_argument("--audit", default=None, help="audit file correcting gold evidence (WRONG_CITATION rows)")
    loc.add_argument("--k", type=_ks, default=(1, 5, 10, 20), help="recall cut-offs, e.g. 1,5,10,20")
    loc.add_argument("--json", dest="json_out", default=None, help="write the full result JSON here")
    loc.add_argument("--limit", type=int, default=None, help="evaluate only the first N conversations")
    loc.add_argument("--workspace", default=None, help="Chroma directory (default: a temporary one)")
    loc.add_argument("--no-progress", action="store_true", help="hide progress bars")
    loc.add_argument("--model", default=None,
                     help="also evaluate plan + rerank with this chat model (OpenAI-compatible endpoint)")
    loc.add_argument("--base-url", default=None, help="endpoint of --model (env OPENAI_BASE_URL)")
    loc.add_argument("--api-key", default=None, help="API key of --model (env OPENAI_API_KEY)")
    loc.add_argument("--timeout", type=float, default=None, help="seconds per model request (default 60)")
    loc.add_argument("--path", dest="eval_path", choices=("harness", "plugin", "agent"), default="harness",
                     help="harness: one record per dialog turn, ranked directly (default); plugin: import "
                          "through VecMemory.after_turn and ask through prepare_request; agent: ask through "
                          "agently 4.1.4.2+ AgentExecution runs beside plain requests and AgentlyMemory")
    loc.add_argument("--no-dates", action="store_true", help="--path plugin/agent: import without the session dates")
    loc.add_argument("--questions", type=int, default=None,
                     help="--path plugin/agent: ask only the first N questions of each conversation")
    loc.set_defaults(handler=handle_eval)
    probe = sub.add_parser("probe", help="per-language recall on a bilingual probe of user facts")
    probe.add_argument("data", nargs="?", default=None,
                       help="probe file (default: the shipped agently_vecmem/data/probe_bilingual.json)")
    probe.add_argument("--split", choices=("all", "tune", "holdout"), default="all",
                       help="score all questions (default), or the tune / holdout half")
    probe.add_argument("--lang", default=None, help="comma-separated languages (default: all of the file's)")
    probe.add_argument("--k", type=_ks, default=(1, 3), help="recall cut-offs (default 1,3)")
    probe.add_argument("--json", dest="json_out", default=None, help="write the full result JSON here")
    probe.add_argument("--sample", type=int, default=None, metavar="N",
                       help="score random stores of N non-date facts each instead of one store of all facts")
    probe.add_argument("--draws", type=int, default=20, help="--sample: how many random stores (default 20)")
    probe.add_argument("--seed", type=int, default=0, help="--sample: random seed (default 0)")
    probe.add_argument("--filler", type=_sizes, default=(0,), metavar="N[,N...]",
                       help="growth probe: store N filler sentences of the same language beside each language's "
                            "facts; several sizes run one store each and report a growth table (e.g. 0,1000,10000)")
    probe.add_argument("--filler-seed", type=int, default=0, help="--filler: the generator's seed (default 0)")
    probe.add_argument("--spaces", type=_names, default=None, metavar="NAME[,NAME...]",
                       help="the stores' vector spaces (default: a new store's, e5 where installed; e.g. e5,use; "
                            "'' for none)")
    probe.add_argument("--no-progress", action="store_true", help="hide progress bars")
    probe.set_defaults(handler=handle_probe)
    return parser


def handle_probe(args: argparse.Namespace) -> int:
    """Run ``eval probe``: the per-language table (hybrid / dense / lexical × R@k) with the global
    ``--embedder``."""
    from ..embedders import resolve_embedder
    from ..eval.probe import PROBE_DATA_PATH, format_probe_report, run_probe

    langs = [x.strip() for x in args.lang.split(",") if x.strip()] if args.lang else None
    result = run_probe(args.data or PROBE_DATA_PATH, embedder=resolve_embedder(args.embedder), languages=langs,
                       ks=args.k, split=args.split, include_per_question=bool(args.json_out),
                       sample=args.sample, draws=args.draws, seed=args.seed, filler=args.filler,
                       filler_seed=args.filler_seed, progress=not args.no_progress, spaces=args.spaces)
    return _emit(format_probe_report(result), result, args.json_out, ensure_ascii=False)


def format_report(result: dict[str, Any]) -> str:
    """A plain-text table of the tuned method beside the baselines."""
    ks = list(result["recall_at_k"])
    head = f"{'method':<10}" + "".join(f"{'R@' + k:>8}" for k in ks) + f"{'MRR':>8}{'nDCG@10':>9}"
    lines = [f"{result['questions']} questions in {result['conversations']} conversations, embedder "
             f"{result.get('embedder')}", head]
    rows = [("hybrid", result)] + list(result["baselines"].items())
    if "model" in result:
        rows.append(("model", result["model"]))
    for name, block in rows:
        lines.append(f"{name:<10}" + "".join(f"{block['recall_at_k'][k]:>8.3f}" for k in ks)
                     + f"{block['mrr']:>8.3f}{block['ndcg_at_10']:>9.3f}")
    for cat, block in result["by_category"].items():
        lines.append(f"  cat {cat} {block.get('name', ''):<12} n={block['questions']:<4}"
                     + "".join(f" R@{k} {block['recall_at_k'][k]:.3f}" for k in ks))
    ms = result["search_ms"]
    lines.append(f"search p50 {ms['p50']:.2f} ms, p95 {ms['p95']:.2f} ms; ingest {result['ingest_per_s']:.0f} records/s")
    if "model" in result:
        m = result["model"]
        tokens = ("tokens not reported" if m["prompt_tokens_per_question"] is None else
                  f"{m['prompt_tokens_per_question']:.0f} prompt + {m['completion_tokens_per_question']:.0f} "
                  "completion tokens")
        fallbacks = ", ".join(f"{k} {v}" for k, v in m["fallbacks"].items()) or "none"
        lines.append(f"model {m['name']}: {m['calls_per_question']:.2f} calls and {tokens} per question; "
                     f"{m['degraded_questions']} degraded questions; fallbacks: {fallbacks}")
    return "\n".join(lines)


def format_plugin_report(result: dict[str, Any]) -> str:
    """A plain-text report of the plugin path."""
    ks = list(result["recall_at_k"])
    lines = [
        f"plugin path ({'dated' if result['dated'] else 'undated'} import): {result['questions']} questions in "
        f"{result['conversations']} conversations; {result['turns']} turns imported as {result['records']} records "
        f"in {result['import_s']:.1f} s ({result['import_turns_per_s']:.1f} turns/s); embedder {result.get('embedder')}",
        f"{'recall':<10}" + "".join(f"{'R@' + k:>8}" for k in ks) + f"{'MRR':>8}{'nDCG@10':>9}",
        f"{'turns':<10}" + "".join(f"{result['recall_at_k'][k]:>8.3f}" for k in ks)
        + f"{result['mrr']:>8.3f}{result['ndcg_at_10']:>9.3f}",
        f"{'items':<10}" + "".join(f"{result['items_recall_at_k'][k]:>8.3f}" for k in ks),
    ]
    for cat, block in result["by_category"].items():
        lines.append(f"  cat {cat} {block.get('name', ''):<12} n={block['questions']:<4}"
                     + "".join(f" R@{k} {block['recall_at_k'][k]:.3f}" for k in ks))
    ms = result["ask_ms"]
    lines.append(f"prepare_request p50 {ms['p50']:.1f} ms, p95 {ms['p95']:.1f} ms; questions {result['questions_s']:.1f} s")
    return "\n".join(lines)


def handle_eval(args: argparse.Namespace) -> int:
    """Run the evaluation described by parsed arguments; prints a report. Returns the exit code."""
    from ..embedders import resolve_embedder
    from ..eval.runner import run_locomo

    if getattr(args, "eval_path", "harness") == "plugin":
        return _handle_plugin(args)
    if getattr(args, "eval_path", "harness") == "agent":
        return _handle_agent(args)
    if getattr(args, "no_dates", False) or getattr(args, "questions", None) is not None:
        raise ConfigurationError("--no-dates and --questions apply to --path plugin and --path agent only")

    model = None
    if args.model:
        model = model_from_args(args)
    result = run_locomo(
        args.data,
        audit_path=args.audit,
        ks=args.k,
        workspace_path=args.workspace,
        embedder=resolve_embedder(getattr(args, "embedder", "auto")),
        limit_conversations=args.limit,
        progress=not args.no_progress,
        model=model,
    )
    return _emit(format_report(result), result, args.json_out)


def _emit(report: str, result: dict[str, Any], json_out: str | None, *, ensure_ascii: bool = True) -> int:
    """Print the report; with ``--json-out`` also write the result there. Returns the exit code (0)."""
    print(report)
    if json_out:
        with open(json_out, "w", encoding="utf-8") as fh:
            json.dump(result, fh, indent=2, ensure_ascii=ensure_ascii)
        print(f"wrote {json_out}")
    return 0


def _handle_plugin(args: argparse.Namespace) -> int:
    from ..eval.plugin_path import run_locomo_plugin

    return _handle_user_path(args, "plugin", "without a model (raw turns, deterministic retrieval)",
                             run_locomo_plugin, format_plugin_report)


def _handle_agent(args: argparse.Namespace) -> int:
    from ..eval.agent_path import format_agent_report, run_locomo_agent

    return _handle_user_path(args, "agent", "without a memory model (scripted agent and selector)",
                             run_locomo_agent, format_agent_report)


def _handle_user_path(args: argparse.Namespace, path: str, runs: str, run: Any, report: Any) -> int:
    """``--path plugin`` / ``--path agent``: import the conversations, ask every question the user's way."""
    from ..embedders import resolve_embedder

    if args.model:
        raise ConfigurationError(f"--path {path} runs {runs}; drop --model")
    result = run(
        args.data, audit_path=args.audit, ks=args.k, workspace_path=args.workspace,
        embedder=resolve_embedder(getattr(args, "embedder", "auto")), limit_conversations=args.limit,
        limit_questions=args.questions, dated=not args.no_dates, progress=not args.no_progress,
    )
    return _emit(report(result), result, args.json_out)
