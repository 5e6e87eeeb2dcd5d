"""Fixtures several test files share."""
import pytest

from helpers import USER_CACHE

from ifcore.infer import registry


@pytest.fixture(scope="module")
def smollm2():
    """The dequantized SmolLM2 folder (built once in the user's cache); skipped without the registry wheel."""
    try:
        registry.smollm2_wheel()
    except FileNotFoundError as e:
        pytest.skip(f"{e} (make test downloads it)")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("IFCORE_CACHE", str(USER_CACHE))
        return registry.resolve("smollm2-135m")
