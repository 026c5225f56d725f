# rlkit's opt-in pytest plugin: fixtures (rlkit_host, register_plugin, fake_distribution),
# fakes (FakePlugin, FakeTrainer, RecordingObserver) and conformance checks.
pytest_plugins = ["rlkit_core.testing"]
