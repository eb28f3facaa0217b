"""Deterministic synthetic corpus for the demo OAI-PMH provider.

The corpus is a rolling window of `days` days ending at `end_day`; every day creates
`records_per_day` records.  Everything about a record (creation second, sets, the time of
its optional update and deletion, its metadata) is a pure function of its identifier and the
seed, so two servers started on different days agree on every overlapping record.

What a harvester sees depends on the provider clock `now`: an event (creation, update,
deletion, or a runtime `touch`/`delete`) is visible only once its time is <= now, and a
record's datestamp is the time of its latest visible event.  Deletions are persistent.

Scale: per record we keep only one int64 sort key per index (datestamp << SHIFT | index);
headers and XML are derived lazily from the index, so a million records fit in tens of MB.
"""

from __future__ import annotations

import calendar
import threading
import time
from array import array
from bisect import bisect_left, bisect_right, insort
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from itertools import chain

ID_PREFIX = "oai:demo.harvest:"
REPOSITORY_IDENTIFIER = "demo.harvest"
DOI_PREFIX = "10.5072/demo."  # 10.5072 is DataCite's test prefix: never resolves to real DOIs
LANDING_BASE = "https://demo.harvest.example/records/"

NS_OAI_DC = "http://www.openarchives.org/OAI/2.0/oai_dc/"
NS_DC = "http://purl.org/dc/elements/1.1/"
NS_OAI_DATACITE = "http://schema.datacite.org/oai/oai-1.1/"
NS_DATACITE = "http://datacite.org/schema/kernel-4"
NS_MODS = "http://www.loc.gov/mods/v3"

# prefix -> (schema, namespace), in the order ListMetadataFormats lists them.
METADATA_FORMATS: dict[str, tuple[str, str]] = {
    "oai_dc": ("http://www.openarchives.org/OAI/2.0/oai_dc.xsd", NS_OAI_DC),
    "oai_datacite": ("http://schema.datacite.org/oai/oai-1.1/oai.xsd", NS_OAI_DATACITE),
    "mods": ("http://www.loc.gov/standards/mods/v3/mods-3-7.xsd", NS_MODS),
}

# (setSpec, setName, description).  physics:optics is a child of physics, so `set=physics`
# also selects optics records (OAI-PMH set hierarchy).
SETS: tuple[tuple[str, str, str], ...] = (
    ("physics", "Physics", "Experimental and theoretical physics data."),
    ("physics:optics", "Optics", "Optics and photonics, a subset of physics."),
    ("history", "History", "Archival and historical research material."),
    ("biology", "Biology", "Field and laboratory data from the life sciences."),
)
_SET_INDEX = {spec: k for k, (spec, _, _) in enumerate(SETS)}

# A "selection" is what `set=` can ask for: 0 = everything, 1 + k = SETS[k] and its children.
_SELECTIONS = ("",) + tuple(spec for spec, _, _ in SETS)


def _selection_mask(specs: tuple[str, ...]) -> int:
    mask = 0
    for sel, want in enumerate(_SELECTIONS):
        if sel and any(s == want or s.startswith(want + ":") for s in specs):
            mask |= 1 << sel
    return mask


# Set combinations a record can get, equally likely (20 slots -> 25% have two sets).
_COMBOS: tuple[tuple[str, ...], ...] = (
    ("physics",),) * 4 + (("physics:optics",),) * 3 + (("history",),) * 4 + (("biology",),) * 4 + (
    ("physics", "history"),
    ("physics:optics", "biology"),
    ("history", "biology"),
    ("physics", "biology"),
    ("physics:optics", "history"),
)
_COMBO_MASKS = tuple(_selection_mask(c) for c in _COMBOS)
_NCOMBO = len(_COMBOS)

DAY = 86400
_M64 = (1 << 64) - 1
_K_SEED = 0x9E3779B97F4A7C15
_K_DAY = 0xD1B54A32D192ED03
_K_N = 0xABC98388FB8FAC03
_K_DEL = 0x6A09E667F3BCC909
_K_TEXT = 0xBB67AE8584CAA73B
_UPD_SPAN = 39 * DAY  # updates land 1..40 days after creation
_DEL_SPAN = 30 * DAY  # deletions land 1 hour..30 days after the last event
_EPOCH_ORD = date(1970, 1, 1).toordinal()


def _mix(z: int) -> int:
    """splitmix64 finalizer: a cheap, well-spread 64-bit hash (kept inline in the hot loop)."""
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def to_epoch(value: datetime | date | int | float | str | None, *, end_of_day: bool = False) -> int | None:
    """Seconds since the epoch (UTC) for the many ways tests and CLI give a time.

    Strings may be `YYYY-MM-DD` (start of day, or its last second with end_of_day) or ISO
    datetimes (`Z` or offset; naive means UTC).
    """
    if value is None:
        return None
    if isinstance(value, bool):
        raise TypeError("not a time: bool")
    if isinstance(value, (int, float)):
        return int(value)
    if isinstance(value, str):
        s = value.strip()
        if len(s) == 10:
            value = date.fromisoformat(s)
        else:
            value = datetime.fromisoformat(s[:-1] + "+00:00" if s.endswith("Z") else s)
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        return calendar.timegm(value.utctimetuple())
    if isinstance(value, date):
        return (value.toordinal() - _EPOCH_ORD) * DAY + (DAY - 1 if end_of_day else 0)
    raise TypeError(f"not a time: {value!r}")


