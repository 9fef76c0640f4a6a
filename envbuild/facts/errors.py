"""FactUnavailable: the one error of the facts layer, in a module of its own so that the readers (nvml.py,
stack.py, stack_view.py) and the sources that call them (source.py) do not import each other."""


class FactUnavailable(Exception):
    """A fact that cannot be read here; str(exc) says why (shown as the reason of a `skip`)."""


class FactHung(FactUnavailable):
    """A node command that did not answer by its deadline (it was killed with its children). Not a skip: a
    journalctl or dmesg that hangs is the node's own trouble (a wedged journald, filesystem or driver), so the
    doctor reports it as an error of the check that asked."""
