"""Reconciliation: deletion by absence, for servers that do not keep deletions.

A server whose Identify says deletedRecord `no` or `transient` (and every CSW catalogue) simply
stops listing a record it removed, so no window harvest ever sees the deletion. Reconciliation
lists every identifier upstream (ListIdentifiers, or ListRecords where that fails), stages them in
a DuckDB file, compares with the catalogue's live records and tombstones the ones that are gone:
history action 'deleted', attempt_id 'reconcile:<run_id>', one row in `reconciliations`.

The mass-deletion guard deletes NOTHING when the deletions would exceed
`reconcile.max_delete_fraction` of the source's live records, when the upstream listing is empty
while the catalogue holds live records, or when the listing is shorter than its completeListSize,
unless the run is confirmed (`confirm_mass_deletion`; an incomplete listing is never confirmable).
"""

from __future__ import annotations

import time
import uuid
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import duckdb

from harvest_pipeline.errors import HarvestError
from harvest_pipeline.harvest.budget import TraversalBudget, bind_time_budget
from harvest_pipeline.harvest.listers import Lister, lister_for
from harvest_pipeline.harvest.rows import content_hash
from harvest_pipeline.sources import SourceConfig
from harvest_pipeline.store import connect as store_connect
from harvest_pipeline.store import transaction
from harvest_pipeline.store import ledger
from harvest_pipeline.store import reconcile as store
from harvest_pipeline.store.clock import utcnow

Connect = Callable[[], AbstractContextManager[duckdb.DuckDBPyConnection]]
Progress = Callable[[dict], None]


@dataclass(frozen=True)
class GuardVerdict:
    allowed: bool
    status: str  # store.APPLIED | store.BLOCKED | store.INCOMPLETE
    reason: str


@dataclass
class ReconcileReport:
    source_id: str
    run_id: str
    status: str
    reason: str
    verb: str
    listed: int
    upstream_live: int
    complete_list_size: int | None
    local_live: int
    missing: int
    deleted: int
    max_delete_fraction: float
    confirmed: bool
    examples: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def guard_passed(self) -> bool:
        return self.status == store.APPLIED

    def as_dict(self) -> dict:
        return asdict(self)


def guard(
    *,
    listed: int,
    upstream_live: int,
    complete_list_size: int | None,
    local_live: int,
    missing: int,
    max_delete_fraction: float,
    confirmed: bool,
) -> GuardVerdict:
    """Whether the missing records may be tombstoned (pure; the asset check reports it)."""
    if complete_list_size is not None and listed < complete_list_size:
        return GuardVerdict(
            False, store.INCOMPLETE,
            f"the listing returned {listed} headers but the server announced completeListSize "
            f"{complete_list_size}: an incomplete listing cannot prove anything absent, nothing deleted",
        )
    limit = max_delete_fraction * local_live
    if upstream_live == 0 and local_live > 0:
        reason = (
            f"the server listed no live records while the catalogue holds {local_live}: "
            "a source that briefly serves an empty list must not wipe the catalogue"
        )
    elif missing > limit:
        reason = (
            f"{missing} of {local_live} live records ({missing / local_live:.1%}) are missing upstream, "
            f"more than max_delete_fraction {max_delete_fraction:.0%}"
        )
    else:
        return GuardVerdict(True, store.APPLIED, f"{missing} of {local_live} live records missing upstream: tombstoned")
    if confirmed:
        return GuardVerdict(True, store.APPLIED, reason + "; confirmed by confirm_mass_deletion, tombstoned")
    return GuardVerdict(False, store.BLOCKED, reason + "; nothing deleted, confirm with confirm_mass_deletion: true")


def _tombstone_hash(set_specs: list[str] | None) -> str:
    return content_hash(None, tuple(set_specs or ()), True)


def reconcile_source(
    source: SourceConfig,
    *,
    db_path: str | Path,
    run_id: str | None = None,
    confirm_mass_deletion: bool = False,
    connect: Connect | None = None,
    lister: Lister | None = None,
    progress: Progress | None = None,
) -> ReconcileReport:
    """List `source` upstream, compare with the catalogue at `db_path`, tombstone what is gone."""
    run_id = run_id or uuid.uuid4().hex
    connect = connect or (lambda: store_connect(db_path))
    started = time.monotonic()
    listing_started_at = utcnow()
    listing = store.IdentifierListing(store.listing_path(db_path, source.id))
    try:
        try:
            lister = lister or lister_for(source, state_dir=Path(db_path).parent / "hosts")
            bind_time_budget(lister, source.traversal, started)
            described = lister.describe()
            size, listed = None, 0
            # The listing is a token loop like a window's: same budget, same cycle detection.
            budget = TraversalBudget(source.traversal, started=started)
            for n, page in enumerate(lister.identifiers(), 1):
                if size is None:
                    size = page.resumption.complete_list_size
                budget.check(page, size, n)
                listing.add([r.identifier for r in page.records], [r.deleted for r in page.records])
                listed += len(page.records)
                if progress is not None:
                    progress({"source_id": source.id, "pages": n, "listed": listed, "complete_list_size": size})
        except HarvestError as exc:
            raise exc.with_context(source_id=source.id, window="reconcile", hint="nothing was deleted; run the reconciliation again") from None
        verb = lister.identifiers_verb or "full listing"
        listing.close()

        with connect() as con:
            with transaction(con):
                ledger.record_identify(con, source.id, **{k: described.get(k) for k in ("granularity", "earliest_datestamp", "deleted_record")})
                cmp = store.compare(con, listing.path, source_id=source.id, listing_started_at=listing_started_at)
                verdict = guard(
                    listed=cmp.listed, upstream_live=cmp.upstream_live, complete_list_size=size,
                    local_live=cmp.local_live, missing=cmp.missing,
                    max_delete_fraction=source.reconcile.max_delete_fraction, confirmed=confirm_mass_deletion,
                )
                deleted = 0
                if verdict.allowed and cmp.missing:
                    deleted = store.tombstone_missing(con, source_id=source.id, run_id=run_id, tombstone_hash=_tombstone_hash)
                store.drop_temp_tables(con)
                store.record_reconciliation(
                    con, source_id=source.id, run_id=run_id, status=verdict.status, reason=verdict.reason, verb=verb,
                    listed=cmp.listed, upstream_live=cmp.upstream_live, complete_list_size=size,
                    local_live=cmp.local_live, missing=cmp.missing, deleted=deleted,
                    max_delete_fraction=source.reconcile.max_delete_fraction, confirmed=confirm_mass_deletion,
                    examples=cmp.examples, listing_started_at=listing_started_at,
                )
    finally:
        listing.remove()

    return ReconcileReport(
        source_id=source.id, run_id=run_id, status=verdict.status, reason=verdict.reason, verb=verb,
        listed=cmp.listed, upstream_live=cmp.upstream_live, complete_list_size=size, local_live=cmp.local_live,
        missing=cmp.missing, deleted=deleted, max_delete_fraction=source.reconcile.max_delete_fraction,
        confirmed=confirm_mass_deletion, examples=cmp.examples, seconds=time.monotonic() - started,
    )
