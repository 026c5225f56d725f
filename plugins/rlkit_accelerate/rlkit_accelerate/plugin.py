"""Entry point of rlkit-accelerate: the ``accelerate`` backend, its trainers, the
``rlkit report`` command and the end-of-run report.

Trainers are named by import strings and everything heavy is imported inside functions, so
listing plugins imports neither torch nor transformers.
"""

from pathlib import Path

from rlkit_core import BackendSpec, TrainerSpec, hookimpl

_T = "rlkit_accelerate.trainers"


@hookimpl
def rlkit_register_backends():
    return [
        BackendSpec(
            "accelerate",
            trainers=[
                TrainerSpec("AcceleratePPOTrainer", f"{_T}.ppo:AcceleratePPOTrainer", method="ppo"),
                TrainerSpec("AccelerateILQLTrainer", f"{_T}.ilql:AccelerateILQLTrainer", method="ilql"),
                TrainerSpec("AccelerateSFTTrainer", f"{_T}.sft:AccelerateSFTTrainer", method="sft"),
            ],
            description="HF transformers + accelerate (DDP, DeepSpeed, FSDP)",
        )
    ]


@hookimpl
def rlkit_register_commands(app):
    import typer

    @app.command("report")
    def report_command(run_dir: Path = typer.Argument(..., help="A run's checkpoint_dir (or its logs folder).")):
        """Print a run's report (before/after samples, reward, time per phase) and write report.png."""
        from rlkit_accelerate.report import report

        report(run_dir)


@hookimpl
def rlkit_train_end(trainer, error, is_main_process):
    """After a successful run of one of our trainers, the report (main process only)."""
    if error is not None or not is_main_process or not type(trainer).__module__.startswith(_T):
        return
    from rlkit_accelerate.report import report

    report(trainer.logging_dir)