def format_ts(ts: int, day: bool = False) -> str:
    """OAI-PMH UTCdatetime: `YYYY-MM-DDThh:mm:ssZ`, or `YYYY-MM-DD` for day granularity."""
    t = time.gmtime(ts)
    if day:
        return f"{t.tm_year:04d}-{t.tm_mon:02d}-{t.tm_mday:02d}"
    return f"{t.tm_year:04d}-{t.tm_mon:02d}-{t.tm_mday:02d}T{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d}Z"


def xml_escape(s: str) -> str:
    """Escape for XML text and double-quoted attributes (faster than a generic escaper)."""
    if "&" in s:
        s = s.replace("&", "&amp;")
    if "<" in s:
        s = s.replace("<", "&lt;")
    if ">" in s:
        s = s.replace(">", "&gt;")
    if '"' in s:
        s = s.replace('"', "&quot;")
    return s


@dataclass(frozen=True)
class CorpusConfig:
    """Shape of the synthetic corpus; equal configs (and clocks) give identical corpora."""

    days: int = 90
    records_per_day: int = 150
    end_day: date | None = None  # None: the day of the provider clock (today, UTC)
    seed: int = 20261001

    def __post_init__(self) -> None:
        if self.days < 1:
            raise ValueError("days must be >= 1")
        if self.records_per_day < 1:
            raise ValueError("records_per_day must be >= 1")
        if isinstance(self.end_day, str):
            object.__setattr__(self, "end_day", date.fromisoformat(self.end_day))


@dataclass(slots=True)
class RecordView:
    """One record as visible at the provider clock: what a header and metadata are built from."""

    identifier: str
    datestamp: int  # epoch seconds of the latest visible event
    deleted: bool
    version: int  # 1 = original, +1 per visible update/touch
    set_specs: tuple[str, ...]
    created: int  # epoch seconds
    day: str  # creation day YYYY-MM-DD
    n: int  # number within its day
    h: int  # content hash (pure function of the identifier)


class _Draw:
    """Deterministic stream of small random choices from one 64-bit seed (cheaper than random.Random)."""

    __slots__ = ("_h", "_k", "_seed")

    def __init__(self, seed: int):
        self._seed = seed
        self._k = 0
        self._h = _mix(seed)

    def __call__(self, n: int) -> int:
        if self._h < (1 << 24):
            self._k += 1
            self._h = _mix((self._seed + self._k * _K_SEED) & _M64)
        self._h, v = divmod(self._h, n)
        return v

    def pick(self, seq):
        return seq[self(len(seq))]


def _pre(seq):
    """Vocabulary is escaped once at import so rendering needs no per-record escaping."""
    return tuple(xml_escape(s) for s in seq)


_ADJ = _pre(["Longitudinal", "Comparative", "High-resolution", "Experimental", "Long-term", "Annotated",
             "Multi-site", "Exploratory", "Calibrated", "Open"])
_TOPICS = {
    "physics": _pre(["Quantum Transport", "Neutron Scattering", "Plasma Turbulence", "Superconductivity",
                     "Gravitational Lensing", "Größenabhängige Effekte", "Cosmic-Ray Showers"]),
    "physics:optics": _pre(["Photonic Crystals", "Laser Spectroscopy", "Adaptive Optics", "Nonlinear Optics",
                            "光学 Metamaterials", "Fibre Interferometry"]),
    "history": _pre(["Medieval Trade Routes", "Hanseatic Correspondence", "Parish Registers",
                     "Colonial Cartography", "Édits royaux", "Guild Account Books"]),
    "biology": _pre(["Soil Microbiomes", "Coral Reef Resilience", "Gene Regulation", "Pollinator Decline",
                     "Bäume & Pilze", "Alpine Flora"]),
}
_SUBJECTS = {
    "physics": _pre(["Physics", "Condensed matter", "Particle physics", "Thermodynamics"]),
    "physics:optics": _pre(["Optics", "Photonics", "Lasers", "Spectroscopy"]),
    "history": _pre(["History", "Archival science", "Economic history", "Palaeography"]),
    "biology": _pre(["Biology", "Ecology", "Genetics", "Microbiology"]),
}
# (name, lon, lat) used for titles and geoLocationBox.
_PLACES = (("Zürich", 8.54, 47.37), ("Montréal", -73.57, 45.50), ("Göttingen", 9.93, 51.54),
           ("東京", 139.69, 35.69), ("Straßburg", 7.75, 48.57), ("São Paulo", -46.63, -23.55),
           ("Reykjavík", -21.94, 64.15), ("Nairobi", 36.82, -1.29), ("Lund", 13.19, 55.70),
           ("Kyōto", 135.77, 35.01))
