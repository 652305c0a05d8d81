"""A package so that ``tests/cost/conftest.py`` is imported as ``cost.conftest``, not in place of
``tests/conftest.py`` (see ``tests/real/__init__.py``)."""
