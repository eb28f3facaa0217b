"""arXiv mapper: the `arXiv` metadata format of export.arxiv.org/oai2 (root `arXiv:arXiv`).

A flat record; which element feeds which field:
  title       title (arXiv wraps long titles over lines: one line here)
  creators    each author as "keyname, forenames suffix" (keyname alone for a collaboration)
  subjects    the categories ("hep-th math.QA": one subject each), then msc-class and acm-class
  description abstract, its hard-wrapped lines joined: a line indented by arXiv starts a paragraph
  date        created (the first version's date); `dates` = created, then updated
  identifiers the arXiv id, as "arXiv:<id>", then each DOI and report number
  doi         the first of the doi element's DOIs (it lists several, separated by spaces)
  url         the abstract page, https://arxiv.org/abs/<id> (arXiv gives no URL; its ids map to one)
  rights      license
"""

from __future__ import annotations

from .identifiers import pick_doi
from .model import NormalizedRecord
from .text import child_text, clean, dedupe, first, grandchildren, raw_text, text

ARXIV_NS = "http://arxiv.org/OAI/arXiv/"
_P = f"{{{ARXIV_NS}}}"
ID, CREATED, UPDATED, AUTHORS, AUTHOR, KEYNAME, FORENAMES, SUFFIX = (_P + n for n in (
    "id", "created", "updated", "authors", "author", "keyname", "forenames", "suffix"))
TITLE, CATEGORIES, MSC_CLASS, ACM_CLASS, ABSTRACT, DOI, REPORT_NO, LICENSE = (_P + n for n in (
    "title", "categories", "msc-class", "acm-class", "abstract", "doi", "report-no", "license"))
ABS_PAGE = "https://arxiv.org/abs/"


def _author(el) -> str | None:
    keyname, forenames, suffix = child_text(el, KEYNAME), child_text(el, FORENAMES), child_text(el, SUFFIX)
    if not keyname:
        return forenames
    name = f"{keyname}, {forenames}" if forenames else keyname
    return f"{name} {suffix}" if suffix else name


def _abstract(el) -> str | None:
    """arXiv wraps abstracts at about 80 columns and indents each paragraph's first line."""
    paragraphs: list[list[str]] = []
    for line in raw_text(el).strip("\n").splitlines():
        if not line.strip():
            continue
        if not paragraphs or line[:1].isspace():
            paragraphs.append([])
        paragraphs[-1].append(line)
    return "\n\n".join(filter(None, (clean(" ".join(p)) for p in paragraphs))) or None


def map_arxiv(record) -> NormalizedRecord:
    """Map one `arXiv` element."""
    arxiv_id = child_text(record, ID)
    created, updated = child_text(record, CREATED), child_text(record, UPDATED)
    title = child_text(record, TITLE)
    dois = [doi for el in record.iterchildren(DOI) for doi in (text(el) or "").split()]
    reports = [text(el) for el in record.iterchildren(REPORT_NO)]
    categories = [c for el in record.iterchildren(CATEGORIES) for c in (text(el) or "").split()]
    classes = [text(el) for el in record.iterchildren(MSC_CLASS, ACM_CLASS)]
    return NormalizedRecord(
        title=title,
        titles=[title] if title else [],
        creators=dedupe(_author(a) for a in grandchildren(record, AUTHORS, AUTHOR)),
        subjects=dedupe(categories + classes),
        description=first(_abstract(el) for el in record.iterchildren(ABSTRACT)),
        dates=dedupe([created, updated]),
        date=created or updated,
        identifiers=dedupe([f"arXiv:{arxiv_id}" if arxiv_id else None, *dois, *reports]),
        doi=pick_doi(dois),
        url=ABS_PAGE + arxiv_id if arxiv_id else None,
        rights=dedupe(text(el) for el in record.iterchildren(LICENSE)),
        format_name="arxiv",
    )


REGISTRATIONS = ((ARXIV_NS, "arXiv", map_arxiv, "arxiv"),)