_PLACE_NAMES = _pre([p[0] for p in _PLACES])
# (family, given)
_PEOPLE = (("Müller", "Anna"), ("Dupré", "Élodie"), ("Strauß", "Heinrich"), ("田中", "花子"),
           ("Nakamura", "Yuki"), ("O'Brien", "Siobhán"), ("García", "Lucía"), ("Smith", "John"),
           ("Kowalski", "Piotr"), ("Nguyễn", "Văn An"), ("Okafor", "Chiamaka"), ("Johansson", "Björn"),
           ("Chen", "Wei"), ("Schäfer", "Jürgen"))


def _orcid(k: int) -> str:
    """A syntactically valid ORCID (ISO 7064 11,2 check digit), stable per person."""
    digits = f"0000000{(_mix(k + 17) % 90_000_000) + 10_000_000:08d}"
    total = 0
    for ch in digits:
        total = (total + int(ch)) * 2
    c = (12 - total % 11) % 11
    s = digits + ("X" if c == 10 else str(c))
    return f"https://orcid.org/{s[0:4]}-{s[4:8]}-{s[8:12]}-{s[12:16]}"


_PEOPLE_X = tuple((xml_escape(f"{fam}, {giv}"), xml_escape(giv), xml_escape(fam), _orcid(k))
                  for k, (fam, giv) in enumerate(_PEOPLE))
_LANGS = ("en", "en", "en", "de", "fr", "ja")
_RIGHTS = (("Creative Commons Attribution 4.0 International", "https://creativecommons.org/licenses/by/4.0/"),
           ("Creative Commons Zero v1.0 Universal", "https://creativecommons.org/publicdomain/zero/1.0/"))
_PUBLISHER = "Demo Harvest Repository"


