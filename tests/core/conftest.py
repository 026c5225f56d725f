import pytest

from rlkit_core.testing import FakePlugin


@pytest.fixture
def fake_host(rlkit_bare_host):
    """A host with only the fakes: method ``fake`` (online), trainer ``FakeTrainer``,
    pipelines ``FakePromptPipeline``/``in_memory``, reward ``constant``, metric ``length``."""
    rlkit_bare_host.register(FakePlugin(), "fakes", source="test")
    return rlkit_bare_host
