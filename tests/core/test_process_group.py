"""rlkit_core.process_group: the default process group is destroyed at a clean exit, and left
alone after an uncaught exception. Each case is its own interpreter, so atexit really runs."""

import subprocess
import sys
import textwrap

import pytest

# An observer registered before rlkit's handler runs after it (atexit is last in, first out)
# and prints whether the group survived.
SCRIPT = textwrap.dedent("""
    import atexit, sys
    import torch.distributed as dist
    from rlkit_core.process_group import destroy_at_clean_exit

    atexit.register(lambda: print("initialized at exit:", dist.is_initialized(), flush=True))
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    destroy_at_clean_exit()
    destroy_at_clean_exit()  # a second engine in the same process
    ENDING
""")


def run(ending: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", SCRIPT.replace("ENDING", ending)],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("ending", ["pass", "sys.exit(0)", "sys.exit(3)"])
def test_the_group_is_destroyed_when_the_script_ends(ending):
    result = run(ending)
    assert "initialized at exit: False" in result.stdout, result.stderr[-2000:]


def test_a_group_the_script_destroyed_itself_is_left_alone():
    result = run("dist.destroy_process_group()")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "initialized at exit: False" in result.stdout


def test_after_an_uncaught_exception_the_group_is_left_to_the_launcher():
    result = run("raise ValueError('boom')")
    assert result.returncode == 1 and "ValueError: boom" in result.stderr
    assert "initialized at exit: True" in result.stdout