class Corpus:
    """The provider's data: an index by (datestamp, identifier) plus runtime mutations.

    Thread-safe: every public method takes the corpus lock.
    """

    def __init__(self, config: CorpusConfig | None = None, now: datetime | date | int | str | None = None,
                 *, compact_threshold: int | None = None):
        self.config = config or CorpusConfig()
        self._lock = threading.RLock()
        self._frozen = to_epoch(now)
        start = self.now_ts()
        end_day = self.config.end_day or datetime.fromtimestamp(start, timezone.utc).date()
        self.end_day: date = end_day
        self.first_day: date = end_day - timedelta(days=self.config.days - 1)
        self._first_ord = self.first_day.toordinal()
        self._rpd = self.config.records_per_day
        self.size = self.config.days * self._rpd  # identifiers in the window (visible or not yet)
        # Width of the per-day number: ids sort lexicographically exactly like (day, n).
        self._width = max(5, len(str(self._rpd - 1)))
        self._shift = max(1, (self.size - 1).bit_length())
        self._imask = (1 << self._shift) - 1
        self._seed_term = (self.config.seed * _K_SEED) & _M64
        # Runtime mutations: index -> [(time, seq, "T"|"D")]; folded with the corpus's own events.
        self._admin: dict[int, list[tuple[int, int, str]]] = {}
        self._seq = 0  # runtime mutation counter (see mutation_seq)
        self._last_seq: dict[int, int] = {}  # index -> seq of its latest runtime mutation
        # Overlay entries live until the next compaction (full rebuild of the sorted index).
        self._compact_threshold = compact_threshold or max(1024, self.size // 32)
        self._build(start)

    # ---- clock -------------------------------------------------------------------------

    def now_ts(self) -> int:
        """Provider clock in epoch seconds: frozen if set, else wall time."""
        return self._frozen if self._frozen is not None else int(time.time())

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.now_ts(), timezone.utc)

    @property
    def frozen(self) -> bool:
        return self._frozen is not None

    def set_now(self, value: datetime | date | int | str | None) -> None:
        """Freeze the clock at `value` (or return to wall time with None). Only forward: the
        index has already absorbed events up to the current clock."""
        with self._lock:
            ts = to_epoch(value)
            target = ts if ts is not None else int(time.time())
            if target < self._applied:
                raise ValueError(f"the clock cannot go back before {format_ts(self._applied)}")
            self._frozen = ts
            self._advance(target)

    # ---- identifiers -------------------------------------------------------------------

    def identifier(self, i: int) -> str:
        d, n = divmod(i, self._rpd)
        return f"{ID_PREFIX}{date.fromordinal(self._first_ord + d).isoformat()}/{n:0{self._width}d}"

    def _parse(self, identifier: str) -> tuple[int, int] | None:
        """(day ordinal, n) of a well-formed identifier, whatever the window; else None."""
        if not isinstance(identifier, str) or not identifier.startswith(ID_PREFIX):
            return None
        rest = identifier[len(ID_PREFIX):]
        day_s, sep, n_s = rest.partition("/")
        if not sep or len(day_s) != 10 or not n_s.isdigit() or not n_s.isascii():
            return None
        try:
            d = date.fromisoformat(day_s)
        except ValueError:
            return None
        return d.toordinal(), int(n_s)

    def index_of(self, identifier: str) -> int | None:
        """Index of an identifier of this window (canonical spelling only), else None."""
        p = self._parse(identifier)
        if p is None:
            return None
        dord, n = p
        d = dord - self._first_ord
        if not (0 <= d < self.config.days and 0 <= n < self._rpd):
            return None
        i = d * self._rpd + n
        return i if self.identifier(i) == identifier else None

    def _position_after(self, ds: int, identifier: str) -> int:
        """Smallest sort key strictly after (ds, identifier), even for ids outside the window."""
        p = self._parse(identifier)
        if p is None:
            return (ds << self._shift) + self._imask + 1  # unknown: treat as the last id of that second
        dord, n = p
        d = dord - self._first_ord
        if d < 0:
            return ds << self._shift
        if d >= self.config.days:
            return (ds + 1) << self._shift
        return (ds << self._shift) + d * self._rpd + min(n, self._rpd - 1) + 1

    # ---- per-record pure functions ------------------------------------------------------

    def _hash(self, i: int) -> tuple[int, int]:
        d, n = divmod(i, self._rpd)
        dord = self._first_ord + d
        z = (self._seed_term + dord * _K_DAY + n * _K_N) & _M64
        return _mix(z), dord

    def _events(self, i: int) -> tuple[int, int, int, int]:
        """(created, updated or 0, deleted or 0, combo) -- must match the loop in _build."""
        z, dord = self._hash(i)
        r, sec = divmod(z, DAY)
        created = (dord - _EPOCH_ORD) * DAY + sec
        r, kind = divmod(r, 100)
        r, dk = divmod(r, 25)
        r, combo = divmod(r, _NCOMBO)
        upd = created + DAY + r % _UPD_SPAN if kind < 20 else 0
        dele = (upd or created) + 3600 + _mix(z ^ _K_DEL) % _DEL_SPAN if dk == 0 else 0
        return created, upd, dele, combo

    def _fold(self, i: int, t: int) -> tuple[int, bool, int] | None:
        """(datestamp, deleted, version) of record i at time t; None if not created yet."""
        created, upd, dele, _ = self._events(i)
        if created > t:
            return None
        adm = self._admin.get(i)
        if not adm:
            if dele and dele <= t:
                return dele, True, 2 if upd else 1  # upd < dele always
            if upd and upd <= t:
                return upd, False, 2
            return created, False, 1
        evs = [(created, 0, "c")]
        if upd:
            evs.append((upd, 0, "u"))
        if dele:
            evs.append((dele, 0, "d"))
        evs.extend(adm)
        evs.sort()
        ds, deleted, version = created, False, 0
        for et, _, kind in evs:
            if et > t:
                break
            if kind == "c":
                version = 1
            elif kind == "u":
                if not deleted:  # deletion is persistent: a later corpus update cannot revive
                    ds, version = et, version + 1
            elif kind == "T":  # runtime touch: new version, revives a deleted record
                ds, deleted, version = et, False, version + 1
            elif not deleted:  # "d" / "D"
                ds, deleted = et, True
        return ds, deleted, version

    def _key(self, i: int, t: int) -> tuple[int | None, bool]:
        st = self._fold(i, t)
        if st is None:
            return None, False
        return (st[0] << self._shift) | i, st[1]

    def _view(self, i: int, st: tuple[int, bool, int]) -> RecordView:
        z, dord = self._hash(i)
        created, _, _, combo = self._events(i)
        n = i % self._rpd
        return RecordView(self.identifier(i), st[0], st[1], st[2], _COMBOS[combo], created,
                          date.fromordinal(dord).isoformat(), n, z)

    # ---- index -------------------------------------------------------------------------

    def _build(self, t: int) -> None:
        """(Re)build the sorted index as of time t; events after t go to the pending list."""
        rpd, shift = self._rpd, self._shift
        admin = self._admin
        keys = [[] for _ in range(_NCOMBO)]
        dels = [[] for _ in range(_NCOMBO)]
        pending: list[int] = []
        kappend = [k.append for k in keys]
        dappend = [k.append for k in dels]
        pappend = pending.append
        seed_term, m64 = self._seed_term, _M64
        for d in range(self.config.days):
            dord = self._first_ord + d
            day0 = (dord - _EPOCH_ORD) * DAY
            base = (seed_term + dord * _K_DAY) & m64
            ibase = d * rpd
            for n in range(rpd):
                # Inline copy of _hash/_events/_fold (a function call per record doubles build time).
                z = (base + n * _K_N) & m64
                z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & m64
                z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m64
                z ^= z >> 31
                r, sec = divmod(z, DAY)
                created = day0 + sec
                r, kind = divmod(r, 100)
                r, dk = divmod(r, 25)
                r, combo = divmod(r, _NCOMBO)
                i = ibase + n
                if admin and i in admin:
                    k, deleted = self._key(i, t)
                    if k is not None:
                        kappend[combo](k)
                        if deleted:
                            dappend[combo](k)
                    for et in self._event_times(i):
                        if et > t:
                            pappend((et << shift) | i)
                    continue
                upd = created + DAY + r % _UPD_SPAN if kind < 20 else 0
                if dk == 0:
                    dele = (upd or created) + 3600 + _mix(z ^ _K_DEL) % _DEL_SPAN
                    if dele <= t:
                        k = (dele << shift) | i
                        kappend[combo](k)
                        dappend[combo](k)
                        continue
                    pappend((dele << shift) | i)
                if created > t:
                    pappend((created << shift) | i)
                    if upd:
                        pappend((upd << shift) | i)
                    continue
                if upd:
                    if upd <= t:
                        kappend[combo]((upd << shift) | i)
                        continue
                    pappend((upd << shift) | i)
                kappend[combo]((created << shift) | i)
        self._base: list[array] = []
        self._base_del: list[array] = []
        for sel in range(len(_SELECTIONS)):
            bit = 1 << sel
            use = [c for c in range(_NCOMBO) if sel == 0 or _COMBO_MASKS[c] & bit]
            merged = list(chain.from_iterable(keys[c] for c in use))
            merged.sort()
            self._base.append(array("q", merged))
            merged = list(chain.from_iterable(dels[c] for c in use))
            merged.sort()
            self._base_del.append(array("q", merged))
        del keys, dels, merged
        pending.sort()
        self._pending = array("q", pending)
        self._ppos = 0
        self._applied = t  # events up to here are in the index
        # index -> (base key, base deleted, current key, current deleted, selection mask)
        self._moved: dict[int, tuple[int | None, bool, int | None, bool, int]] = {}
        self._ov: list[int] = []  # sorted current keys of moved records

    def _event_times(self, i: int) -> list[int]:
        created, upd, dele, _ = self._events(i)
        out = [created] + [x for x in (upd, dele) if x]
        out.extend(a for a, _, _ in self._admin.get(i, ()))
        return out

    def _relocate(self, i: int, before: tuple[int | None, bool], after: tuple[int | None, bool]) -> None:
        """Record i moved in the index; `before` is its key before the change (used only the first time)."""
        ent = self._moved.get(i)
        if ent is None:
            bk, bdel = before
            mask = _COMBO_MASKS[self._events(i)[3]]
        else:
            bk, bdel, ok, _, mask = ent
            if ok is not None:
                j = bisect_left(self._ov, ok)
                del self._ov[j]
        nk, ndel = after
        if nk is not None:
            insort(self._ov, nk)
        self._moved[i] = (bk, bdel, nk, ndel, mask)

    def _advance(self, now: int | None = None) -> None:
        """Absorb corpus events that became visible since the last call."""
        now = self.now_ts() if now is None else now
        if now <= self._applied:
            return
        p, pos, lim = self._pending, self._ppos, (now + 1) << self._shift
        end = bisect_left(p, lim, pos)
        seen = set()
        for k in p[pos:end]:
            i = k & self._imask
            if i in seen:
                continue
            seen.add(i)
            before = self._key(i, self._applied) if i not in self._moved else (None, False)
            self._relocate(i, before, self._key(i, now))
        self._ppos = end
        self._applied = now
        self._maybe_compact()

    def _maybe_compact(self) -> None:
        if len(self._moved) > self._compact_threshold:
            self._build(self._applied)

    def _sel(self, set_spec: str | None) -> int | None:
        if not set_spec:
            return 0
        k = _SET_INDEX.get(set_spec)
        return None if k is None else k + 1

    def _scan(self, sel: int, start: int, hi: int, limit: int, snapshot: int | None = None) -> list[int]:
        """Up to `limit` sort keys in [start, hi] of selection sel: base index merged with overlay.

        With `snapshot`, records mutated at runtime after that mutation_seq are skipped."""
        base, moved, ov = self._base[sel], self._moved, self._ov
        last_seq = self._last_seq if snapshot is not None and self._seq > snapshot else None
        imask, bit = self._imask, 1 << sel
        j, nb = bisect_left(base, start), len(base)
        k, no = bisect_left(ov, start), len(ov)
        out: list[int] = []
        b = o = None
        while len(out) < limit:
            if b is None:
                while j < nb:
                    x = base[j]
                    j += 1
                    if x > hi:
                        j = nb
                        break
                    if (x & imask) not in moved:  # moved records are served from the overlay
                        if last_seq and last_seq.get(x & imask, 0) > snapshot:
                            continue
                        b = x
                        break
            if o is None:
                while k < no:
                    x = ov[k]
                    k += 1
                    if x > hi:
                        k = no
                        break
                    if sel == 0 or moved[x & imask][4] & bit:
                        if last_seq and last_seq.get(x & imask, 0) > snapshot:
                            continue
                        o = x
                        break
            if b is None and o is None:
                break
            if o is None or (b is not None and b < o):
                out.append(b)
                b = None
            else:
                out.append(o)
                o = None
        return out

    def _counts(self, sel: int, lo: int, hi: int) -> tuple[int, int]:
        """(total, deleted) with sort key in [lo, hi]: O(log n + overlay)."""
        base, bdel = self._base[sel], self._base_del[sel]
        total = bisect_right(base, hi) - bisect_left(base, lo)
        deleted = bisect_right(bdel, hi) - bisect_left(bdel, lo)
        bit = 1 << sel
        for bk, bd, nk, nd, mask in self._moved.values():
            if sel and not mask & bit:
                continue
            if bk is not None and lo <= bk <= hi:
                total -= 1
                deleted -= bd
            if nk is not None and lo <= nk <= hi:
                total += 1
                deleted += nd
        return total, deleted

    def _range(self, from_ts: int | None, until_ts: int | None) -> tuple[int, int]:
        lo = 0 if from_ts is None else max(0, from_ts) << self._shift
        hi = (1 << 62) if until_ts is None else ((until_ts + 1) << self._shift) - 1
        return lo, hi

    # ---- queries -----------------------------------------------------------------------

    def known_set(self, set_spec: str | None) -> bool:
        return self._sel(set_spec) is not None

    def count(self, from_ts: int | None = None, until_ts: int | None = None, set_spec: str | None = None) -> int:
        """Records (live + deleted) whose datestamp is in [from_ts, until_ts], inclusive."""
        with self._lock:
            self._advance()
            sel = self._sel(set_spec)
            if sel is None:
                return 0
            return self._counts(sel, *self._range(from_ts, until_ts))[0]

    @property
    def mutation_seq(self) -> int:
        """Counter of runtime touch/delete calls; pass it back as `snapshot` to list_page."""
        return self._seq

    def list_page(self, from_ts: int | None, until_ts: int | None, set_spec: str | None,
                  after: tuple[int, str] | None, limit: int, snapshot: int | None = None) -> list[RecordView]:
        """Records ordered by (datestamp, identifier) in the inclusive window, strictly after the
        keyset position `after` = (datestamp, identifier) of the last record already returned.

        `snapshot` (a mutation_seq taken when a traversal began) hides records touched/deleted
        at runtime since then: with a frozen clock their new datestamp can equal the window's
        upper bound, and they would otherwise be listed a second time."""
        with self._lock:
            self._advance()
            sel = self._sel(set_spec)
            if sel is None:
                return []
            lo, hi = self._range(from_ts, until_ts)
            if after is not None:
                lo = max(lo, self._position_after(*after))
            out = []
            for k in self._scan(sel, lo, hi, limit, snapshot):
                i = k & self._imask
                out.append(self._view(i, self._fold(i, self._applied)))
            return out

    def get(self, identifier: str) -> RecordView | None:
        """The record if it is visible now (deleted ones too), else None."""
        with self._lock:
            self._advance()
            i = self.index_of(identifier)
            if i is None:
                return None
            st = self._fold(i, self._applied)
            return None if st is None else self._view(i, st)

    def earliest_datestamp(self) -> int | None:
        with self._lock:
            self._advance()
            keys = self._scan(0, 0, 1 << 62, 1)
            return keys[0] >> self._shift if keys else None

    def stats(self, until=None, from_=None, set_spec: str | None = None) -> dict:
        """Counts by current visible state: total = live + deleted with datestamp in [from_, until].

        from_/until: datetime, date, epoch seconds or ISO string (a bare day for `until`
        means its last second)."""
        f, u = to_epoch(from_), to_epoch(until, end_of_day=True)
        with self._lock:
            self._advance()
            sel = self._sel(set_spec)
            total, deleted = (0, 0) if sel is None else self._counts(sel, *self._range(f, u))
            earliest = self.earliest_datestamp()
            return {
                "total": total,
                "live": total - deleted,
                "deleted": deleted,
                "from": None if f is None else format_ts(f),
                "until": None if u is None else format_ts(u),
                "set": set_spec or None,
                "now": format_ts(self.now_ts()),
                "earliest": None if earliest is None else format_ts(earliest),
            }

    # ---- runtime mutations -------------------------------------------------------------

    def _mutate(self, identifier: str, at, kind: str) -> RecordView:
        with self._lock:
            self._advance()
            i = self.index_of(identifier)
            if i is None or self._fold(i, self._applied) is None:
                raise KeyError(identifier)
            t = self.now_ts() if at is None else to_epoch(at)
            if t > self._applied:
                raise ValueError("cannot schedule a change in the future of the provider clock")
            if t < self._events(i)[0]:
                raise ValueError("cannot change a record before its creation")
            before = self._key(i, self._applied) if i not in self._moved else (None, False)
            self._seq += 1
            self._admin.setdefault(i, []).append((t, self._seq, kind))
            self._last_seq[i] = self._seq
            self._relocate(i, before, self._key(i, self._applied))
            view = self._view(i, self._fold(i, self._applied))
            self._maybe_compact()
            return view

    def touch(self, identifier: str, at=None) -> RecordView:
        """New version of a record with datestamp `at` (default: now); revives a deleted record.
        KeyError if the identifier is unknown or not created yet."""
        return self._mutate(identifier, at, "T")

    def delete(self, identifier: str, at=None) -> RecordView:
        """Mark a record deleted at `at` (default: now); a no-op if it is already deleted."""
        return self._mutate(identifier, at, "D")

    # ---- metadata ----------------------------------------------------------------------

    def render(self, view: RecordView, prefix: str) -> str:
        """The single child of <metadata> for a live record, as an XML string."""
        if prefix == "oai_dc":
            return render_oai_dc(view)
        if prefix == "oai_datacite":
            return render_oai_datacite(view)
        if prefix == "mods":
            return render_mods(view)
        raise KeyError(prefix)


