"""A plugin attribute imported when first read (:class:`cdc.support.lazy.Attribute`) reads as the
function itself, on the class and on an instance, and an AttributeError while importing it is
not taken for a missing attribute by ``getattr(plugin, name, None)``."""

from __future__ import annotations

import json

import pytest

from cdc.support import lazy


class Plugin:
    dumps = lazy.Attribute("json", "dumps")
    gone = lazy.Attribute("json", "no_such_function")


def test_it_reads_as_the_function_on_the_class_and_an_instance() -> None:
    assert Plugin.dumps is json.dumps
    assert Plugin().dumps is json.dumps
    assert Plugin.dumps({"a": 1}) == '{"a": 1}'


def test_a_name_the_module_lacks_is_an_import_error_not_a_missing_attribute() -> None:
    with pytest.raises(ImportError, match=r"json\.no_such_function"):
        getattr(Plugin, "gone", None)
