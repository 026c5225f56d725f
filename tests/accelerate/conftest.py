import pytest


@pytest.fixture(autouse=True)
def reset_accelerate_state():
    """Accelerate keeps process-wide state; every test starts and ends without it."""
    from accelerate.state import AcceleratorState, GradientState, PartialState

    yield
    AcceleratorState._reset_state(reset_partial_state=True)
    PartialState._reset_state()
    GradientState._reset_state()
