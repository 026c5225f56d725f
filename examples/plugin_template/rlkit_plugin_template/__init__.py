"""An example third-party rlkit plugin (see README.md)."""
