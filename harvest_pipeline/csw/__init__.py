"""OGC CSW 2.0.2 client for harvesting catalogues (requests + lxml, no Dagster).

    from harvest_pipeline.csw import CSWClient, WindowConstraint, CSW_NS
    client = CSWClient("https://example.org/csw")
    client.get_capabilities()            # operations, outputSchemas, typeNames, page-size cap
    client.get_records_pages(type_names="csw:Record", output_schema=CSW_NS,
                             constraint=WindowConstraint(start, end, "dct:modified"), page_size=100)
    client.get_record_by_id(["id-1", "id-2"])
    client.list_identifiers()            # every identifier (brief records, paged), for reconciliation

Pages are the same :class:`~harvest_pipeline.pages.ListPage` the OAI-PMH client yields,
so a CSW source goes through the same window pipeline (staging, merge, checks):
``next_token`` is ``str(nextRecord)`` (the durable cursor), ``complete_list_size`` is the first
page's ``numberOfRecordsMatched``. Request building and the window filter: :mod:`.build`;
response reading: :mod:`.parse`; paging rules and guards: :mod:`.client`.

Why not OWSLib
--------------
OWSLib is the ecosystem's CSW library, and it was checked for this job (its ``csw`` module and
``fes`` filter builders). It is **not** used, and is not a dependency, because:

* **It parses with its own parser.** ``CatalogueServiceWeb._invoke`` parses every response with
  ``etree.parse(BytesIO(response))``, i.e. lxml's default parser, not our hardened
  :func:`harvest_pipeline.xmlsafe.parse_xml`: a DOCTYPE is accepted and internal entities are
  expanded. The project rule is one hardened parser for every response; OWSLib would parse
  first, before we could refuse anything.
* **It does its own HTTP.** Requests go through ``owslib.util.http_post`` with its own call,
  not our ``requests.Session``; the retries, politeness limits and size caps that wrap our one
  HTTP door would not apply, and per-source headers and auth would need a second plumbing.
* **It materializes whole pages into its own objects** (``CswRecord``, ``MD_Metadata``) that we
  would throw away: records are mapped by :mod:`harvest_pipeline.formats` from the raw element,
  and we need that raw element and its exact serialization for the content hash.
* **Its paging is the caller's job anyway**, and the guards this harvester needs (a silently
  capped ``maxRecords``, a ``nextRecord`` that does not advance, a changing
  ``numberOfRecordsMatched``) are not in it.
* **What it would save is small**: the Filter Encoding 1.1 we send is three operators
  (``PropertyIsGreaterThanOrEqualTo``, ``PropertyIsLessThan``, ``And``) plus ``SortBy``, about
  forty lines with lxml (:mod:`.build`), and capabilities are read for a handful of fields.

So the client builds GetRecords with lxml and parses every page with the hardened parser, one
page at a time.
"""

from harvest_pipeline.csw.build import CSW_NS, NAMESPACES, build_filter, build_get_records, format_instant
from harvest_pipeline.csw.client import GUARD_MATCHED_CHANGED, GUARD_NEXT_RECORD, CSWClient
from harvest_pipeline.csw.models import CswCapabilities, CswOperation, SearchResults, WindowConstraint
from harvest_pipeline.csw.parse import CSWException

ISO_SCHEMA = "http://www.isotc211.org/2005/gmd"

__all__ = [
    "CSW_NS",
    "ISO_SCHEMA",
    "NAMESPACES",
    "CSWClient",
    "CSWException",
    "CswCapabilities",
    "CswOperation",
    "GUARD_MATCHED_CHANGED",
    "GUARD_NEXT_RECORD",
    "SearchResults",
    "WindowConstraint",
    "build_filter",
    "build_get_records",
    "format_instant",
]
