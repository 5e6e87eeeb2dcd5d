"""Fixtures several test files share, and the Hypothesis settings every property test starts from."""
import pytest
from hypothesis import HealthCheck, settings

from helpers import USER_CACHE

from ifcore.infer import registry

# No per-example deadline and no too-slow health check: on a busy shared 2-core machine a slow example is load,
# not a bug (Hypothesis would fail it as DeadlineExceeded, Flaky or FailedHealthCheck). The properties assert
# results; growth in time is pinned by ratios. (A test's own suppress_health_check replaces this list.)
settings.register_profile("ifcore", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ifcore")


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
