"""Proceedings of Science mapper: `pos-ext_dc:pex-dc`, the `pos-ext_dc` prefix of pos.sissa.it/oai.

PoS's extended Dublin Core: the fifteen Dublin Core elements in a namespace of their own, except
that a `creator` holds a `name` and an `affiliation`. It is read as Dublin Core (oai_dc.py's
choices) with each creator's name; affiliations stay in the raw XML. The root is in the schema
document's URL as namespace (`.../pos-ext_dc/pos-ext_dc.xsd`), the elements in `.../pos-ext_dc/`;
both are accepted for the root.
"""

from __future__ import annotations

from lxml import etree

from .model import NormalizedRecord
from .oai_dc import DC_NS, OAI_DC_NS, map_dc
from .text import child_text, raw_text

POS_NS = "http://pos.sissa.it/pos-ext_dc/"
POS_SCHEMA_NS = "http://pos.sissa.it/pos-ext_dc/pos-ext_dc.xsd"
_P = f"{{{POS_NS}}}"
CREATOR, NAME = _P + "creator", _P + "name"


def map_pos_ext_dc(root) -> NormalizedRecord:
    """Map one `pex-dc` element: its elements as Dublin Core, a creator by its name."""
    dc = etree.Element(f"{{{OAI_DC_NS}}}dc")
    for child in root.iterchildren(etree.Element):
        if not child.tag.startswith(_P):
            continue
        value = child_text(child, NAME) if child.tag == CREATOR and len(child) else raw_text(child)
        etree.SubElement(dc, f"{{{DC_NS}}}{child.tag[len(_P):]}").text = value
    record = map_dc(dc)
    record.format_name = "pos_ext_dc"
    return record


REGISTRATIONS = tuple((ns, "pex-dc", map_pos_ext_dc, "pos_ext_dc") for ns in (POS_SCHEMA_NS, POS_NS))