class _Content:
    """The descriptive fields of one record version, drawn deterministically from its hash."""

    __slots__ = ("title", "lang", "creators", "subjects", "description", "rights", "place", "box",
                 "rtype", "doi", "landing", "primary")

    def __init__(self, v: RecordView):
        draw = _Draw(v.h ^ _K_TEXT)
        specs = v.set_specs
        self.primary = specs[0]
        top = self.primary
        place_k = draw(len(_PLACES))
        self.place = _PLACE_NAMES[place_k]
        title = f"{draw.pick(_ADJ)} Study of {draw.pick(_TOPICS[top])} in {self.place}"
        if v.version > 1:
            title += f" (revised, version {v.version})"
        self.title = title
        self.lang = draw.pick(_LANGS)
        ncreators = 2 + draw(2)
        first = draw(len(_PEOPLE_X))
        step = 1 + draw(len(_PEOPLE_X) - 1)  # distinct people: step through the list
        self.creators = [_PEOPLE_X[(first + j * step) % len(_PEOPLE_X)] for j in range(ncreators)]
        subj = [draw.pick(_SUBJECTS[s]) for s in specs]
        extra = draw.pick(_SUBJECTS[self.primary])
        if extra not in subj:
            subj.append(extra)
        self.subjects = subj
        size = 50 + draw(950)
        err = 1 + draw(9)
        desc = (f"{draw.pick(_ADJ)} data set on {_TOPICS[top][draw(len(_TOPICS[top]))]} collected near "
                f"{self.place}; sample sizes &lt; {size} &amp; uncertainties ≤ {err} %.")
        if v.version > 1:
            desc = f"Revised version {v.version}: corrected calibration. " + desc
        self.description = desc
        self.rights = _RIGHTS[draw(len(_RIGHTS))]
        if draw(3) == 0:
            _, lon, lat = _PLACES[place_k]
            half = 0.05 + draw(50) / 100
            self.box = (lon - half, lon + half, lat - half, lat + half)
        else:
            self.box = None
        self.rtype = "Text" if self.primary == "history" else "Dataset"
        self.doi = f"{DOI_PREFIX}{v.day}.{v.n:05d}"
        self.landing = f"{LANDING_BASE}{v.day}/{v.n:05d}"


