"""arXiv's own `arXiv` format and DOAJ's `oai_doaj` article records."""

from __future__ import annotations

from harvest_pipeline.formats import map_record

from .conftest import load_sample, parse_xml


def test_arxiv_record():
    r = map_record(load_sample("arxiv_full.xml"))
    assert r.format_name == "arxiv"
    assert r.title == "Tidal forces on small worked examples"  # wrapped over two lines
    assert r.creators == ["Nakamura, Hana", "Brown, Lee Jr", "The Example Collaboration"]
    assert r.subjects == ["hep-th", "math.QA", "81T40"]
    # the wrapped lines joined, a paragraph at each indented line
    assert r.description == ("We study tides on worked examples, line wrapped the way arXiv wraps every abstract."
                             "\n\nA second paragraph starts indented.")
    assert r.dates == ["2021-01-01", "2021-03-15"] and r.date == "2021-01-01"
    assert r.identifiers == ["arXiv:2101.00001", "10.5072/EX.1", "10.5072/EX.1-ERRATUM", "EX-2021-01"]
    assert r.doi == "10.5072/ex.1"
    assert r.url == "https://arxiv.org/abs/2101.00001"
    assert r.rights == ["http://creativecommons.org/licenses/by/4.0/"]


def test_arxiv_record_without_doi_or_update():
    r = map_record(parse_xml("""
        <arXiv xmlns="http://arxiv.org/OAI/arXiv/"><id>math/0301001</id><created>2003-01-01</created>
          <authors><author><keyname>Volokitin</keyname><forenames>D. M.</forenames></author></authors>
          <title>Old-style id</title><categories>math.GM</categories></arXiv>"""))
    assert r.dates == ["2003-01-01"] and r.doi is None and r.description is None
    assert r.url == "https://arxiv.org/abs/math/0301001" and r.identifiers == ["arXiv:math/0301001"]


def test_doaj_article():
    r = map_record(load_sample("oai_doaj_article.xml"))
    assert r.format_name == "oai_doaj"
    assert r.title == "Quay walls and their tides"
    assert r.creators == ["Ana María Sanz", "Kofi Mensah"]
    assert r.subjects == ["tides", "quay walls", "harbours"]  # the journal's stray separators dropped
    assert r.description == "Aim: to measure tides.\nMethods: a ruler."  # carriage returns are line breaks
    assert r.date == "2017-04-01" and r.dates == ["2017-04-01"]
    # the journal's ISSN is every article's: not an identifier of this one
    assert r.identifiers == ["10.5072/jwe.1311", "https://journal.example.org/pdf/1311.pdf"]
    assert r.doi == "10.5072/jwe.1311"
    assert r.url == "https://journal.example.org/pdf/1311.pdf"
