"""The accelerate trainers (imported by name from the plugin's registrations)."""