_DC_OPEN = (f'<oai_dc:dc xmlns:oai_dc="{NS_OAI_DC}" xmlns:dc="{NS_DC}" '
            'xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" '
            f'xsi:schemaLocation="{NS_OAI_DC} http://www.openarchives.org/OAI/2.0/oai_dc.xsd">')


def render_oai_dc(v: RecordView) -> str:
    c = _Content(v)
    parts = [_DC_OPEN, f"<dc:title>{c.title}</dc:title>"]
    parts.extend(f"<dc:creator>{cr[0]}</dc:creator>" for cr in c.creators)
    parts.extend(f"<dc:subject>{s}</dc:subject>" for s in c.subjects)
    parts.append(f"<dc:description>{c.description}</dc:description>")
    parts.append(f"<dc:publisher>{_PUBLISHER}</dc:publisher>")
    parts.append(f"<dc:date>{format_ts(v.created, True)}</dc:date>")
    parts.append(f"<dc:type>{c.rtype}</dc:type>")
    parts.append(f"<dc:identifier>{c.landing}</dc:identifier>")
    parts.append(f"<dc:identifier>https://doi.org/{c.doi}</dc:identifier>")
    parts.append(f"<dc:language>{c.lang}</dc:language>")
    parts.append(f"<dc:rights>{c.rights[0]}</dc:rights><dc:rights>{c.rights[1]}</dc:rights>")
    parts.append("</oai_dc:dc>")
    return "".join(parts)


