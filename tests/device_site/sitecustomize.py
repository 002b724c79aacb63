"""Imported at start-up by the Python child processes the tests start (tests/clitools.py puts this folder on
their PYTHONPATH under DFC_TEST_DEVICE=strict|gpu): `dfc run`, `dfc compile`, samples and scripts place
their Sessions on device 0 of that kind too, as tests/conftest.py does for the test process."""
import os

_KIND = os.environ.get("DFC_TEST_DEVICE", "cpu")
if _KIND != "cpu":
    from dfc.runtime import devices

    devices.set_default_device(f"{_KIND}:0")
