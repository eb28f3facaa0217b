"""Shared helpers: parse the hand-written sample records with a safe, offline lxml parser."""

from __future__ import annotations

from pathlib import Path

import pytest
from lxml import etree

SAMPLES = Path(__file__).parent / "samples"


def safe_parser() -> etree.XMLParser:
    return etree.XMLParser(resolve_entities=False, no_network=True)


def parse_xml(text: str | bytes) -> etree._Element:
    if isinstance(text, str):
        text = text.encode("utf-8")
    return etree.fromstring(text, safe_parser())


def load_sample(name: str) -> etree._Element:
    return etree.parse(str(SAMPLES / name), safe_parser()).getroot()


@pytest.fixture
def sample():
    return load_sample


@pytest.fixture
def xml():
    return parse_xml
