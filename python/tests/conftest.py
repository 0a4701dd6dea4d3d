"""pytest configuration: the package location (see stoker_testing.py) and shared fixtures.

Helpers live in stoker_testing.py, not here, because several test trees in this repository
have a conftest.py and `import conftest` would be ambiguous."""

import pytest

import stoker_testing  # noqa: F401 -- sets up sys.path before any test imports stoker


@pytest.fixture(scope="session")
def image_folder(tmp_path_factory):
    """24 small JPEGs in 3 classes (ImageFolder layout: class_k/img_i.jpg)."""
    return stoker_testing.write_image_folder(str(tmp_path_factory.mktemp("images")))
