"""A package so that ``tests/real/conftest.py`` is imported as ``real.conftest``.

Without it pytest would import it as ``conftest``, in place of ``tests/conftest.py``, and every test
module collected after it that does ``from conftest import ...`` would get the wrong module.
"""
