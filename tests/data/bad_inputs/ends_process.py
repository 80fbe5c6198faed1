"""A --torch / --keras module whose function ends its own process instead of returning:
``os._exit(0)`` (``exit_now``) or SIGKILL to itself (``kill_self``)."""
import os
import signal


def exit_now():
    os._exit(0)


def kill_self():
    os.kill(os.getpid(), signal.SIGKILL)
