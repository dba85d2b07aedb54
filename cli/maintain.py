"""`lb maintain`: document, compact and vacuum the Delta tables (jobs/hygiene.py)."""

from __future__ import annotations

import argparse
from typing import Any

from conf.settings import Settings


def _cmd_maintain(args: argparse.Namespace, settings: Settings) -> int:
    from cli.quiet import quiet_spark
    from jobs.hygiene import protected_published_at, run_maintenance
    from jobs.retention import RetentionUnsafe, base_generations
    from jobs.tables import GOLD_MANIFEST, extract_published
    from serving.awards import award_generations

    spark = quiet_spark(settings, "maintain")
    published = extract_published(spark, settings.delta_dir / GOLD_MANIFEST)
    vacuum = not args.no_vacuum
    protected = {r.generation for r in published[-settings.retained_generations :]}
    protected |= award_generations(settings.data_dir)
    try:
        protected |= base_generations(settings)
    except RetentionUnsafe as exc:
        print(f"not vacuuming: {exc}")
        vacuum = False
    times = protected_published_at(
        {r.generation: r.manifest_json for r in published}, protected
    )
    report = run_maintenance(
        spark, settings.delta_dir, times, optimize=not args.no_optimize, vacuum=vacuum
    )
    print(
        f"retention {report.retention_hours} h (protects {len(protected)} generations)"
    )
    for table, entry in report.tables.items():
        print(f"{table}: {entry}")
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "maintain",
        help="document, compact (OPTIMIZE) and VACUUM the Delta tables",
        description=(
            "Set each Delta table's comment, column comments and retention "
            "properties from docs/TABLES.md, compact small files (OPTIMIZE) and "
            "VACUUM with a retention that keeps the table versions of every retained, "
            "rebase-base and award generation readable by time travel."
        ),
        epilog="examples:\n  lb maintain\n  lb maintain --no-vacuum",
    )
    p.add_argument("--no-optimize", action="store_true", help="skip OPTIMIZE")
    p.add_argument("--no-vacuum", action="store_true", help="skip VACUUM")
    p.set_defaults(func=_cmd_maintain)