_DATACITE_OPEN = (f'<oai_datacite xmlns="{NS_OAI_DATACITE}" '
                  'xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" '
                  f'xsi:schemaLocation="{NS_OAI_DATACITE} http://schema.datacite.org/oai/oai-1.1/oai.xsd">'
                  "<schemaVersion>4</schemaVersion><datacentreSymbol>DEMO.HARVEST</datacentreSymbol><payload>"
                  f'<resource xmlns="{NS_DATACITE}" xsi:schemaLocation="{NS_DATACITE} '
                  'http://schema.datacite.org/meta/kernel-4/metadata.xsd">')


def render_oai_datacite(v: RecordView) -> str:
    c = _Content(v)
    p = [_DATACITE_OPEN, f'<identifier identifierType="DOI">{c.doi}</identifier><creators>']
    for name, given, family, orcid in c.creators:
        p.append(f'<creator><creatorName nameType="Personal">{name}</creatorName><givenName>{given}</givenName>'
                 f'<familyName>{family}</familyName><nameIdentifier nameIdentifierScheme="ORCID" '
                 f'schemeURI="https://orcid.org">{orcid}</nameIdentifier></creator>')
    p.append(f'</creators><titles><title xml:lang="{c.lang}">{c.title}</title></titles>'
             f"<publisher>{_PUBLISHER}</publisher><publicationYear>{v.day[:4]}</publicationYear><subjects>")
    p.extend(f"<subject>{s}</subject>" for s in c.subjects)
    p.append(f'</subjects><dates><date dateType="Created">{format_ts(v.created, True)}</date>')
    if v.version > 1:
        p.append(f'<date dateType="Updated">{format_ts(v.datestamp, True)}</date>')
    p.append(f'</dates><language>{c.lang}</language>'
             f'<resourceType resourceTypeGeneral="{c.rtype}">{c.rtype}</resourceType>'
             f"<version>{v.version}</version>"
             f'<rightsList><rights rightsURI="{c.rights[1]}">{c.rights[0]}</rights></rightsList>'
             f'<descriptions><description descriptionType="Abstract">{c.description}</description></descriptions>')
    if c.box is not None:
        w, e, s, n = c.box
        p.append(f"<geoLocations><geoLocation><geoLocationPlace>{c.place}</geoLocationPlace><geoLocationBox>"
                 f"<westBoundLongitude>{w:.4f}</westBoundLongitude><eastBoundLongitude>{e:.4f}</eastBoundLongitude>"
                 f"<southBoundLatitude>{s:.4f}</southBoundLatitude><northBoundLatitude>{n:.4f}</northBoundLatitude>"
                 "</geoLocationBox></geoLocation></geoLocations>")
    p.append("</resource></payload></oai_datacite>")
    return "".join(p)


