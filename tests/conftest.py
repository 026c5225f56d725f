"""Ctrl-C does in every test what it does in a terminal.

A suite started in the background by a non-interactive shell (`cmd &`, nohup, some CI
runners) inherits SIGINT ignored: Python then installs no KeyboardInterrupt handler, and
the processes the tests start inherit the ignore, so the tests of rlkit's Ctrl-C handling
would see nothing. Python's own handler is put back (a process started from here gets the
default again at exec)."""

import signal

if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
