"""DOAJ mapper: `oai_doaj:doajArticle`, the article records of doaj.org/oai.article.

A flat record; which element feeds which field:
  title       title
  creators    each author's name
  subjects    each keyword (separators the journals leave around them, "; Blogs", dropped)
  description abstract (its carriage returns read as line breaks)
  date        publicationDate
  language    the first language
  identifiers the DOI, then the full-text URLs
  url         the first full-text URL (DOAJ gives no landing page of its own)
The journal's ISSN and eISSN are not the article's identifiers (every article of the journal has
them); they, the journal's title, volume, issue and pages stay in the raw XML.
"""

from __future__ import annotations

from .identifiers import pick_doi, pick_url
from .model import NormalizedRecord
from .text import block_text, dedupe, first, grandchildren, text

DOAJ_NS = "http://doaj.org/features/oai_doaj/1.0/"
_P = f"{{{DOAJ_NS}}}"
TITLE, AUTHORS, AUTHOR, NAME, KEYWORDS, KEYWORD, ABSTRACT, PUBLICATION_DATE = (_P + n for n in (
    "title", "authors", "author", "name", "keywords", "keyword", "abstract", "publicationDate"))
LANGUAGE, DOI, FULL_TEXT_URL = (_P + n for n in ("language", "doi", "fullTextUrl"))

_SEPARATORS = " ;,"


def _texts(el, tag: str) -> list[str | None]:
    return [text(child) for child in el.iterchildren(tag)]


def map_doaj_article(article) -> NormalizedRecord:
    """Map one `doajArticle` element."""
    titles = dedupe(_texts(article, TITLE))
    dois = dedupe(_texts(article, DOI))
    urls = dedupe(_texts(article, FULL_TEXT_URL))
    dates = dedupe(_texts(article, PUBLICATION_DATE))
    keywords = ((text(el) or "").strip(_SEPARATORS) for el in grandchildren(article, KEYWORDS, KEYWORD))
    return NormalizedRecord(
        title=titles[0] if titles else None,
        titles=titles,
        creators=dedupe(text(name) for author in grandchildren(article, AUTHORS, AUTHOR)
                        for name in author.iterchildren(NAME)),
        subjects=dedupe(keywords),
        description=first(block_text(el) for el in article.iterchildren(ABSTRACT)),
        dates=dates,
        date=dates[0] if dates else None,
        language=first(_texts(article, LANGUAGE)),
        identifiers=dedupe(dois + urls),
        doi=pick_doi(dois),
        url=pick_url(urls),
        format_name="oai_doaj",
    )


REGISTRATIONS = ((DOAJ_NS, "doajArticle", map_doaj_article, "oai_doaj"),)