_MODS_OPEN = (f'<mods xmlns="{NS_MODS}" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" version="3.7" '
              f'xsi:schemaLocation="{NS_MODS} http://www.loc.gov/standards/mods/v3/mods-3-7.xsd">')


def render_mods(v: RecordView) -> str:
    """The record as MODS 3.7, the way library repositories send it: the collection it belongs to
    as a host `relatedItem` before the record's own title and names."""
    c = _Content(v)
    p = [_MODS_OPEN, f'<relatedItem type="host"><titleInfo><title>{_PUBLISHER} collection</title></titleInfo>'
                     f"<name><namePart>{_PUBLISHER}</namePart></name></relatedItem>",
         f"<titleInfo><title>{c.title}</title></titleInfo>"]
    for _, given, family, orcid in c.creators:
        p.append(f'<name type="personal"><namePart type="family">{family}</namePart><namePart type="given">{given}'
                 f'</namePart><nameIdentifier type="orcid">{orcid}</nameIdentifier>'
                 '<role><roleTerm type="code" authority="marcrelator">aut</roleTerm></role></name>')
    p.append("<typeOfResource>text</typeOfResource>" if c.rtype == "Text"
             else '<genre authority="datacite">Dataset</genre>')
    p.append(f'<originInfo><publisher>{_PUBLISHER}</publisher>'
             f'<dateCreated encoding="w3cdtf" keyDate="yes">{format_ts(v.created, True)}</dateCreated>')
    if v.version > 1:
        p.append(f'<dateModified encoding="w3cdtf">{format_ts(v.datestamp, True)}</dateModified>')
    p.append(f'</originInfo><language><languageTerm type="code" authority="rfc5646">{c.lang}</languageTerm></language>'
             f"<abstract>{c.description}</abstract>")
    p.extend(f"<subject><topic>{s}</topic></subject>" for s in c.subjects)
    p.append(f'<identifier type="doi">{c.doi}</identifier>'
             f'<location><url usage="primary display" access="object in context">{c.landing}</url></location>'
             f'<accessCondition type="use and reproduction">{c.rights[0]}</accessCondition></mods>')
    return "".join(p)
